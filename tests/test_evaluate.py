"""`elasticd evaluate`: one command from traces to REPORT.md, per-trace CSVs and the README's
table, with each cell's spread over seeds, resumable without running a finished run again."""

from __future__ import annotations

import csv
import json
import subprocess
from pathlib import Path

import pytest

from conftest import BIN, wait_until
from elasticd.experiments.evaluate import Cell, Setting

ROOT = Path(__file__).resolve().parent.parent
TRACE = ROOT / "examples" / "traces" / "nasa-ipsc-1993.swf.gz"


def evaluate(out: Path, readme: Path, *more: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(BIN / "elasticd"), "evaluate", str(TRACE), "--out", str(out), "--max-jobs", "300",
                           "--seeds", "2", "--malleable", "0,100", "--policy", "easy", "--policy", "malleable",
                           "--policy", "payoff", "--workers", "2", "--readme", str(readme), *more],
                          check=False, capture_output=True, text=True, timeout=240)


@pytest.mark.timeout(300)
def test_evaluate_writes_the_report_csv_and_readme_table_with_spread_and_resumes(tmp_path: Path) -> None:
    out, readme = tmp_path / "evaluation", tmp_path / "README.md"
    readme.write_text("# x\n\n<!-- BEGIN evaluation -->\nold\n<!-- END evaluation -->\ntail\n")
    r = evaluate(out, readme)
    assert r.returncode == 0, r.stderr
    runs = [json.loads(ln) for ln in (out / "runs.jsonl").read_text().splitlines()]
    # easy at 0 and 100 %, malleable and payoff at 100 % (their 0 % is EASY's schedule), 2 seeds each.
    assert len(runs) == 8
    # Each run wrote its per-job file, named in its record.
    assert all((out / "jobs" / r["file"]).stat().st_size == r["file_bytes"] > 0 for r in runs)
    report = (out / "REPORT.md").read_text()
    assert "first 300 jobs" in report and "mean over seeds [min..max]" in report
    assert "95 % interval" in report and "static run" in report and "stretch mean / p95 / max" in report
    # The reader's counts are the whole log's (18,066 jobs kept, every one without a limit
    # adjusted), which beside "300 kept" read as a contradiction: the reading says which is which.
    assert "in the whole log, 18066 jobs kept" in report and "the first 300 jobs kept are simulated" in report
    name = TRACE.name.removesuffix(".swf.gz")
    with open(out / name / "summary.csv") as f:
        rows = list(csv.DictReader(f))
    assert {(r["policy"], r["malleable_pct"]) for r in rows} >= {("easy", "0"), ("malleable", "100"), ("payoff", "100")}
    for row in rows:
        assert float(row["mean_turnaround_min"]) <= float(row["mean_turnaround_mean"]) <= float(row["mean_turnaround_max"])
    table = readme.read_text()
    assert "old" not in table and table.endswith("<!-- END evaluation -->\ntail\n")
    line = next(ln for ln in table.splitlines() if ln.startswith(f"| {name} | load x1, efficiency rule | 100 % |"))
    # One seed policy of nine was run: no best seed policy is named; payoff's change against
    # rigid EASY has its paired interval.
    cells = line.split(" | ")
    assert cells[3] == "—" and "[" in cells[7], line
    # Resumed: nothing is run again, the outputs are the same.
    again = evaluate(out, readme, "--resume")
    assert again.returncode == 0, again.stderr
    assert len((out / "runs.jsonl").read_text().splitlines()) == 8
    assert (out / "REPORT.md").read_text() == report
    # Resumed with another reading of the trace: refused, naming what changed, runs kept.
    other = evaluate(out, readme, "--resume", "--max-jobs", "200")
    assert other.returncode != 0 and "max_jobs 300, now 200" in other.stderr, other.stderr
    # Said once, not drowned in the reader's line restating it (a paragraph per trace).
    assert "reading" not in other.stderr and "in the whole log" not in other.stderr.split("error:", 1)[1], other.stderr
    assert "Traceback" not in other.stderr
    assert len((out / "runs.jsonl").read_text().splitlines()) == 8


def _cell(policy: str, fraction: float, tat: tuple[float, float, float], bsld: float) -> Cell:
    """A cell of three seeds whose turnarounds are tat's mean, min and max (in that order)."""
    mean, lo, hi = tat
    seeds = {1: lo, 2: 3 * mean - lo - hi, 3: hi}
    return Cell(policy, fraction, Setting(), 3, {"mean_turnaround": tat, "mean_bounded_slowdown": (bsld, bsld, bsld)},
                {"mean_turnaround": seeds, "mean_bounded_slowdown": dict.fromkeys(seeds, bsld)})


def test_the_report_checks_payoff_against_its_targets_and_says_which_cannot_be_met() -> None:
    from elasticd.experiments.evaluate import SEED_POLICIES
    from elasticd.experiments.evaluation_report import target_lines

    easy = _cell("easy", 0.0, (100.0, 100.0, 100.0), 4.0)
    others = [_cell(p, f, (90.0, 90.0, 90.0), 3.0) for p in SEED_POLICIES if p not in ("min", "pref") for f in (0.5, 1.0)]
    cs = [easy, *others, _cell("min", 0.5, (80.0, 70.0, 90.0), 2.0), _cell("payoff", 0.5, (70.0, 60.0, 80.0), 1.5),
          _cell("min", 1.0, (60.0, 55.0, 65.0), 1.2), _cell("pref", 0.5, (60.0, 55.0, 65.0), 2.5),
          _cell("pref", 1.0, (60.0, 55.0, 65.0), 1.05), _cell("payoff", 1.0, (50.0, 40.0, 90.0), 1.02)]
    text = "\n".join(target_lines(cs, easy))
    assert "| 50 % | -30.0 % | -62.5 % | -25.0 % (min 2.000; -25.0 % [-25.0, -25.0]) | 1.14 | yes |" in text, text
    # 10 % below pref's 1.05 is below 1, which no schedule reaches; and the worst seed is 1.8x the mean.
    assert "| 100 % | -50.0 % | -74.5 % | -2.9 % (pref 1.050; -2.9 % [-2.9, -2.9]) : unattainable" not in text
    assert "-2.9 % (pref 1.050; -2.9 % [-2.9, -2.9]): unattainable, below 1 | 1.80 | no |" in text, text
    assert "6 of 8 target checks met" in text


def test_payoff_is_checked_against_the_best_of_every_seed_policy_or_said_not_checked() -> None:
    """The best seed policy was the best of those selected: with Min alone run, payoff 'met'
    a target against Min that Pref, not run, would have failed. Now a fraction where any seed
    policy is missing is not checked, and the report names the missing ones."""
    from elasticd.experiments.evaluation_report import target_lines

    easy = _cell("easy", 0.0, (100.0, 100.0, 100.0), 4.0)
    cs = [easy, _cell("min", 0.5, (80.0, 70.0, 90.0), 2.0), _cell("payoff", 0.5, (70.0, 60.0, 80.0), 1.5)]
    text = "\n".join(target_lines(cs, easy))
    assert "| 50 % | -30.0 % | -62.5 % | not checked | 1.14 | yes |" in text, text
    assert "At 50 % the best seed policy is not known: malleable, avg, pref, keeppref" in text


def test_the_readme_table_shows_the_summary_fractions_and_leaves_the_whole_curve_to_the_report() -> None:
    from elasticd.experiments.evaluate import SEED_POLICIES, Results
    from elasticd.experiments.evaluation_report import readme_table
    from elasticd.sim.grid import METRICS, RunKey

    results = Results()
    runs = [("easy", 0.0, 4.0), ("payoff", 0.2, 1.5)] + [(p, f, 3.0) for p in SEED_POLICIES for f in (0.1, 0.2, 0.3)]
    runs += [("min", 0.2, 2.0)]
    for policy, fraction, bsld in runs:
        for seed in (1, 2):
            results.rows[RunKey("t", policy, fraction, seed)] = {
                **dict.fromkeys(METRICS, 0.0), "seed": seed, "mean_turnaround": 100.0 * bsld,
                "mean_bounded_slowdown": bsld, "stretch_p95": 1.5}
    every_tenth = readme_table(results, ["t"], ["easy", *SEED_POLICIES, "payoff"], [0.0, 0.1, 0.2, 0.3])
    rows = [ln for ln in every_tenth.splitlines() if ln.startswith("| t |")]
    assert rows == [("| t | load x1, efficiency rule | 20 % | min | -50.0 % [-50.0, -50.0] | -50.0 % [-50.0, -50.0] | "
                     "1.50 | -62.5 % [-62.5, -62.5] | -62.5 % [-62.5, -62.5] | 1.50 |")]
    # Run at none of the summary's fractions: every fraction run is shown.
    odd = readme_table(results, ["t"], ["easy", *SEED_POLICIES], [0.0, 0.1, 0.3])
    assert [ln.split(" | ")[2] for ln in odd.splitlines() if ln.startswith("| t |")] == ["10 %", "30 %"]


@pytest.mark.timeout(300)
def test_a_policys_own_zero_percent_cell_is_reported_when_its_base_is_not_run(tmp_path: Path) -> None:
    """sd's rigid base is conservative backfilling: its 0 % runs were made, then dropped from
    REPORT.md, summary.csv and the plot unless conservative was also selected."""
    out, readme = tmp_path / "evaluation", tmp_path / "README.md"
    readme.write_text("<!-- BEGIN evaluation -->\n<!-- END evaluation -->\n")
    r = subprocess.run([str(BIN / "elasticd"), "evaluate", str(TRACE), "--out", str(out), "--max-jobs", "300",
                        "--seeds", "2", "--malleable", "0,50", "--policy", "easy", "--policy", "sd",
                        "--load", "1,0.5", "--rule", "efficiency,downward", "--workers", "2", "--readme", str(readme)],
                       check=False, capture_output=True, text=True, timeout=280)
    assert r.returncode == 0, r.stderr
    name = TRACE.name.removesuffix(".swf.gz")
    with open(out / name / "summary.csv") as f:
        rows = list(csv.DictReader(f))
    zero = [(x["load"], x["policy"]) for x in rows if x["malleable_pct"] == "0"]
    # At each load, once (0 % is the same workload under every rule) but shown under each rule.
    assert sorted(set(zero)) == [("0.5", "easy"), ("0.5", "sd"), ("1.0", "easy"), ("1.0", "sd")], zero
    report = (out / "REPORT.md").read_text()
    for setting in ("load x1, efficiency rule", "load x1, downward rule", "load x0.5, efficiency rule",
                    "load x0.5, downward rule"):
        section = report.split(f"### {name}, {setting}")[1].split("###")[0]
        assert "| sd | 0 % |" in section and "| sd | 50 % |" in section, setting
    # Runs at 0 % are made once per load and seed, not once per rule.
    runs = [json.loads(ln) for ln in (out / "runs.jsonl").read_text().splitlines()]
    assert len([x for x in runs if x["fraction"] == 0]) == 2 * 2 * 2


@pytest.mark.timeout(120)
def test_a_readme_that_cannot_be_written_is_refused_before_any_run(tmp_path: Path) -> None:
    """An evaluation takes hours: a README missing, or without the section, is said at once,
    not by a traceback after the last run."""
    out = tmp_path / "evaluation"
    missing = evaluate(out, tmp_path / "README.md")
    assert missing.returncode != 0 and "cannot read it: No such file or directory" in missing.stderr, missing.stderr
    (tmp_path / "README.md").write_text("# no section\n")
    unmarked = evaluate(out, tmp_path / "README.md")
    assert unmarked.returncode != 0 and "no <!-- BEGIN evaluation -->" in unmarked.stderr, unmarked.stderr
    assert "Traceback" not in missing.stderr + unmarked.stderr
    assert not (out / "runs.jsonl").exists()


@pytest.mark.timeout(120)
def test_ctrl_c_stops_an_evaluation_at_once_and_keeps_the_runs_finished(tmp_path: Path) -> None:
    """Ctrl-C (SIGINT to the command's process group, workers included) ends it within
    seconds: the runs not begun are dropped. Before, the pool made every queued run first
    (1,220 runs, 42 s here; hours for the README's evaluation)."""
    import os
    import signal
    import time

    out = tmp_path / "evaluation"
    p = subprocess.Popen([str(BIN / "elasticd"), "evaluate", str(TRACE), "--out", str(out), "--max-jobs", "300",
                          "--seeds", "10", "--workers", "2"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                         text=True, start_new_session=True,
                         preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))  # noqa: PLW1509
    try:
        runs = out / "runs.jsonl"
        assert wait_until(lambda: runs.exists() and len(runs.read_text().splitlines()) >= 4, 60), p.stderr
        os.killpg(p.pid, signal.SIGINT)
        t0 = time.monotonic()
        assert p.wait(30) == 130
        assert time.monotonic() - t0 < 20
        done = [json.loads(ln) for ln in runs.read_text().splitlines()]
        assert 4 <= len(done) < 1100 and all("mean_turnaround" in r for r in done)
        err = p.stderr.read() if p.stderr else ""
        assert f"interrupted; {len(done)} runs kept" in err and "with --resume goes on" in err, err[-500:]
        assert "Traceback" not in err
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()


@pytest.mark.timeout(120)
def test_without_out_it_writes_in_the_working_directory_and_never_replaces_runs_without_fresh(tmp_path: Path) -> None:
    """Its default OUT was the repository's docs/results/evaluation: a quick try replaced the
    committed 7,320 runs (hours of CPU), REPORT.md and settings.json without a word. Now OUT
    defaults to ./evaluation, and a folder that holds runs is replaced only with --fresh
    (--resume keeps them)."""
    trace = tmp_path / "tiny.swf"
    trace.write_text("; MaxNodes: 4\n; MaxProcs: 4\n" + "".join(
        f"{i} {10 * i} 0 {60 + i} {1 + i % 4} -1 -1 {1 + i % 4} 120 -1 1 1 1 -1 1 -1 -1 -1\n" for i in range(1, 9)))

    def quick(*more: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(BIN / "elasticd"), "evaluate", str(trace), "--seeds", "1", "--malleable", "0",
                               "--policy", "easy", "--warmup", "0", "--workers", "1", *more],
                              check=False, capture_output=True, text=True, timeout=90, cwd=tmp_path)

    first = quick()
    assert first.returncode == 0, first.stderr
    runs = tmp_path / "evaluation" / "runs.jsonl"
    assert len(runs.read_text().splitlines()) == 1 and (tmp_path / "evaluation" / "REPORT.md").exists()
    kept = runs.read_text()
    again = quick()
    assert again.returncode != 0, again.stdout
    assert "already holds 1 run" in again.stderr and "--resume" in again.stderr and "--fresh" in again.stderr, \
        again.stderr
    assert "Traceback" not in again.stderr and runs.read_text() == kept
    fresh = quick("--fresh")
    assert fresh.returncode == 0, fresh.stderr
    assert len(runs.read_text().splitlines()) == 1
    report = (tmp_path / "evaluation" / "REPORT.md").read_text()
    assert "1 runs (1 made now" in fresh.stdout, fresh.stdout
    assert "Regenerated by `elasticd evaluate " in report and "--fresh`" in report  # the command that regenerates it
