"""Why a cell is worse than rigid EASY, computed from per-job files, against a case worked by
hand: which job lost, waiting or running, and what held the machine while it waited."""

from __future__ import annotations

from pathlib import Path

from elasticd.experiments.evidence import compare_seed, why_worse
from elasticd.metrics import JobRow
from elasticd.perjob import RunFile, write


def job(jid: int, kind: str, submit: float, start: float, end: float, nodes: int, logged: int,
        changes: tuple[tuple[float, int], ...] = ()) -> JobRow:
    return JobRow(jid, kind, "COMPLETED", submit, start, end, 100.0, 200.0, 1, logged, 4, logged, nodes,
                  changes[-1][1] if changes else nodes, 0, 0, 0.0, 0.0, changes)


def test_a_job_that_waited_for_nodes_held_beyond_a_logged_size_is_named_with_what_held_them(tmp_path: Path) -> None:
    # 4 nodes. Rigid EASY: A (2 nodes) and B (malleable, logged on 2) run 0-100; C waits to 100.
    easy = RunFile([job(1, "rigid", 0, 0, 100, 2, 2), job(2, "malleable", 0, 0, 100, 2, 2),
                    job(3, "rigid", 10, 100, 200, 2, 2)], 4, (0.0, 10.0))
    # The policy starts B on all 4 nodes (twice its logged size): it ends at 60; A waits for it
    # 60 s, C starts with A at 60 and gains 40 s.
    run = RunFile([job(1, "rigid", 0, 60, 160, 2, 2), job(2, "malleable", 0, 0, 60, 4, 2),
                   job(3, "rigid", 10, 60, 160, 2, 2)], 4, (0.0, 10.0))
    e = compare_seed(1, run, easy)
    assert (e.measured, e.losers, e.lost, e.lost_waiting, e.lost_running) == (3, 1, 60.0, 60.0, 0.0)
    assert (e.gainers, e.gained) == (2, 80.0)
    # Over A's extra wait, [0, 60]: 240 node-seconds, B's 2 nodes beyond its logged 2 held all of it.
    assert (e.machine, e.beyond_logged, e.past_static_end, e.idle) == (240.0, 120.0, 0.0, 0.0)
    assert [x.job.job_id for x in e.losses] == [1]
    files = {}
    for name, f in (("run", run), ("easy", easy)):
        write(tmp_path / f"{name}.csv.gz", f)
        files[name] = {1: tmp_path / f"{name}.csv.gz"}
    text = why_worse(files["run"], files["easy"])
    assert "1 of 3 measured jobs ended later than under rigid EASY" in text, text
    assert "50 % of the machine was held beyond jobs' logged sizes, 0 % by jobs running past their static run's end, " \
           "0 % idle" in text, text
    assert "job 1 seed 1 (rigid, 2 nodes) +60 s, mostly waiting" in text, text


def test_a_job_a_shrink_stretched_past_its_static_end_is_counted_as_holding_the_machine(tmp_path: Path) -> None:
    # B (static run 100 s on 4 nodes) is shrunk to 2 nodes at 50 and runs to 150; A, a rigid
    # job of 4 nodes submitted at 0, waits for B's end: until 150 instead of 100.
    easy = RunFile([job(2, "malleable", 0, 0, 100, 4, 4), JobRow(1, "rigid", "COMPLETED", 0, 100, 200, 100.0, None,
                                                                   4, 4, 4, 4, 4, 4, 0, 0, 0.0, 0.0)], 4, (0.0, 0.0))
    run = RunFile([job(2, "malleable", 0, 0, 150, 4, 4, ((50.0, 2),)),
                   JobRow(1, "rigid", "COMPLETED", 0, 150, 250, 100.0, None, 4, 4, 4, 4, 4, 4, 0, 0, 0.0, 0.0)],
                  4, (0.0, 0.0))
    e = compare_seed(1, run, easy)
    assert e.losers == 2 and e.lost_waiting == 50.0 and e.lost_running == 50.0
    # A's extra wait [100, 150]: B held 2 nodes past its static end (100): 100 of 200 node-s; 2 idle.
    assert (e.machine, e.past_static_end, e.idle, e.beyond_logged) == (200.0, 100.0, 100.0, 0.0)
