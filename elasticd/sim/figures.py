"""The figures of a simulation folder (`elasticd sim --out`, `elasticd report`), drawn from
its summary and its per-job files alone: nothing is simulated again.

- grid.png: each metric against the malleable fraction, per policy (IQR over seeds);
- utilization.png: seed 1 at the largest fraction, each policy's busy share of the machine
  per hour or day, set against rigid EASY's (easy at 0 %, seed 1);
- gantt-POLICY.png: the same runs over one window, the same for every policy: the one given,
  else a typical busy stretch of rigid EASY's run after the warm-up (elasticd.sim.gantt.window).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from elasticd.metrics import JobRow, StepIntegral
from elasticd.perjob import parse, read, stream_fields, timeline_of
from elasticd.sim.gantt import place, plot_gantt, window
from elasticd.sim.plots import busy_changes, plot_grid, plot_utilization

REFERENCE = ("easy", 0.0)


def plot_simulation(folder: Path, runs: list[dict[str, Any]], summary: list[dict[str, Any]], trace: str,
                    warmup: float, seeds: int, gantt_hours: tuple[float, float] | None = None) -> list[Path]:
    """Every figure of the folder; `runs` are its runs' records (runs.csv / results.json), each
    naming its per-job file under folder/jobs. Each file is read once, keeping what is drawn:
    its busy nodes over time and its jobs in the Gantt window."""
    paths = [plot_grid(summary, folder / "grid.png", f"{trace}: mean over {seeds} seed(s) per point, bars: IQR")]
    top = max(float(r["fraction"]) for r in runs)
    chosen: dict[str, dict[str, Any]] = {}
    ref: str | None = None
    for r in runs:
        if int(r["seed"]) != 1 or not r.get("file"):
            continue
        if (r["policy"], float(r["fraction"])) == REFERENCE:
            ref = "rigid EASY (0 %)"
            chosen[ref] = r
        elif float(r["fraction"]) == top:
            chosen[f"{r['policy']} ({100 * top:.0f} %)"] = r
    if not chosen:
        return paths
    # The reference first: its starts choose the Gantt window.
    order = sorted(chosen, key=lambda label: label != ref)
    basis = read(folder / "jobs" / chosen[order[0]]["file"])
    first = min(r.submit for r in basis.rows)
    if gantt_hours is not None:
        t0, t1 = first + 3600 * gantt_hours[0], first + 3600 * gantt_hours[1]
        how = "the window asked for"
    else:
        t0, t1 = window(basis.rows, first + warmup)
        how = "a typical stretch of 40 starts after the warm-up" + (" in rigid EASY's run" if ref else "")
    busy: dict[str, StepIntegral] = {}
    shown: dict[str, list[JobRow]] = {}
    last = first
    nodes = basis.machine_nodes
    for label in order:
        changes: list[tuple[float, float]] = []
        mine: list[JobRow] = []
        if label == order[0]:
            busy_changes(basis.rows, changes)
            mine = [r for r in basis.rows if r.start is not None and r.end is not None and r.start < t1 and r.end > t0]
            last = max([last, *(r.end for r in basis.rows if r.end is not None)])
            del basis.rows[:]  # read once; kept no longer than needed
        else:
            # Every job's timeline, but a row made only of the jobs the Gantt chart shows.
            for f in stream_fields(folder / "jobs" / chosen[label]["file"]):
                tl = timeline_of(f)
                if tl is None:
                    continue
                _, start, end, points = tl
                prev = 0
                for t, n in points:
                    changes.append((t, n - prev))
                    prev = n
                last = max(last, end)
                if start < t1 and end > t0:
                    mine.append(parse(f)[0])
        busy[label], shown[label] = StepIntegral(changes), mine
    paths.append(plot_utilization(busy, ref, nodes, first, last, folder / "utilization.png",
                                  f"{trace}: busy nodes, seed 1" + (", against rigid EASY" if ref else "")
                                  + "; dashed: the measured window (warm-up before, drain-down after)",
                                  window=basis.window))
    span = t1 - t0
    unit, name = (3600.0, "h") if span > 7200 else (60.0, "min") if span > 120 else (1.0, "s")
    for label in order:
        policy = "easy-rigid" if label == ref else chosen[label]["policy"]
        blocks, marks = place(shown[label], nodes, t0, t1)
        paths.append(plot_gantt(
            blocks, marks, nodes, t0, t1, folder / f"gantt-{policy}.png",
            f"{trace}, {label}, seed 1: nodes over hours {(t0 - first) / 3600:.1f}-{(t1 - first) / 3600:.1f}\n"
            f"({how}; the same window for every policy; rows: each job's recorded node counts, placed lowest free "
            "first)",
            time_unit=unit, unit_name=name, origin=first))
    return paths
