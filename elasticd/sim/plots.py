"""PNG plots of simulated (and real) runs: grid curves, utilization over time, a Gantt chart.

matplotlib is imported inside the functions with the Agg backend, so `elasticd` starts fast
and plots work without a display.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from elasticd.errors import MissingExtra

_CURVES = (
    ("mean_turnaround", "mean turnaround (s)"),
    ("mean_wait", "mean wait (s)"),
    ("utilization", "node utilization"),
    ("mean_bounded_slowdown", "mean bounded slowdown"),
    ("makespan", "makespan (s)"),
    ("expands_per_job", "expands per job"),
)


def _plt() -> Any:
    try:
        import matplotlib
    except ImportError:
        raise MissingExtra("drawing plots", "plots", "matplotlib") from None

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_grid(summary: list[dict[str, Any]], path: Path, title: str) -> Path:
    """Each metric against the malleable fraction, one line per policy, IQR as error bars."""
    plt = _plt()
    # Only the metrics every record has: a panel of missing values would read as zeros.
    curves = [(m, label) for m, label in _CURVES if all(f"{m}_mean" in r for r in summary)]
    rows = (len(curves) + 2) // 3
    fig, axes = plt.subplots(rows, 3, figsize=(15, 4 * rows), squeeze=False)
    for ax in list(axes.flat)[len(curves):]:
        ax.set_visible(False)
    policies = sorted({r["policy"] for r in summary})
    for ax, (metric, label) in zip(axes.flat, curves):
        for p in policies:
            rs = sorted((r for r in summary if r["policy"] == p), key=lambda r: r["fraction"])
            xs = [100 * r["fraction"] for r in rs]
            ys = [r[f"{metric}_mean"] for r in rs]
            err = [r[f"{metric}_iqr"] / 2 for r in rs]
            ax.errorbar(xs, ys, yerr=err, marker="o", capsize=3, label=p)
        ax.set_xlabel("malleable jobs (%)")
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
    axes.flat[0].legend()
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path


def plot_utilization(series: dict[str, list[tuple[float, int]]], nodes: int, path: Path, title: str,
                     time_unit: float = 3600.0, unit_name: str = "h") -> Path:
    """Busy nodes over time (step curves), one per run, as a fraction of the machine."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(12, 4))
    for label, pts in series.items():
        if not pts:
            continue
        steps = binned([(t, float(n)) for t, n in pts])
        xs = [t / time_unit for t, _ in steps]
        ys = [n / nodes for _, n in steps]
        ax.step(xs, ys, where="post", label=label, linewidth=1.0)
    ax.set_xlabel(f"time ({unit_name})")
    ax.set_ylabel("fraction of the nodes")
    ax.set_ylim(bottom=0)
    ax.legend()
    ax.grid(alpha=0.3)
    ax.set_title(title)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path


def binned(pts: Sequence[tuple[float, float]], bins: int = 600) -> list[tuple[float, float]]:
    """A step series averaged over `bins` equal stretches of time when it has more points
    than that: a year-long trace stays a readable line, not a solid block."""
    if len(pts) <= bins or pts[-1][0] <= pts[0][0]:
        return list(pts)
    t0, t1 = pts[0][0], pts[-1][0]
    width = (t1 - t0) / bins
    out: list[tuple[float, float]] = []
    k, level = 0, pts[0][1]
    for b in range(bins):
        lo, hi = t0 + b * width, t0 + (b + 1) * width
        area, t = 0.0, lo
        while k + 1 < len(pts) and pts[k + 1][0] <= hi:
            k += 1
            area += level * (pts[k][0] - t)
            t, level = pts[k][0], pts[k][1]
        area += level * (hi - t)
        out.append((lo, area / width))
    return out


def busy_series(changes: list[tuple[float, int]]) -> list[tuple[float, int]]:
    """Cumulative busy nodes from (time, +/- nodes) changes."""
    out: list[tuple[float, int]] = []
    busy = 0
    for t, d in sorted(changes):
        busy += d
        if out and out[-1][0] == t:
            out[-1] = (t, busy)
        else:
            out.append((t, busy))
    return out


def size_changes(sizes_per_job: list[tuple[tuple[float, int], ...]]) -> list[tuple[float, int]]:
    changes: list[tuple[float, int]] = []
    for sizes in sizes_per_job:
        prev = 0
        for t, n in sizes:
            changes.append((t, n - prev))
            prev = n
    return changes


# A 20-colour palette walked with a stride coprime to 20: jobs next to each other in start
# order never share a colour (any 20 consecutive starts get 20 different ones).
_PALETTE = 20
_STRIDE = 7


def job_colors(jobs: list[Any]) -> dict[int, int]:
    """Palette index per job id, by start order (see _STRIDE)."""
    def start(j: Any) -> float:
        return min((e.time for e in j.events if e.event == "started"), default=float("inf"))

    ordered = sorted(jobs, key=lambda j: (start(j), j.job_id))
    return {j.job_id: (k * _STRIDE) % _PALETTE for k, j in enumerate(ordered)}


def _segments(j: Any) -> list[tuple[float, float, tuple[str, ...]]]:
    """(from, to, hosts) of each stretch a job held the same hosts."""
    segs = [(e.time, tuple(e.hosts)) for e in j.events
            if e.event in ("started", "grow_ordered", "grown", "shrunk", "released", "requeued", "ended")]
    return [(ta, tb, hosts) for (ta, hosts), (tb, _) in itertools.pairwise(segs) if hosts and tb > ta]


def label_spot(j: Any, node_index: dict[str, int]) -> tuple[float, float] | None:
    """Where a job's id is written: the middle of its longest stretch (time, node row)."""
    segs = _segments(j)
    if not segs:
        return None
    ta, tb, hosts = max(segs, key=lambda s: (s[1] - s[0]) * len(s[2]))
    rows = sorted(node_index[h] for h in hosts)
    return (ta + tb) / 2, (rows[0] + rows[-1] + 1) / 2


def plot_gantt(jobs: list[Any], node_index: dict[str, int], t0: float, t1: float, path: Path, title: str,
               time_unit: float = 3600.0, unit_name: str = "h") -> Path:
    """Nodes (rows) over time, a colour per job that no neighbour shares, the job's id on
    it, its shape changing where it was resized (grows and shrinks marked), and a legend."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(14, 7))
    cmap = plt.get_cmap("tab20")
    colors = job_colors(jobs)
    span = t1 - t0
    for j in jobs:
        color = cmap(colors[j.job_id])
        for ta, tb, hosts in _segments(j):
            lo, hi = max(ta, t0), min(tb, t1)
            if hi <= lo:
                continue
            idx = sorted(node_index[h] for h in hosts)
            start = prev = idx[0]
            for i in [*idx[1:], None]:
                if i is not None and i == prev + 1:
                    prev = i
                    continue
                ax.broken_barh([((lo - t0) / time_unit, (hi - lo) / time_unit)], (start, prev - start + 1),
                               facecolors=color, edgecolor="white", linewidth=0.3)
                if i is not None:
                    start = prev = i
        for e in j.events:
            if e.event in ("shrunk", "grown") and t0 <= e.time <= t1 and e.hosts:
                # One mark per resize, at the middle of the hosts the job has after it.
                rows = sorted(node_index[h] for h in e.hosts)
                ax.scatter([(e.time - t0) / time_unit], [(rows[0] + rows[-1] + 1) / 2],
                           marker="^" if e.event == "grown" else "v", s=18, color="black", zorder=3)
        spot = label_spot(j, node_index)
        # Written where the job is wide enough in time to hold it (about 1/60 of the window).
        if spot is not None and t0 <= spot[0] <= t1 and span > 0:
            longest = max(tb - ta for ta, tb, _ in _segments(j))
            if longest >= span / 60:
                ax.text((spot[0] - t0) / time_unit, spot[1], str(j.job_id), ha="center", va="center", fontsize=7)
    ax.set_xlim(0, span / time_unit)
    ax.set_ylim(0, len(node_index))
    ax.set_xlabel(f"time from window start ({unit_name})")
    ax.set_ylabel("node")
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    ax.legend(handles=[Patch(facecolor=cmap(0), label="a job (its id written on it)"),
                       Line2D([], [], marker="^", color="black", linestyle="", label="grown"),
                       Line2D([], [], marker="v", color="black", linestyle="", label="shrunk")],
              loc="upper right", fontsize=8, framealpha=0.9)
    ax.set_title(title)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path


def plot_curves(panels: dict[str, dict[str, list[tuple[float, float, float, float]]]], path: Path,
                title: str) -> Path:
    """One panel per metric: per policy, (x, mean, min, max) points as a line with its
    min..max band; a colour and marker per policy, from a palette that does not repeat."""
    plt = _plt()
    fig, axes = plt.subplots(1, len(panels), figsize=(7 * len(panels), 5), squeeze=False)
    cmap = plt.get_cmap("tab20")
    markers = "os^vD<>pPX*h"
    for ax, (label, series) in zip(axes[0], panels.items()):
        for k, (name, pts) in enumerate(series.items()):
            if not pts:
                continue
            xs = [p[0] for p in pts]
            color = cmap(k % 20)
            ax.plot(xs, [p[1] for p in pts], marker=markers[k % len(markers)], color=color, label=name)
            ax.fill_between(xs, [p[2] for p in pts], [p[3] for p in pts], color=color, alpha=0.12)
        ax.set_xlabel("malleable jobs (%)")
        ax.set_ylabel(label)
        ax.set_yscale("log")
        ax.grid(alpha=0.3, which="both")
    axes[0][0].legend(fontsize=8, ncol=2)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path
