"""The SWF reader and `elasticd sim` / `elasticd evaluate` on what real Parallel Workloads
Archive logs contain beyond the six in examples/traces: one small synthetic log per quirk.

For each, either the trace is read as a careful HPC person would (job count, sizes, limits and
capacity; every dropped or adjusted job counted in the one report line), or it is refused with
one message naming the file, the line when there is one, and what is wrong - never a
traceback, a silent drop or a hang."""

from __future__ import annotations

import bz2
import gzip
import json
import subprocess
from pathlib import Path

import pytest

from conftest import BIN
from elasticd.cli.elasticd_main import main
from elasticd.policies import make_policy
from elasticd.sim.simulator import simulate
from elasticd.sim.swf import Trace, TraceError, read_swf
from elasticd.sim.workload import build_workload

pytestmark = pytest.mark.timeout(60)

HEADER = "; MaxNodes: 8\n; MaxProcs: 8\n"


def row(jid: float, submit: float, run: float, alloc: float, req: float = 200, *, status: int = 1,
        reqp: float | None = None, partition: int = -1) -> str:
    reqp = alloc if reqp is None else reqp
    return f"{jid} {submit} -1 {run} {alloc} -1 -1 {reqp} {req} -1 {status} 1 1 -1 -1 {partition} -1 -1"


BASE = [row(i, 10 * i, 100 + i, 1 + i % 4) for i in range(1, 41)]


def write(tmp_path: Path, rows: list[str], header: str = HEADER, name: str = "t.swf", newline: str = "\n") -> Path:
    p = tmp_path / name
    p.write_bytes((header.replace("\n", newline) + newline.join(rows) + newline).encode())
    return p


def simulated(trace: Trace) -> None:
    """The trace runs to the end under EASY, rigid and all malleable: every kept job, within
    the machine."""
    for fraction in (0.0, 1.0):
        out = simulate(build_workload(trace, fraction, 1), trace.nodes, make_policy("easy"))
        assert len(out) == len(trace.jobs)
        assert all(o.start is not None and o.end is not None for o in out)
        assert max(n for o in out for _, n in o.sizes) <= trace.nodes


def sim_cli(path: Path, *more: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    """`elasticd sim PATH` in this process, as a user runs it; (exit code, stdout, stderr)."""
    code = main(["sim", str(path), "--policy", "easy", "--malleable", "0,100", "--seeds", "1", "--workers", "1",
                 "--warmup", "0", *more])
    out, err = capsys.readouterr()
    return code, out, err


# ---- capacity and units from the header --------------------------------------------------------
def test_a_header_with_only_maxprocs_reads_processors_one_per_node_and_says_so(tmp_path: Path) -> None:
    t = read_swf(write(tmp_path, BASE, "; MaxProcs: 8\n"))
    assert t.nodes == 8 and len(t.jobs) == 40 and {j.nodes for j in t.jobs} == {1, 2, 3, 4}
    assert "MaxProcs" in t.units and "1 per node" in t.units
    simulated(t)


def test_a_header_with_only_maxnodes_reads_sizes_as_nodes(tmp_path: Path) -> None:
    t = read_swf(write(tmp_path, BASE, "; MaxNodes: 8\n"))
    assert t.nodes == 8 and len(t.jobs) == 40 and "MaxNodes only" in t.units


def test_maxnodes_minus_one_is_unknown_and_maxprocs_gives_the_capacity(tmp_path: Path) -> None:
    t = read_swf(write(tmp_path, BASE, "; MaxNodes: -1\n; MaxProcs: 8\n"))
    assert t.nodes == 8 and len(t.jobs) == 40
    assert "MaxNodes -1" in t.units
    simulated(t)


def test_maxnodes_minus_one_alone_is_refused_naming_the_file_and_both_options(tmp_path: Path,
                                                                               capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path, BASE, "; MaxNodes: -1\n")
    code, _, err = sim_cli(path, capsys=capsys)
    assert code == 1 and "Traceback" not in err
    assert str(path) in err and "MaxNodes: -1" in err and "--nodes" in err and "--cores-per-node" in err
    assert read_swf(path, nodes=8).nodes == 8  # what the message says works


def test_giving_the_headers_own_node_count_keeps_its_processors_per_node(tmp_path: Path,
                                                                           capsys: pytest.CaptureFixture[str]) -> None:
    """MaxNodes 2, MaxProcs 8: 4 processors per node. --nodes changes the machine's size, not how
    job sizes are read (they were read as nodes, 4x too wide, once --nodes was given)."""
    path = write(tmp_path, BASE, "; MaxNodes: 2\n; MaxProcs: 8\n")
    plain, given = read_swf(path), read_swf(path, nodes=2)
    assert [j.nodes for j in given.jobs] == [j.nodes for j in plain.jobs] and max(j.nodes for j in plain.jobs) == 1
    assert given.nodes == 2 and "4 per node" in given.units
    code, out, _ = sim_cli(path, "--nodes", "2", capsys=capsys)
    assert code == 0 and "40 jobs kept on 2 nodes" in out


def test_cores_per_node_given_against_the_headers_maxnodes_says_both(tmp_path: Path) -> None:
    t = read_swf(write(tmp_path, BASE, "; MaxNodes: 2\n; MaxProcs: 8\n"), cores_per_node=2)
    assert t.nodes == 4 and "MaxNodes says 2" in t.units


def test_a_nodes_option_that_makes_many_jobs_too_wide_is_said_to_be_too_small(tmp_path: Path) -> None:
    """Not 'the units are wrong' (the user chose the size): the option to change first is named."""
    with pytest.raises(TraceError, match=r"30 of 40 jobs are wider than the 1 nodes of --nodes .*give --nodes N of the "
                                         r"machine's size, or --cores-per-node"):
        read_swf(write(tmp_path, BASE), nodes=1)


@pytest.mark.parametrize("flag", ["--nodes", "--cores-per-node"])
def test_a_machine_of_no_node_is_refused_as_such(tmp_path: Path, flag: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = sim_cli(write(tmp_path, BASE), flag, "0", capsys=capsys)
    assert code == 1 and f"{flag} must be at least 1" in err


# ---- which lines are jobs ----------------------------------------------------------------------
def test_lines_out_of_submit_order_are_sorted_and_said(tmp_path: Path) -> None:
    t = read_swf(write(tmp_path, list(reversed(BASE))))
    ordered = read_swf(write(tmp_path, BASE, name="sorted.swf"))
    assert t.jobs == ordered.jobs
    assert "out of submit order" in t.report()


def test_an_exact_duplicate_line_is_dropped_and_counted(tmp_path: Path) -> None:
    t = read_swf(write(tmp_path, [*BASE, BASE[4]]))
    assert len(t.jobs) == 40 and t.dropped["duplicate of an earlier line"] == 1


def test_a_job_number_on_two_different_lines_is_two_jobs_and_said(tmp_path: Path) -> None:
    t = read_swf(write(tmp_path, [*BASE, row(5, 500, 50, 2)]))
    assert len(t.jobs) == 41 and sorted(j.job_id for j in t.jobs).count(5) == 2
    assert "1 job number on more than one line" in t.report()
    simulated(t)


def test_partial_executions_of_a_job_with_its_summary_line_are_not_jobs_of_their_own(tmp_path: Path) -> None:
    """SWF status 2/3/4 lines are the parts of a checkpointed or swapped job whose whole is the
    line of status 0/1/5: the whole is the job."""
    rows = [*BASE, row(41, 500, 300, 2, 400), row(41, 500, 100, 2, 400, status=2), row(41, 500, 200, 2, 400, status=3)]
    t = read_swf(write(tmp_path, rows))
    assert len(t.jobs) == 41 and [j.run for j in t.jobs if j.job_id == 41] == [300]
    assert t.dropped["partial execution (status 2-4) of a job kept whole"] == 2


def test_partial_executions_without_a_summary_line_are_kept_and_said(tmp_path: Path) -> None:
    rows = [*BASE, row(41, 500, 100, 2, 400, status=2), row(41, 500, 200, 2, 400, status=4)]
    t = read_swf(write(tmp_path, rows))
    assert len(t.jobs) == 42 and "2 partial executions (status 2-4) without" in t.report()


def test_requested_time_missing_or_zero_for_every_job_is_125_percent_of_the_run(tmp_path: Path) -> None:
    for req in (-1, 0):
        t = read_swf(write(tmp_path, [row(i, 10 * i, 100, 1, req) for i in range(1, 41)]))
        assert [j.limit for j in t.jobs] == [125.0] * 40
        assert t.adjusted == {"no requested time (limit = 1.25 x run)": 40}


def test_run_time_unknown_or_zero_is_dropped_and_counted(tmp_path: Path) -> None:
    t = read_swf(write(tmp_path, [*BASE, row(41, 500, -1, 2), row(42, 510, 0, 2)]))
    assert len(t.jobs) == 40 and t.dropped == {"zero or unknown run time (cancelled)": 2}


def test_a_size_from_whichever_of_allocated_and_requested_processors_is_known(tmp_path: Path) -> None:
    alloc_unknown = read_swf(write(tmp_path, [row(i, i, 10, -1, reqp=1 + i % 4) for i in range(1, 41)]))
    req_unknown = read_swf(write(tmp_path, [row(i, i, 10, 1 + i % 4, reqp=-1) for i in range(1, 41)], name="r.swf"))
    assert [j.nodes for j in alloc_unknown.jobs] == [j.nodes for j in req_unknown.jobs] == [1 + i % 4 for i in range(1, 41)]
    both = read_swf(write(tmp_path, [*BASE, row(41, 500, 10, -1, reqp=-1)], name="b.swf"))
    assert both.dropped == {"unknown size": 1}


def test_a_job_wider_than_the_machine_is_dropped_and_counted(tmp_path: Path) -> None:
    t = read_swf(write(tmp_path, [*BASE, row(41, 500, 50, 16)]))
    assert len(t.jobs) == 40 and t.dropped == {"wider than the machine": 1}


def test_a_run_past_its_requested_time_gets_its_run_as_limit(tmp_path: Path) -> None:
    t = read_swf(write(tmp_path, [row(i, 10 * i, 300, 1, 200) for i in range(1, 41)]))
    assert {j.limit for j in t.jobs} == {300} and t.adjusted == {"ran past its requested time (limit = run)": 40}
    simulated(t)


def test_negative_submit_times_are_times_before_the_log_began_and_minus_one_is_unknown(tmp_path: Path) -> None:
    rows = [row(i, 10 * i - 100, 100, 1) for i in range(1, 41) if 10 * i - 100 != -1] + [row(99, -1, 100, 1)]
    t = read_swf(write(tmp_path, rows))
    assert len(t.jobs) == 40 and t.jobs[0].job_id == 1 and t.jobs[0].submit == 0 and t.jobs[-1].submit == 390
    assert t.dropped == {"no submit time": 1}
    assert "9 submitted before time 0" in t.report()


def test_non_integer_fields_are_read_as_numbers(tmp_path: Path) -> None:
    t = read_swf(write(tmp_path, [row(1, 0.5, 100.5, 3.5, 200.25), row(2.0, 10, 50, "2.0")]))
    assert [(j.job_id, j.submit, j.run, j.nodes, j.limit) for j in t.jobs] == [(1, 0, 100.5, 4, 200.25), (2, 9.5, 50, 2, 200)]


@pytest.mark.parametrize("variant", ["crlf", "cr", "trailing", "tabs", "blank", "bom"])
def test_line_endings_spaces_blank_lines_and_a_byte_order_mark_read_the_same(tmp_path: Path, variant: str) -> None:
    if variant in ("crlf", "cr"):
        path = write(tmp_path, BASE, newline="\r\n" if variant == "crlf" else "\r")
    elif variant == "trailing":
        path = write(tmp_path, [r + "  \t " for r in BASE], HEADER.replace("\n", "   \n"))
    elif variant == "tabs":
        path = write(tmp_path, [r.replace(" ", "\t") for r in BASE])
    elif variant == "blank":
        path = write(tmp_path, [r + "\n  " for r in BASE], "\n" + HEADER + "\n")
    else:
        path = write(tmp_path, BASE, "\ufeff; MaxNodes: 2\n; MaxProcs: 8\n")
        t = read_swf(path)
        assert t.nodes == 2 and "4 per node" in t.units and not t.dropped
        return
    t = read_swf(path)
    assert t.jobs == read_swf(write(tmp_path, BASE, name="plain.swf")).jobs and not t.dropped and not t.bad_lines


def test_lines_of_11_to_17_fields_read_the_rest_as_unknown_and_say_so(tmp_path: Path) -> None:
    t = read_swf(write(tmp_path, [" ".join(r.split()[:11]) for r in BASE]))
    assert len(t.jobs) == 40 and "40 lines of fewer than 18 fields" in t.report()


def test_a_log_of_too_short_lines_is_refused_naming_a_line_and_what_is_wrong(tmp_path: Path,
                                                                             capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path, [" ".join(r.split()[:9]) for r in BASE])
    code, _, err = sim_cli(path, capsys=capsys)
    assert code == 1 and "Traceback" not in err
    assert f"{path}: no usable job" in err and "line 3: 9 fields, 11 or more needed (18 in full)" in err


def test_a_malformed_line_says_which_field_is_wrong(tmp_path: Path) -> None:
    t = read_swf(write(tmp_path, [*BASE, "41 50 -1 abc 1 -1 -1 1 200 -1 1 1 1 -1 -1 -1 -1 -1"]))
    assert t.bad_lines == [43] and "line 43: field 4 is 'abc'" in t.report()



def test_every_malformed_line_listed_says_what_is_wrong_with_it_in_words_that_agree_with_the_reader(
        tmp_path: Path) -> None:
    """Only the first listed line had a reason, a short one was said to need 18 fields (11 to
    17 are read, the rest unknown), and two drops read '2 malformed line'."""
    t = read_swf(write(tmp_path, [*BASE, "41 50 -1 100", "42 60 -1 abc 1 -1 -1 1 200 -1 1 1 1 -1 -1 -1 -1 -1"]))
    report = t.report()
    assert t.bad_lines == [43, 44] and "dropped 2 malformed lines" in report, report
    assert ("malformed lines 43, 44 (line 43: 4 fields, 11 or more needed (18 in full); "
            "line 44: field 4 is 'abc', not a number)") in report, report
    assert "18 expected" not in report
    one = read_swf(write(tmp_path, [*BASE, "41 50 -1 100"], name="one.swf")).report()
    assert "dropped 1 malformed line;" in one, one


# ---- files ----------------------------------------------------------------------------------
def test_gzip_is_read_by_its_content_whatever_the_name(tmp_path: Path) -> None:
    text = (HEADER + "\n".join(BASE) + "\n").encode()
    (tmp_path / "gz-named-plain.swf").write_bytes(gzip.compress(text))
    (tmp_path / "plain-named-gz.swf.gz").write_bytes(text)
    (tmp_path / "t.swf.bz2").write_bytes(bz2.compress(text))
    for name in ("gz-named-plain.swf", "plain-named-gz.swf.gz", "t.swf.bz2"):
        assert len(read_swf(tmp_path / name).jobs) == 40, name


def test_a_damaged_gzip_is_refused_naming_the_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = bytearray(gzip.compress((HEADER + "\n".join(BASE * 20) + "\n").encode()))
    for i in range(40, 60):
        data[i] ^= 0x55
    path = tmp_path / "damaged.swf.gz"
    path.write_bytes(bytes(data))
    code, _, err = sim_cli(path, capsys=capsys)
    assert code == 1 and f"{path}: cannot read" in err
    truncated = tmp_path / "truncated.swf.gz"
    truncated.write_bytes(gzip.compress((HEADER + "\n".join(BASE * 20) + "\n").encode())[:300])
    with pytest.raises(TraceError, match=r"truncated.swf.gz: cannot read"):
        read_swf(truncated)


def test_a_binary_file_is_refused_as_not_a_text_log(tmp_path: Path) -> None:
    path = tmp_path / "utf16.swf"
    path.write_bytes((HEADER + "\n".join(BASE) + "\n").encode("utf-16"))
    with pytest.raises(TraceError, match=r"utf16.swf:1: not SWF text"):
        read_swf(path)


def test_jobs_of_several_partitions_are_said_to_share_one_machine(tmp_path: Path) -> None:
    t = read_swf(write(tmp_path, [row(i, 10 * i, 100, 1, partition=1 + i % 2) for i in range(1, 41)]))
    assert len(t.jobs) == 40 and "2 partitions (field 16) simulated as one machine of 8 nodes" in t.report()


# ---- the commands ------------------------------------------------------------------------------
def test_sim_strict_makes_a_malformed_line_an_error_naming_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path, [*BASE, "41 nan -1 100 1 -1 -1 1 200 -1 1 1 1 -1 -1 -1 -1 -1"])
    code, _, err = sim_cli(path, "--strict", capsys=capsys)
    assert code == 1 and f"{path}:43: malformed SWF line" in err


def test_sim_says_when_the_trace_is_shorter_than_the_warm_up(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = sim_cli(write(tmp_path, BASE), "--warmup", "43200", capsys=capsys)
    assert code == 0 and "shorter than the 12.0 h warm-up: every job is measured" in out


def evaluate(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(BIN / "elasticd"), "evaluate", "--policy", "easy", "--malleable", "0,100", "--seeds", "2",
                           "--workers", "2", "--warmup", "0", "--out", str(tmp_path / "ev"), *args],
                          check=False, capture_output=True, text=True, timeout=50)


def test_evaluate_refuses_an_unreadable_trace_before_any_run_in_one_line(tmp_path: Path) -> None:
    good, bad = write(tmp_path, BASE, name="good.swf"), write(tmp_path, BASE, "; MaxNodes: -1\n", name="bad.swf")
    r = evaluate(tmp_path, str(good), str(bad))
    assert r.returncode == 1 and "Traceback" not in r.stderr
    assert f"{bad}: " in r.stderr and "--nodes" in r.stderr
    assert not (tmp_path / "ev" / "runs.jsonl").exists()


def test_evaluate_takes_the_units_options_the_reader_asks_for(tmp_path: Path) -> None:
    wide = [row(i, 10 * i, 100, 4 * (1 + i % 4)) for i in range(1, 41)]  # processors, 4 per node
    path = write(tmp_path, wide, "; MaxNodes: 4\n")
    r = evaluate(tmp_path, str(path))
    assert r.returncode == 1 and "--cores-per-node" in r.stderr and "Traceback" not in r.stderr
    r = evaluate(tmp_path, str(path), "--cores-per-node", "4")
    assert r.returncode == 0, r.stderr
    assert "40 jobs kept on 4 nodes (4 processor(s) per node as given" in r.stdout
    assert len((tmp_path / "ev" / "runs.jsonl").read_text().splitlines()) == 4
    assert json.loads((tmp_path / "ev" / "runs.jsonl").read_text().splitlines()[0])["trace"] == "t"
    assert "Read as: t.swf: 40 jobs kept on 4 nodes (4 processor(s) per node as given" in (tmp_path / "ev" / "REPORT.md").read_text()


def test_evaluate_refuses_two_traces_of_one_name_and_no_jobs(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    a, b = write(tmp_path / "a", BASE), write(tmp_path / "b", BASE)
    r = evaluate(tmp_path, str(a), str(b))
    assert r.returncode == 1 and "both named t" in r.stderr
    r = evaluate(tmp_path, str(a), "--max-jobs", "0")
    assert r.returncode == 1 and "--max-jobs must be at least 1" in r.stderr and "Traceback" not in r.stderr


def test_sim_with_parallel_workers_on_a_quirky_trace_as_a_user_runs_it(tmp_path: Path) -> None:
    rows = [*reversed(BASE), BASE[3], row(41, 500, 0, 2), row(42, 510, 50, 16), row(43, 520, 300, 1, 100)]
    path = tmp_path / "quirky.swf.gz"
    path.write_bytes(gzip.compress(("\ufeff; MaxNodes: -1\r\n; MaxProcs: 8\r\n" + "\r\n".join(rows) + "\r\n").encode()))
    r = subprocess.run([str(BIN / "elasticd"), "sim", str(path), "--policy", "easy", "--policy", "malleable",
                        "--malleable", "0,100", "--seeds", "2", "--workers", "2"],
                       check=False, capture_output=True, text=True, timeout=50)
    assert r.returncode == 0, r.stderr
    first = r.stdout.splitlines()[0]
    assert first.startswith("quirky.swf: 41 jobs kept on 8 nodes")
    for said in ("1 duplicate of an earlier line", "1 wider than the machine", "1 zero or unknown run time",
                 "1 ran past its requested time", "out of submit order"):
        assert said in first, said


# ---- limits the scheduler can take -------------------------------------------------------------
YEAR = 365 * 86400
LONG = [row(41, 500, 5000, 4, 2**31 - 1), row(42, 510, 300 * 86400, 4, -1), row(43, 520, 400 * 86400, 1),
        row(44, 530, 300 * 86400, 4, 360 * 86400)]


def test_a_limit_beyond_a_year_is_counted_and_kept_as_logged(tmp_path: Path) -> None:
    """Some logs write 'no limit' as a huge requested time (2^31 - 1 s); a job file's limit is
    at most 365 days (elastic_protocol.timefmt): the simulation failed with a traceback."""
    t = read_swf(write(tmp_path, [*BASE, *LONG]))
    assert len(t.jobs) == 44 and not t.dropped
    by_id = {j.job_id: j.limit for j in t.jobs}
    assert [by_id[41], by_id[42], by_id[43], by_id[44]] == [2**31 - 1, 375 * 86400, 400 * 86400, 360 * 86400]
    assert t.adjusted["limit beyond 365 days (simulated without one)"] == 3


@pytest.mark.parametrize("policy", ["easy", "conservative", "malleable", "min", "avg", "pref", "keeppref",
                                    "mebf-basic-handoff", "mebf-basic-spare", "mebf-basic-intensive", "sd", "payoff"])
def test_jobs_of_limits_near_and_beyond_a_year_run_to_their_end_under_every_policy(tmp_path: Path, policy: str) -> None:
    """Beyond a year (logged, or scaled to a smaller preferred size), a job has no limit: it
    runs its logged work and is never ended at a limit it was not given."""
    t = read_swf(write(tmp_path, [*BASE, *LONG]))
    for fraction in (0.0, 1.0):
        out = simulate(build_workload(t, fraction, 1), t.nodes, make_policy(policy))
        assert len(out) == 44 and not [o.job_id for o in out if o.state != "COMPLETED"]


def test_sim_runs_a_trace_of_limits_beyond_a_year(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = sim_cli(write(tmp_path, [*BASE, *LONG]), "--policy", "malleable", capsys=capsys)
    assert code == 0, err
    assert "44 jobs kept on 8 nodes" in out and "3 limit beyond 365 days" in out


def test_a_time_beyond_what_a_float_counts_in_seconds_is_a_malformed_line(tmp_path: Path,
                                                                          capsys: pytest.CaptureFixture[str]) -> None:
    """A run time of 1e308 s (no unknown is written so) overflowed to an infinite limit and an
    OverflowError traceback."""
    path = write(tmp_path, [*BASE, row(41, 500, 1e308, 2, -1), row(42, 1e20, 10, 1)])
    t = read_swf(path)
    assert len(t.jobs) == 40 and t.dropped == {"malformed line": 2}
    assert "line 43: field 4 is '1e+308', more seconds than a log can hold" in t.report()
    code, _, err = sim_cli(path, capsys=capsys)
    assert code == 0, err


def test_sim_results_json_says_how_the_trace_was_read(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = sim_cli(write(tmp_path, list(reversed(BASE)), "; MaxNodes: 2\n; MaxProcs: 8\n"), "--out",
                           str(tmp_path / "out"), "--no-plots", capsys=capsys)
    assert code == 0, err
    doc = json.loads((tmp_path / "out" / "results.json").read_text())["trace"]
    assert "4 per node" in doc["units"] and doc["notes"] == ["39 lines out of submit order (sorted)"]
    assert doc["report"].startswith("t.swf: 40 jobs kept on 2 nodes")
