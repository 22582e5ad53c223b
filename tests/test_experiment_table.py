"""`elasticd experiment` writes its README table itself: mean (min-max) over the batches per
policy and malleable fraction, between markers so that the prose around it stays, and
`--report-only` writes it again from results.json without running anything."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from conftest import BIN
from elasticd.experiments.report import experiment_table, write_experiment_table

ROOT = Path(__file__).resolve().parent.parent


def row(policy: str, fraction: float, batch: int, makespan: float, **more: float) -> dict[str, Any]:
    r: dict[str, Any] = {"policy": policy, "fraction": fraction, "batch": batch, "jobs": 4, "completed": 4,
                         "makespan": makespan, "utilization": 0.5, "mean_wait": 1.0, "mean_turnaround": 10.0,
                         "makespan_error": 0.01, "turnaround_error": 0.02, "mean_bounded_slowdown": 1.1,
                         "expands_per_job": 0.0}
    return {**r, **more}


ROWS = [row("easy", 0.0, 1, 60.0), row("easy", 0.0, 2, 80.0),
        row("malleable", 0.0, 1, 62.0), row("malleable", 0.0, 2, 82.0),
        row("easy", 1.0, 1, 70.0, utilization=0.6), row("easy", 1.0, 2, 90.0, utilization=0.8),
        row("malleable", 1.0, 1, 40.0, expands_per_job=1.0, turnaround_error=0.2),
        row("malleable", 1.0, 2, 60.0, expands_per_job=2.0)]


def elasticd(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(BIN / "elasticd"), *args], check=False, capture_output=True, text=True, timeout=60)


def section(text: str, marker: str) -> str:
    return text.split(f"<!-- BEGIN {marker} -->\n", 1)[1].split(f"<!-- END {marker} -->", 1)[0]


def test_report_only_writes_the_table_with_mean_and_range_and_keeps_the_text_around_it(tmp_path: Path) -> None:
    out = tmp_path / "exp"
    out.mkdir()
    (out / "results.json").write_text(json.dumps({"version": 1, "kind": "experiment", "rows": ROWS}))
    (out / "README.md").write_text("# mine\n\nprose before\n\n<!-- BEGIN exp -->\nold table\n<!-- END exp -->\n\nprose after\n")
    top = tmp_path / "TOP.md"
    top.write_text("top\n<!-- BEGIN exp -->\n<!-- END exp -->\ntail\n")
    r = elasticd("experiment", "--out", str(out), "--report-only", "--readme", str(top))
    assert r.returncode == 0, r.stderr
    assert "simulator vs real, per run" in r.stdout  # the usual summary is printed too
    text = (out / "README.md").read_text()
    assert text.startswith("# mine\n\nprose before\n\n<!-- BEGIN exp -->\n") and text.endswith("<!-- END exp -->\n\nprose after\n")
    assert "old table" not in text
    table = section(text, "exp")
    lines = table.splitlines()
    assert lines[0] == ("| policy | malleable | makespan (s) | utilization | mean wait (s) | mean turnaround (s) | "
                        "mean bounded slowdown | expands/job | vs best rigid: makespan / utilization / turnaround |")
    # By fraction, then the policies in the order the rows name them; the best rigid run is easy at 0 % (70 s).
    assert [ln.split(" | ")[:2] for ln in lines[2:6]] == [["| easy", "0 %"], ["| malleable", "0 %"],
                                                         ["| easy", "100 %"], ["| malleable", "100 %"]]
    assert lines[5] == ("| malleable | 100 % | 50.0 (40.0-60.0) | 0.500 (0.500-0.500) | 1.00 (1.00-1.00) | "
                        "10.0 (10.0-10.0) | 1.100 (1.100-1.100) | 1.50 (1.00-2.00) | -28.6 % / +0.0 % / +0.0 % |")
    assert lines[4].split(" | ")[3] == "0.700 (0.600-0.800)"
    assert "over the 2 batches of each row" in table and "lowest mean makespan: `easy` at 0 %" in table
    assert "7/8 runs within 5 % / 10 %" in table
    assert f"by `elasticd experiment --out {out} --report-only --readme {top}`." in table
    assert (section(top.read_text(), "exp") == table and top.read_text().startswith("top\n")
            and top.read_text().endswith("<!-- END exp -->\ntail\n"))
    # Written again from the same results: the same text.
    assert elasticd("experiment", "--out", str(out), "--report-only", "--readme", str(top)).returncode == 0
    assert (out / "README.md").read_text() == text


def test_a_folder_without_a_readme_gets_one_and_older_results_no_column_for_what_they_lack(tmp_path: Path) -> None:
    out = tmp_path / "grid"
    out.mkdir()
    old = [{k: v for k, v in r.items() if k not in ("mean_bounded_slowdown", "expands_per_job")}
           for r in ROWS] + [row("fcfs", 0.5, 1, 100.0, completed=3)]
    written = write_experiment_table(out, old, "regen")
    assert written == out / "README.md"
    text = written.read_text()
    assert text.startswith("# grid\n\n<!-- BEGIN grid -->\n| policy | malleable | makespan (s) |")
    assert "bounded slowdown" not in text and "expands" not in text
    assert "| fcfs | 50 % | 100.0 (100.0-100.0) |" in text and "over the 1-2 batches of each row" in text
    assert "1 of 9 runs did not complete every job" in text
    # Hand-written text without the markers: the section is added after it.
    (out / "README.md").write_text("notes\n")
    write_experiment_table(out, old, "regen")
    assert (out / "README.md").read_text().startswith("notes\n\n<!-- BEGIN grid -->\n")


def test_experiment_refuses_a_folder_without_results_or_a_readme_without_the_section(tmp_path: Path) -> None:
    r = elasticd("experiment", "--out", str(tmp_path), "--report-only")
    assert r.returncode == 1 and "no results.json" in r.stderr and "Traceback" not in r.stderr
    (tmp_path / "results.json").write_text(json.dumps({"version": 1, "kind": "experiment", "rows": ROWS}))
    (tmp_path / "TOP.md").write_text("no markers\n")
    r = elasticd("experiment", "--out", str(tmp_path), "--report-only", "--readme", str(tmp_path / "TOP.md"))
    assert r.returncode == 1 and f"no <!-- BEGIN {tmp_path.name} -->" in r.stderr and "Traceback" not in r.stderr
    assert not (tmp_path / "README.md").exists()  # nothing half-written
    # A real run says so before its runs, not after them.
    fresh = tmp_path / "fresh"
    r = elasticd("experiment", "--out", str(fresh), "--readme", str(tmp_path / "TOP.md"))
    assert r.returncode == 1 and "no <!-- BEGIN fresh -->" in r.stderr and not fresh.exists()


@pytest.mark.parametrize(("folder", "readme"), [("real-grid", "README.md"), ("real-grid-payoff", None)])
def test_the_committed_real_grid_tables_are_what_the_experiment_writes_from_their_results(
        folder: str, readme: str | None) -> None:
    out = ROOT / "docs" / "results" / folder
    rows = json.loads((out / "results.json").read_text())["rows"]
    command = f"elasticd experiment --out docs/results/{folder} --report-only" + (f" --readme {readme}" if readme else "")
    expected = experiment_table(rows, command)
    hint = f"regenerate it: {command}"
    assert section((out / "README.md").read_text(), folder) == expected, hint
    if readme is not None:
        assert section((ROOT / readme).read_text(), folder) == expected, hint
