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

from elasticd.perjob import RunFile, read
from elasticd.sim.gantt import place, plot_gantt, window
from elasticd.sim.plots import plot_grid, plot_utilization

REFERENCE = ("easy", 0.0)


def plot_simulation(folder: Path, runs: list[dict[str, Any]], summary: list[dict[str, Any]], trace: str,
                    warmup: float, seeds: int, gantt_hours: tuple[float, float] | None = None) -> list[Path]:
    """Every figure of the folder; `runs` are its runs' records (runs.csv / results.json), each
    naming its per-job file under folder/jobs."""
    paths = [plot_grid(summary, folder / "grid.png", f"{trace}: mean over {seeds} seed(s) per point, bars: IQR")]
    top = max(float(r["fraction"]) for r in runs)
    chosen: dict[str, dict[str, Any]] = {}
    for r in runs:
        if int(r["seed"]) != 1 or not r.get("file"):
            continue
        if (r["policy"], float(r["fraction"])) == REFERENCE or float(r["fraction"]) == top:
            label = ("rigid EASY (0 %)" if (r["policy"], float(r["fraction"])) == REFERENCE
                     else f"{r['policy']} ({100 * top:.0f} %)")
            chosen[label] = r
    if not chosen:
        return paths
    files: dict[str, RunFile] = {label: read(folder / "jobs" / r["file"]) for label, r in chosen.items()}
    ref = "rigid EASY (0 %)" if "rigid EASY (0 %)" in files else None
    nodes = next(iter(files.values())).machine_nodes
    paths.append(plot_utilization({k: f.rows for k, f in files.items()}, ref, nodes, folder / "utilization.png",
                                  f"{trace}: busy nodes, seed 1" + (", against rigid EASY" if ref else "")
                                  + "; dashed: the measured window (warm-up before, drain-down after)",
                                  window=next(iter(files.values())).window))
    first = min(r.submit for f in files.values() for r in f.rows)
    if gantt_hours is not None:
        t0, t1 = first + 3600 * gantt_hours[0], first + 3600 * gantt_hours[1]
        how = "the window asked for"
    else:
        basis = files[ref] if ref else next(iter(files.values()))
        t0, t1 = window(basis.rows, first + warmup)
        how = "a typical stretch of 40 starts after the warm-up" + (" in rigid EASY's run" if ref else "")
    span = t1 - t0
    unit, name = (3600.0, "h") if span > 7200 else (60.0, "min") if span > 120 else (1.0, "s")
    for label, f in files.items():
        policy = chosen[label]["policy"] if label != ref else "easy-rigid"
        blocks, marks = place(f.rows, f.machine_nodes, t0, t1)
        paths.append(plot_gantt(
            blocks, marks, f.machine_nodes, t0, t1, folder / f"gantt-{policy}.png",
            f"{trace}, {label}, seed 1: nodes over hours {(t0 - first) / 3600:.1f}-{(t1 - first) / 3600:.1f}\n"
            f"({how}; the same window for every policy; rows: each job's recorded node counts, placed lowest free "
            "first)",
            time_unit=unit, unit_name=name, origin=first))
    return paths
