"""What the plots draw, read back as numbers, and that they are drawn from the runs' own files:
Gantt colours that touching jobs never share, each label on its own job's block, the same
window for every policy, utilization binned, and no simulation when a folder is drawn again."""

from __future__ import annotations

import json
import random
import subprocess
from pathlib import Path

import pytest

from conftest import BIN
from elasticd.metrics import JobRow
from elasticd.sim.gantt import adjacency, colours, label_spots, place, rects
from elasticd.sim.plots import binned_utilization

TRACES = Path(__file__).resolve().parent.parent / "examples" / "traces"


def row(jid: int, start: float, end: float, nodes: int, changes: tuple[tuple[float, int], ...] = (),
        logged: int | None = None) -> JobRow:
    final = changes[-1][1] if changes else nodes
    return JobRow(jid, "malleable" if changes else "rigid", "COMPLETED", start, start, end, end - start, None, 1,
                  nodes, 64, logged or nodes, nodes, final, sum(1 for a, b in zip((nodes, *(n for _, n in changes)),
                  (n for _, n in changes)) if b < a), sum(1 for a, b in zip((nodes, *(n for _, n in changes)),
                  (n for _, n in changes)) if b > a), 0.0, 0.0, changes)


def random_run(seed: int, nodes: int = 32, jobs: int = 120) -> list[JobRow]:
    """Jobs that fit a machine of `nodes` at every instant, some resized."""
    rng = random.Random(seed)
    out: list[JobRow] = []
    t = 0.0
    for jid in range(1, jobs + 1):
        t += rng.uniform(0, 30)
        n = rng.randint(1, 8)
        run = rng.uniform(20, 400)
        changes: tuple[tuple[float, int], ...] = ()
        if rng.random() < 0.3:
            changes = ((t + run / 2, max(1, n - rng.randint(1, 3))),)
        out.append(row(jid, t, t + run, n, changes))
    # Keep only a set that fits: drop jobs while the busy count passes the machine.
    kept: list[JobRow] = []
    for r in out:
        trial = [*kept, r]
        if _peak(trial) <= nodes:
            kept = trial
    return kept


def _peak(rows: list[JobRow]) -> int:
    changes = []
    for r in rows:
        prev = 0
        for t, n in r.timeline():
            changes.append((t, n - prev))
            prev = n
    busy = peak = 0
    for _, d in sorted(changes):
        busy += d
        peak = max(peak, busy)
    return peak


@pytest.mark.parametrize("seed", range(8))
def test_jobs_whose_blocks_touch_never_share_a_colour(seed: int) -> None:
    rows = random_run(seed)
    blocks, _ = place(rows, 32, 0.0, 2000.0)
    rs = rects(blocks, 0.0, 2000.0)
    adj = adjacency(rs)
    col = colours(adj, 20)
    assert all(col[a] != col[b] for a in adj for b in adj[a])
    assert sum(len(v) for v in adj.values()) > 20  # the runs do have neighbours
    # No two jobs on one node at one time.
    for a in rs:
        for b in rs:
            if a.job != b.job:
                assert not (a.t0 < b.t1 and b.t0 < a.t1 and a.r0 < b.r1 and b.r0 < a.r1), (a, b)


def test_a_placement_keeps_each_jobs_recorded_counts_and_marks_its_resizes() -> None:
    rows = [row(1, 0.0, 100.0, 4, ((50.0, 2),)), row(2, 0.0, 80.0, 3), row(3, 60.0, 90.0, 3)]
    blocks, marks = place(rows, 8, 0.0, 100.0)
    assert [(a, b, len(h)) for a, b, h in blocks[1]] == [(0.0, 50.0, 4), (50.0, 100.0, 2)]
    assert [len(h) for _, _, h in blocks[3]] == [3]
    assert [(t, kind) for t, _, kind in marks] == [(50.0, "shrunk")]


@pytest.mark.parametrize("seed", range(4))
def test_each_label_sits_on_its_own_jobs_block_and_on_no_other(seed: int) -> None:
    rs = rects(place(random_run(seed), 32, 0.0, 2000.0)[0], 0.0, 2000.0)
    spots = label_spots(rs, px_per_second=1.0, px_per_row=20.0)
    assert spots
    for job, (x, y) in spots.items():
        under = {r.job for r in rs if r.t0 <= x <= r.t1 and r.r0 <= y <= r.r1}
        assert under == {job}, (job, under)


def test_utilization_is_averaged_per_bin_by_hand() -> None:
    # 4 nodes: a 2-node job over [0, 90), a 4-node one over [90, 150) shrunk to 1 at 120.
    rows = [row(1, 0.0, 90.0, 2), row(2, 90.0, 150.0, 4, ((120.0, 1),))]
    assert binned_utilization(rows, 4, 0.0, 180.0, 60.0) == [(0.0, 0.5), (60.0, (30 * 2 + 30 * 4) / 240),
                                                             (120.0, 30 * 1 / 240)]


@pytest.mark.timeout(300)
def test_a_simulation_folder_is_drawn_again_from_its_files_alone(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`elasticd report` on a simulation folder draws every figure from its per-job files:
    with the simulator made to fail, the figures are still made, the Gantt charts of every
    policy over one window."""
    out = tmp_path / "sim"
    r = subprocess.run([str(BIN / "elasticd"), "sim", str(TRACES / "hpc2n-2002-subset.swf.gz"), "--policy", "easy",
                        "--policy", "pref", "--malleable", "0,50", "--seeds", "1", "--out", str(out), "--no-plots",
                        "--workers", "1"], check=False, capture_output=True, text=True, timeout=280)
    assert r.returncode == 0, r.stderr
    assert not list(out.glob("*.png"))
    from elasticd.experiments.report import report
    from elasticd.sim import figures, simulator

    def no(*args: object, **kwargs: object) -> None:
        raise AssertionError("the simulator was called to draw a plot")

    monkeypatch.setattr(simulator, "simulate", no)
    monkeypatch.setattr(simulator.Simulation, "run", no)
    monkeypatch.setattr(simulator.Simulation, "_run", no)
    windows: list[tuple[float, float]] = []
    real_plot = figures.plot_gantt

    def recording(blocks: object, marks: object, nodes: int, t0: float, t1: float, *args: object, **kw: object) -> Path:
        windows.append((t0, t1))
        return real_plot(blocks, marks, nodes, t0, t1, *args, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(figures, "plot_gantt", recording)
    paths = report(out)
    names = {p.name for p in paths}
    assert names == {"grid.png", "utilization.png", "gantt-easy-rigid.png", "gantt-easy.png", "gantt-pref.png"}
    assert len(windows) == 3 and len(set(windows)) == 1
    for p in paths:
        assert p.read_bytes()[:4] == b"\x89PNG"
    assert json.loads((out / "results.json").read_text())["version"] == 2
