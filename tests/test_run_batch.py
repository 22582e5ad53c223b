"""`elasticd run`: from a folder of job files to a metrics table, with nothing left behind."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from conftest import BIN, write_job
from elasticd.metrics import JobRow, job_metrics, summarize


def test_run_batch_prints_metrics_and_honours_submit_offsets(tmp_path: Path) -> None:
    batch = tmp_path / "batch"
    batch.mkdir()
    write_job(batch, "a", '''
        name = "a"
        command = ["sleep", "1"]
        nodes = 2
        working_dir = "."
        time_limit = "0:10"
    ''')
    write_job(batch, "b", '''
        name = "b"
        command = ["sleep", "1"]
        nodes = 2
        working_dir = "."
        time_limit = "0:10"
    ''')
    write_job(batch, "c", '''
        name = "c"
        command = ["sh", "-c", "exit 0"]
        nodes = 1
        working_dir = "."
        submit_offset = 1.5
    ''')
    out = tmp_path / "metrics.json"
    r = subprocess.run([str(BIN / "elasticd"), "run", str(batch), "--local", "2", "--policy", "fcfs", "--json", str(out)],
                       check=False, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "makespan" in r.stdout and "node utilization" in r.stdout and "mean bounded slowdown" in r.stdout
    doc = json.loads(out.read_text())
    jobs = {j["name"]: j for j in doc["jobs"]}
    assert all(j["state"] == "COMPLETED" for j in jobs.values())
    # FCFS on 2 nodes: b waits for a; c is submitted at 1.5 s and waits for b.
    assert jobs["a"]["wait"] < 0.5
    assert 0.9 < jobs["b"]["wait"] < 2.0
    assert jobs["c"]["wait"] >= 0.0
    assert "FAILED" not in r.stdout
    s = doc["summary"]
    assert 2.0 < s["makespan"] < 6.0
    assert 0.3 < s["utilization"] <= 1.0


def test_run_batch_rejects_a_bad_file_before_starting_anything(tmp_path: Path) -> None:
    batch = tmp_path / "batch"
    batch.mkdir()
    write_job(batch, "ok", 'name = "ok"\ncommand = ["true"]\nnodes = 1\n')
    write_job(batch, "bad", 'name = "bad"\ncommand = ["true"]\nnodes = 1\ncolour = "red"\n')
    write_job(batch, "wide", 'name = "wide"\ncommand = ["true"]\nnodes = 9\n')
    r = subprocess.run([str(BIN / "elasticd"), "run", str(batch), "--local", "2"], check=False, capture_output=True, text=True, timeout=30)
    assert r.returncode == 1
    assert "colour: unknown field" in r.stderr
    assert "nodes: 9 nodes requested but --local gives 2" in r.stderr
    assert "Traceback" not in r.stderr


def job(jid: int, state: str, submit: float, start: float | None, end: float | None, nodes: int) -> JobRow:
    run = None if start is None or end is None else end - start
    return JobRow(jid, "rigid", state, submit, start, end, run, None, nodes, nodes, nodes, nodes,
                  nodes if run is not None else 0, nodes if run is not None else 0, 0, 0, 0.0, 0.0)


def test_metrics_are_hand_computable() -> None:
    recs = [job(1, "COMPLETED", 0, 0, 100, 2), job(2, "COMPLETED", 0, 100, 105, 1),
            job(3, "CANCELLED", 50, None, 50, 1)]
    m = job_metrics(recs[1])
    assert (m.wait, m.run, m.turnaround) == (100, 5, 105)
    assert m.bounded_slowdown == pytest.approx(105 / 10)  # tau = 10 s bounds the 5 s run
    s = summarize(recs, total_nodes=2)
    assert s.makespan == 105
    assert s.utilization == pytest.approx(205 / (2 * 105))
    assert s.mean_wait == pytest.approx(50)
    assert s.mean_turnaround == pytest.approx((100 + 105) / 2)
    assert s.mean_bounded_slowdown == pytest.approx((1.0 + 10.5) / 2)
    assert s.started == 2


def test_run_batch_says_why_a_job_did_not_complete(tmp_path: Path) -> None:
    batch = tmp_path / "batch"
    batch.mkdir()
    write_job(batch, "nodir", 'name = "nodir"\ncommand = ["true"]\nnodes = 1\nworking_dir = "."\noutput = "missing/%j.out"\n')
    write_job(batch, "bad", 'name = "bad"\ncommand = ["sh", "-c", "exit 4"]\nnodes = 1\nworking_dir = "."\n')
    r = subprocess.run([str(BIN / "elasticd"), "run", str(batch), "--local", "2"], check=False, capture_output=True, text=True, timeout=60)
    assert r.returncode == 2, r.stdout + r.stderr
    # Its output file could not be made: said so, with why, not given as where its output is.
    nodir = next(line for line in r.stdout.splitlines() if line.startswith("job ") and "(nodir)" in line)
    jid = nodir.split()[1]
    assert nodir.endswith(f"FAILED: launch failed: its output file {batch}/missing/{jid}.out could not be created: "
                          "No such file or directory (nothing was written)"), nodir
    assert "(bad) FAILED: exit 4:0" in r.stdout
    # Exit 2, and the figures are not passed off as a schedule.
    assert "no job COMPLETED (2 ended otherwise): the figures below measure failures" in r.stdout
    assert "2 (2 started, 0 completed)" in r.stdout


def test_example_batches_are_complete_in_a_clean_checkout() -> None:
    """Every output folder the examples write into exists in the repository."""
    root = Path(__file__).parent.parent / "examples"
    import tomllib

    for f in root.glob("*/*.toml"):
        spec = tomllib.loads(f.read_text())
        out = (f.parent / spec.get("working_dir", ".") / spec.get("output", "x")).parent
        assert out.is_dir(), f"{f}: output folder {out} is missing"
        tracked = subprocess.run(["git", "ls-files", str(out)], cwd=root, check=False, capture_output=True, text=True)
        if tracked.returncode == 0 and (root.parent / ".git").exists():
            assert tracked.stdout.strip(), f"{out} is not tracked by git: a fresh clone lacks it"
