"""PNG plots of simulated (and real) runs: grid curves, utilization over time, a Gantt chart.

matplotlib is imported inside the functions with the Agg backend, so `elasticd` starts fast
and plots work without a display.
"""

from __future__ import annotations

import itertools
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
        xs = [t / time_unit for t, _ in pts]
        ys = [n / nodes for _, n in pts]
        ax.step(xs, ys, where="post", label=label, linewidth=0.8)
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


def plot_gantt(jobs: list[Any], node_index: dict[str, int], t0: float, t1: float, path: Path, title: str,
               time_unit: float = 3600.0, unit_name: str = "h") -> Path:
    """Nodes (rows) over time, a colour per job; a job's shape changes where it was resized."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(14, 7))
    cmap = plt.get_cmap("tab20")
    for j in jobs:
        segs = [(e.time, e.hosts) for e in j.events if e.event in ("started", "grow_ordered", "grown", "shrunk", "released", "ended")]
        color = cmap(j.job_id % 20)
        for (ta, hosts), (tb, _) in itertools.pairwise(segs):
            lo, hi = max(ta, t0), min(tb, t1)
            if hi <= lo or not hosts:
                continue
            idx = sorted(node_index[h] for h in hosts)
            start = prev = idx[0]
            for i in idx[1:] + [None]:
                if i is not None and i == prev + 1:
                    prev = i
                    continue
                ax.broken_barh([((lo - t0) / time_unit, (hi - lo) / time_unit)], (start, prev - start + 1),
                               facecolors=color, edgecolor="none")
                if i is not None:
                    start = prev = i
        for e in j.events:
            if e.event in ("shrunk", "grown") and t0 <= e.time <= t1:
                ax.axvline((e.time - t0) / time_unit, color=color, linewidth=0.3, alpha=0.5)
    ax.set_xlim(0, (t1 - t0) / time_unit)
    ax.set_ylim(0, len(node_index))
    ax.set_xlabel(f"time from window start ({unit_name})")
    ax.set_ylabel("node")
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
