"""Per-job files: a reader recomputes a run's summary from its file alone, exactly; the same
run gives the same bytes on one worker or two; each job's run is replayed from its recorded
resizes; the columns are the documented ones; and --load scales the offered load."""

from __future__ import annotations

import csv
import gzip
import io
import itertools
import statistics
import subprocess
from dataclasses import asdict
from pathlib import Path

import pytest

from conftest import BIN
from elastic_protocol.models import predicted_runtime
from elasticd.metrics import summarize_window
from elasticd.perjob import COLUMNS, PerJobFileError, read
from elasticd.sim.grid import GridSettings, RunKey, RunResult, TraceSource, run_grid, run_one
from elasticd.sim.workload import at_load, build_workload, offered_load

ROOT = Path(__file__).resolve().parent.parent
TRACES = ROOT / "examples" / "traces"
SOURCE = TraceSource(TRACES / "hpc2n-2002-subset.swf.gz", max_jobs=600)


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[RunResult]]:
    out = tmp_path_factory.mktemp("runs")
    trace = SOURCE.load()
    keys = [RunKey("hpc2n", "easy", 0.0, 1), RunKey("hpc2n", "pref", 0.5, 1), RunKey("hpc2n", "avg", 1.0, 2, 2.0),
            RunKey("hpc2n", "sd", 0.5, 1, 0.5, "downward")]
    results = [run_one(trace, k, GridSettings(warmup=3600.0, out=out)) for k in keys]
    return out, results


def test_a_runs_summary_is_recomputed_from_its_per_job_file_alone_exactly(made: tuple[Path, list[RunResult]]) -> None:
    out, results = made
    for res in results:
        assert res.file is not None
        f = read(out / res.file)
        assert len(f.rows) == 600
        again = summarize_window(f.rows, f.machine_nodes, *f.window)
        assert asdict(again) == asdict(res.metrics)


def test_the_file_is_read_without_our_code_into_the_documented_columns(made: tuple[Path, list[RunResult]]) -> None:
    out, results = made
    res = results[1]
    text = gzip.decompress((out / res.file).read_bytes()).decode()
    rows = list(csv.DictReader(io.StringIO(text)))
    assert tuple(rows[0]) == COLUMNS
    doc = (ROOT / "docs" / "per-job-files.md").read_text()
    assert all(f"`{c}`" in doc for c in COLUMNS)
    # Mean turnaround and bounded slowdown over the measured jobs, as the documentation says
    # to compute them, from the text alone.
    w0, w1 = float(rows[0]["window_start"]), float(rows[0]["window_end"])
    measured = [r for r in rows if w0 <= float(r["submit"]) <= w1]
    tat = [float(r["end"]) - float(r["submit"]) for r in measured]
    bsld = [max(1.0, t / max(float(r["static_run"]), 10.0)) for t, r in zip(tat, measured)]
    m = res.metrics
    assert statistics.fmean(tat) == pytest.approx(m.mean_turnaround, rel=1e-12)
    assert statistics.fmean(bsld) == pytest.approx(m.mean_bounded_slowdown, rel=1e-12)
    assert m.mean_bounded_slowdown > 1.0 and any(r["size_changes"] for r in rows)


def test_every_jobs_run_is_its_model_replayed_over_its_recorded_resizes(made: tuple[Path, list[RunResult]]) -> None:
    """The size changes and reconfiguration seconds a file records are the ones the simulator
    charged: each completed job's run is what its model gives over them (to the file's ms)."""
    out, results = made
    trace = SOURCE.load()
    res = results[2]  # avg at 100 %, load x2
    jobs = {j.job_id: j for j in build_workload(at_load(trace, 2.0), 1.0, 2)}
    rows = read(out / res.file).rows
    resized = 0
    for r in rows:
        assert r.start is not None and r.end is not None
        j = jobs[r.job_id]
        history = [(0.0, r.start_nodes), *((t - r.start, n) for t, n in r.size_changes)]
        reconf = sum(j.cost.seconds(a, b) for (_, a), (_, b) in itertools.pairwise(history))
        assert r.reconfig_seconds == pytest.approx(reconf, abs=1e-3)
        if r.state == "COMPLETED":
            assert predicted_runtime(j.work, j.speedup, history, j.cost) == pytest.approx(r.end - r.start, abs=0.01)
        resized += bool(r.size_changes)
    assert resized > 100


@pytest.mark.timeout(300)
def test_the_same_runs_give_the_same_bytes_on_one_worker_and_on_two(tmp_path: Path) -> None:
    keys = [RunKey("hpc2n", p, f, s) for p in ("easy", "payoff") for f in (0.0, 0.5) for s in (1, 2)]
    one = run_grid({"hpc2n": SOURCE}, keys, GridSettings(out=tmp_path / "one"), workers=1)
    two = run_grid({"hpc2n": SOURCE}, keys, GridSettings(out=tmp_path / "two"), workers=2)
    for a, b in zip(one, two):
        assert a.key == b.key and a.metrics == b.metrics and a.file == b.file
        assert (tmp_path / "one" / a.file).read_bytes() == (tmp_path / "two" / b.file).read_bytes()


def test_a_damaged_file_is_refused_naming_the_line(tmp_path: Path) -> None:
    bad = tmp_path / "x.csv.gz"
    bad.write_bytes(gzip.compress((",".join(COLUMNS) + "\n1,rigid,COMPLETED,zero\n").encode()))
    with pytest.raises(PerJobFileError, match="line 2"):
        read(bad)
    (tmp_path / "y.csv.gz").write_bytes(b"not gzip")
    with pytest.raises(PerJobFileError, match="not a readable per-job file"):
        read(tmp_path / "y.csv.gz")


def test_a_per_job_file_that_cannot_be_written_is_an_error_naming_it(tmp_path: Path) -> None:
    trace = SOURCE.load()
    (tmp_path / "hpc2n").write_text("a file where the run's folder should be")
    with pytest.raises(PerJobFileError, match="cannot write the per-job file"):
        run_one(trace, RunKey("hpc2n", "easy", 0.0, 1), GridSettings(out=tmp_path))


@pytest.mark.parametrize("load", [2.0, 0.5])
def test_load_scales_the_offered_load_by_its_factor_and_nothing_else(load: float) -> None:
    trace = SOURCE.load()
    scaled = at_load(trace, load)
    assert offered_load(scaled) == pytest.approx(load * offered_load(trace), rel=1e-12)
    assert [(j.run, j.nodes, j.limit) for j in scaled.jobs] == [(j.run, j.nodes, j.limit) for j in trace.jobs]
    gaps = [b.submit - a.submit for a, b in zip(trace.jobs, trace.jobs[1:])]
    scaled_gaps = [b.submit - a.submit for a, b in zip(scaled.jobs, scaled.jobs[1:])]
    assert scaled_gaps == pytest.approx([g / load for g in gaps])


def test_sim_says_the_offered_load_it_runs_at(tmp_path: Path) -> None:
    def offered(*more: str) -> float:
        r = subprocess.run([str(BIN / "elasticd"), "sim", str(TRACES / "hpc2n-2002-subset.swf.gz"), "--policy", "easy",
                            "--malleable", "0", "--seeds", "1", "--workers", "1", *more],
                           check=False, capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr
        return float(next(ln for ln in r.stdout.splitlines() if ln.startswith("offered load:")).split()[2])

    own, heavy = offered(), offered("--load", "2")
    assert heavy == pytest.approx(2 * own, abs=0.002)
    bad = subprocess.run([str(BIN / "elasticd"), "sim", str(TRACES / "hpc2n-2002-subset.swf.gz"), "--load", "0"],
                         check=False, capture_output=True, text=True, timeout=60)
    assert bad.returncode == 1 and "--load 0.0: must be a positive number" in bad.stderr, bad.stderr
