"""The trace simulator: exact schedules on hand-made traces, the reader on what real logs
contain, conservation on the real traces, and the `elasticd sim` command end to end."""

from __future__ import annotations

import csv
import gc
import json
import math
import subprocess
from pathlib import Path

import pytest

from conftest import BIN
from elastic_protocol.models import Amdahl
from elastic_protocol.timefmt import MAX_TIME_LIMIT
from elasticd.metrics import JobRow, busy_node_seconds, windowed_summary
from elasticd.perjob import read as read_per_job
from elasticd.policies import make_policy
from elasticd.policies.registry import REGISTRY
from elasticd.sim.rows import job_rows
from elasticd.sim.simulator import JobOutcome, Simulation, simulate
from elasticd.sim.swf import Trace, TraceError, read_swf
from elasticd.sim.workload import MalleabilityRule, SimJob, build_workload, node_range

TRACES = Path(__file__).resolve().parent.parent / "examples" / "traces"


def swf(tmp_path: Path, rows: list[str], header: str = "; MaxNodes: 4\n; MaxProcs: 4\n") -> Path:
    p = tmp_path / "t.swf"
    p.write_text(header + "\n".join(rows) + "\n")
    return p


def row(jid: int, submit: float, run: float, procs: int, req: float, status: int = 1) -> str:
    return f"{jid} {submit} -1 {run} {procs} -1 -1 {procs} {req} -1 {status} 1 1 -1 -1 -1 -1 -1"


TINY = [
    row(1, 0, 100, 3, 100),
    row(2, 10, 50, 2, 50),
    row(3, 20, 30, 1, 30),
    row(4, 30, 200, 1, 200),
]


def starts(tmp_path: Path, policy: str, rows: list[str] = TINY) -> dict[int, tuple[float, float]]:
    trace = read_swf(swf(tmp_path, rows))
    out = simulate(build_workload(trace, 0.0, 1), trace.nodes, make_policy(policy))
    return {o.job_id: (o.start, o.end) for o in out}


def test_fcfs_schedule_of_a_tiny_trace_is_exactly_as_computed_by_hand(tmp_path: Path) -> None:
    # 4 nodes. J1 takes 3 at 0; J2 (2 nodes) blocks the queue until J1 ends at 100;
    # then J2, J3 and J4 all start at 100.
    assert starts(tmp_path, "fcfs") == {1: (0, 100), 2: (100, 150), 3: (100, 130), 4: (100, 300)}


def test_easy_schedule_of_a_tiny_trace_is_exactly_as_computed_by_hand(tmp_path: Path) -> None:
    # J2 waits for J1 (reservation at 100, 2 spare nodes then). J3 (30 s) ends by 100:
    # backfilled at 20. J4 (200 s) would not end by 100 but fits the spare nodes: it is
    # backfilled when J3 frees a node at 50. J2 starts at its reservation, 100.
    assert starts(tmp_path, "easy") == {1: (0, 100), 2: (100, 150), 3: (20, 50), 4: (50, 250)}


def test_easy_refuses_a_backfill_that_would_delay_the_reservation(tmp_path: Path) -> None:
    # As above but J2 needs all 4 nodes: no spare at the reservation, so the long 1-node
    # J4 must not start before J2; the short J3 still may.
    rows = [row(1, 0, 100, 3, 100), row(2, 10, 50, 4, 50), row(3, 20, 30, 1, 30), row(4, 30, 200, 1, 200)]
    got = starts(tmp_path, "easy", rows)
    assert got[3] == (20, 50)
    assert got[2] == (100, 150)
    assert got[4] == (150, 350)


def test_reader_counts_every_dropped_job_under_its_reason(tmp_path: Path) -> None:
    rows = [
        row(1, 100, 50, 2, 60),
        row(2, 110, 0, 2, 60),  # cancelled: zero run time
        row(3, 120, -1, 2, 60),  # unknown run time
        row(4, 130, 50, 9, 60),  # wider than the machine
        row(5, 140, 80, 1, -1),  # no requested time
        row(6, 150, 90, 1, 30),  # ran past its request
        "7 160 -1 abc 1",  # malformed
        "",
        row(8, 170, 10, -1, 20),  # unknown size
    ]
    t = read_swf(swf(tmp_path, rows))
    assert [j.job_id for j in t.jobs] == [1, 5, 6]
    assert t.jobs[0].submit == 0  # submit times start at the first kept job
    assert t.dropped == {
        "zero or unknown run time (cancelled)": 2,
        "wider than the machine": 1,
        "malformed line": 1,
        "unknown size": 1,
    }
    assert t.bad_lines == [9]  # header lines count: the malformed row is line 9 of the file
    by_id = {j.job_id: j for j in t.jobs}
    assert by_id[5].limit == pytest.approx(100)  # 1.25 x run
    assert by_id[6].limit == 90  # never below the run time
    assert "dropped" in t.report() and "malformed lines 9" in t.report()


def test_reader_in_strict_mode_names_the_malformed_line(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match=r"t.swf:4: malformed SWF line"):
        read_swf(swf(tmp_path, [row(1, 0, 5, 1, 5), "1 2 3"]), strict=True)


def test_reader_needs_a_capacity(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match="no capacity"):
        read_swf(swf(tmp_path, [row(1, 0, 5, 1, 5)], header=""))
    t = read_swf(swf(tmp_path, [row(1, 0, 5, 1, 5)], header=""), nodes=8)
    assert t.nodes == 8


def test_processors_become_nodes_with_cores_per_node(tmp_path: Path) -> None:
    t = read_swf(swf(tmp_path, [row(1, 0, 5, 3, 5)], header="; MaxNodes: 8\n; MaxProcs: 8\n"), cores_per_node=2)
    assert t.nodes == 4 and t.jobs[0].nodes == 2


def test_malleable_fraction_is_seeded_and_nested() -> None:
    trace = read_swf(TRACES / "hpc2n-2002-subset.swf.gz")
    w20 = {j.job_id for j in build_workload(trace, 0.2, 7) if j.malleable}
    w40 = {j.job_id for j in build_workload(trace, 0.4, 7) if j.malleable}
    assert len(w20) == round(0.2 * len(trace.jobs))
    assert w20 < w40
    assert w20 == {j.job_id for j in build_workload(trace, 0.2, 7) if j.malleable}
    assert w20 != {j.job_id for j in build_workload(trace, 0.2, 8) if j.malleable}


def test_mebf_rule_sets_half_and_five_times_the_logged_size() -> None:
    rule = MalleabilityRule(rule="mebf")
    assert node_range(8, Amdahl(0.01), 100, rule) == (4, 40, 8)
    assert node_range(30, Amdahl(0.01), 100, rule) == (15, 100, 30)  # capped by the machine
    assert node_range(1, Amdahl(0.01), 100, rule) == (1, 5, 1)


def test_efficiency_rule_brackets_the_logged_size() -> None:
    rule = MalleabilityRule()
    lo, hi, pref = node_range(64, Amdahl(0.002), 4096, rule)
    assert lo <= pref <= hi and lo <= 64 <= hi
    # E(n) = 1 / (f n + 1 - f) >= 0.8  <=>  f (n - 1) <= 0.25  <=>  n <= 126 for f = 0.2 %
    assert pref == 126


def test_a_job_logged_size_runs_exactly_its_logged_time(tmp_path: Path) -> None:
    trace = read_swf(swf(tmp_path, [row(1, 0, 100, 2, 100)]))
    out = simulate(build_workload(trace, 0.0, 1), trace.nodes, make_policy("easy"))
    assert out[0].end - out[0].start == pytest.approx(100)


def _check_conservation(out: list[JobOutcome], nodes: int, n_jobs: int, jobs: list[SimJob]) -> None:
    assert len(out) == n_jobs and all(o.state == "COMPLETED" for o in out)
    changes = []
    for o in out:
        assert o.start is not None and o.end is not None
        assert o.start >= o.submit - 1e-9, f"job {o.job_id} ran before its submission"
        assert o.end > o.start
        prev = 0
        for t, n in o.sizes:
            changes.append((t, n - prev))
            prev = n
        assert prev == 0
    busy = 0
    for _, d in sorted(changes, key=lambda c: (c[0], c[1])):  # frees before takes at one instant
        busy += d
        assert 0 <= busy <= nodes, "capacity exceeded"
    rows = job_rows(jobs, out)
    assert busy_node_seconds(rows, -1, 1e18) == pytest.approx(sum(o.node_seconds for o in out), rel=1e-9)


@pytest.mark.parametrize(("trace_name", "policy", "fraction"), [
    ("hpc2n-2002-subset.swf.gz", "easy", 0.0),
    ("hpc2n-2002-subset.swf.gz", "malleable", 1.0),
    ("hpc2n-2002-subset.swf.gz", "malleable", 0.4),
    ("theta-2023.swf.gz", "easy", 0.0),
])
def test_real_traces_conserve_jobs_time_and_capacity(trace_name: str, policy: str, fraction: float) -> None:
    trace = read_swf(TRACES / trace_name)
    jobs = build_workload(trace, fraction, 3)
    out = simulate(jobs, trace.nodes, make_policy(policy))
    _check_conservation(out, trace.nodes, len(trace.jobs), jobs)
    if fraction:
        assert sum(o.shrinks + o.expands for o in out) > 0


def rec(jid: int, submit: float, start: float, end: float, nodes: int) -> JobRow:
    """A rigid job that ran unresized: its static run is its run."""
    return JobRow(jid, "rigid", "COMPLETED", submit, start, end, end - start, end - start, nodes, nodes, nodes, nodes,
                  nodes, nodes, 0, 0, 0.0, 0.0)


def test_windowed_summary_excludes_warm_up_and_drain_down() -> None:
    recs = [
        rec(1, 0, 0, 10, 2),  # in the warm-up: excluded
        rec(2, 100, 100, 200, 1),
        rec(3, 150, 160, 400, 2),  # last submission at 150
    ]
    s = windowed_summary(recs, total_nodes=2, warmup=50)
    assert s.jobs == 2
    assert s.mean_wait == pytest.approx(5)
    assert s.makespan == 400
    # Window [50, 150]: job 2 uses 1 node for 50 s of it; job 3 has not started.
    assert s.utilization == pytest.approx(50 / (2 * 100))



def test_utilization_of_jobs_submitted_at_one_instant_is_the_whole_runs() -> None:
    # No submission window to measure over (one job, or a batch submitted at once): the run's.
    one = [rec(1, 5, 5, 105, 2)]
    assert windowed_summary(one, total_nodes=4, warmup=0).utilization == pytest.approx(0.5)
    batch = [rec(1, 0, 0, 100, 4), rec(2, 0, 100, 200, 2)]
    assert windowed_summary(batch, total_nodes=4, warmup=0).utilization == pytest.approx(600 / 800)

# Pure CPU (8 simulations of 3145 jobs, then plots): 81 s and then over 120 s with 4 busy loops
# on 2 cores and the suite on -n 2, where the default 120 s timeout ended it. 300 s: a hang guard.
@pytest.mark.timeout(300)
def test_sim_command_writes_per_job_files_csv_json_and_plots_from_them(tmp_path: Path) -> None:
    out = tmp_path / "out"
    r = subprocess.run([str(BIN / "elasticd"), "sim", str(TRACES / "hpc2n-2002-subset.swf.gz"), "--policy", "easy",
                        "--policy", "malleable", "--malleable", "0,100", "--seeds", "2", "--out", str(out),
                        "--workers", "2"], check=False, capture_output=True, text=True, timeout=280)
    assert r.returncode == 0, r.stderr
    assert "3145 jobs kept on 240 nodes" in r.stdout
    assert "malleable  100" in r.stdout
    # Seeds differ by up to tens of times on one configuration: the table shows their range,
    # and each cell's paired change against rigid EASY with its 95 % interval.
    assert "TURNAROUND(s) [min..max]" in r.stdout and "BSLD [min..max]" in r.stdout, r.stdout
    assert "STRETCH p95/max" in r.stdout and "vs EASY 0%: TAT / BSLD [95% CI]" in r.stdout, r.stdout
    row = next(line for line in r.stdout.splitlines() if line.startswith("malleable  100"))
    assert row.split()[2] == "2" and row.count("[") == 5, row
    with open(out / "runs.csv") as f:
        runs = list(csv.DictReader(f))
    assert len(runs) == 8
    # A per-job file per run, named in runs.csv, holding every job of the trace.
    for run in runs:
        rows = read_per_job(out / "jobs" / run["file"]).rows
        assert len(rows) == 3145 and int(run["file_bytes"]) == (out / "jobs" / run["file"]).stat().st_size
    doc = json.loads((out / "results.json").read_text())
    assert doc["trace"]["dropped"] == {"zero or unknown run time (cancelled)": 25}
    cell = next(s for s in doc["summary"] if s["policy"] == "malleable" and s["fraction"] == 1.0)
    base = next(s for s in doc["summary"] if s["policy"] == "easy" and s["fraction"] == 0.0)
    assert cell["mean_wait_mean"] < base["mean_wait_mean"]
    assert {"mean_wait_mean", "mean_wait_median", "mean_wait_iqr", "stretch_p95_mean"} <= set(cell)
    assert "plots in" in r.stdout and "from the per-job files" in r.stdout
    for png in ("grid.png", "utilization.png", "gantt-easy-rigid.png", "gantt-easy.png", "gantt-malleable.png"):
        data = (out / png).read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000


def test_sim_command_rejects_bad_arguments_clearly(tmp_path: Path) -> None:
    r = subprocess.run([str(BIN / "elasticd"), "sim", str(tmp_path / "missing.swf")], check=False, capture_output=True, text=True, timeout=30)
    assert r.returncode == 1 and "cannot read" in r.stderr and "Traceback" not in r.stderr
    r = subprocess.run([str(BIN / "elasticd"), "sim", str(TRACES / "hpc2n-2002-subset.swf.gz"), "--malleable", "0,150"],
                       check=False, capture_output=True, text=True, timeout=30)
    assert r.returncode == 1 and "within 0..100" in r.stderr


def test_a_trace_whose_jobs_count_processors_is_read_in_nodes_from_its_header(tmp_path: Path) -> None:
    """Finding 4: MaxNodes 4 and MaxProcs 16 with jobs of up to 16 processors is a 4-node
    machine of 4 processors each, said in one line; read as nodes it would drop every wide job."""
    rows = [row(1, 0, 50, 16, 60), row(2, 5, 50, 6, 60), row(3, 9, 10, 1, 20)]
    t = read_swf(swf(tmp_path, rows, header="; MaxNodes: 4\n; MaxProcs: 16\n"))
    assert t.nodes == 4 and [j.nodes for j in t.jobs] == [4, 2, 1]
    assert "4 per node from the header's MaxProcs 16 / MaxNodes 4" in t.report()


def test_a_reading_that_makes_many_jobs_wider_than_the_machine_is_an_error_naming_the_options(tmp_path: Path) -> None:
    rows = [row(i, i, 50, 16 if i % 2 else 2, 60) for i in range(1, 41)]
    path = swf(tmp_path, rows, header="; MaxNodes: 4\n")  # no MaxProcs: sizes taken for nodes
    with pytest.raises(TraceError, match=r"20 of 40 jobs are wider than the machine read as 4 nodes.*--cores-per-node.*--nodes"):
        read_swf(path)
    assert read_swf(path, cores_per_node=4).nodes == 4  # what the error suggests works


def test_a_few_jobs_wider_than_the_machine_are_dropped_and_counted(tmp_path: Path) -> None:
    rows = [row(i, i, 50, 2, 60) for i in range(1, 200)] + [row(200, 300, 50, 9, 60)]
    t = read_swf(swf(tmp_path, rows))
    assert len(t.jobs) == 199 and t.dropped["wider than the machine"] == 1


@pytest.fixture(scope="module")
def short_trace() -> Trace:
    t = read_swf(TRACES / "sdsc-sp2-1998.swf.gz")
    return Trace(t.name, t.nodes, t.jobs[:200])


@pytest.mark.parametrize("policy", sorted(REGISTRY))
def test_a_simulation_under_each_policy_makes_no_reference_cycles(policy: str, short_trace: Trace) -> None:
    # The simulator skips full collections during a run (Simulation.run): cycles a pass
    # leaves that outlive the young collections (SD-Policy's self-calling mate search left
    # ~60 per job) pile up until the run ends.
    trace = short_trace
    sim = Simulation(build_workload(trace, 1.0, 1), trace.nodes, make_policy(policy), record_hosts=False)
    gc.collect()
    gc.disable()
    try:
        sim._run()
        assert gc.collect() == 0
    finally:
        gc.enable()


def test_a_simulated_jobs_spec_is_what_pydantic_makes_of_the_same_fields() -> None:
    # The simulator fills its specs in without pydantic's copying (simulator._filled): a
    # pydantic that keeps a model's parts otherwise must fail here, not drift unseen.
    from elastic_protocol.jobspec import JobKind, JobSpec, NodeRange, PerfModel
    from elasticd.sim.simulator import _spec
    from elasticd.sim.workload import SimJob

    trace = read_swf(TRACES / "sdsc-sp2-1998.swf.gz")
    jobs = build_workload(Trace(trace.name, trace.nodes, trace.jobs[:300]), 0.5, 4)
    j = jobs[0]
    jobs += [SimJob(9, 0.0, 10.0, 2, 1e12, False, 1, 4, 3, j.speedup, 10.0, j.cost, moldable=True, has_model=False)]
    kinds = set()
    for j in jobs:
        spec = _spec(j)
        seconds = math.ceil(j.limit_at_preferred)
        tl = None if seconds > MAX_TIME_LIMIT else f"{seconds // 60}:{seconds % 60:02d}"
        model = PerfModel.model_construct(speedup="linear", work=None, alpha=0.0, beta=0.0, b=0.0).model_copy(
            update={"speedup": j.speedup.text, "alpha": j.cost.alpha, "beta": j.cost.beta, "b": j.cost.b})
        template = JobSpec.model_construct(name="sim", command=["sim"], nodes=1, kind=JobKind.RIGID, time_limit="1:00")
        if j.malleable or j.moldable:
            nodes = NodeRange.model_construct(min=1, max=1, preferred=1).model_copy(
                update={"min": j.min_nodes, "max": j.max_nodes, "preferred": j.preferred})
            kind = JobKind.MALLEABLE if j.malleable else JobKind.MOLDABLE
            want = template.model_copy(update={"nodes": nodes, "kind": kind, "time_limit": tl,
                                               "model": model if j.has_model else None})
        else:
            want = template.model_copy(update={"nodes": j.nodes, "time_limit": tl,
                                               "model": model if j.has_model else None})
        assert spec == want
        assert spec.model_dump() == want.model_dump()
        assert spec.model_fields_set == want.model_fields_set
        assert JobSpec.model_validate(spec.model_dump()) == spec  # a valid job file
        for part, wanted in ((spec.nodes, want.nodes), (spec.model, want.model)):
            if isinstance(part, NodeRange | PerfModel):
                assert part.model_fields_set == wanted.model_fields_set
        kinds.add((spec.resolved_kind, spec.model is None, spec.time_limit is None))
    assert kinds >= {(JobKind.RIGID, False, False), (JobKind.MALLEABLE, False, False), (JobKind.MOLDABLE, True, True)}
