"""PNG plots of runs, drawn from what the runs wrote (summaries, per-job files), never by
simulating again: metric curves over malleable fractions, paired changes against rigid EASY,
utilization over time binned and set against rigid EASY's. Gantt charts: elasticd.sim.gantt.

matplotlib is imported inside the functions with the Agg backend, so `elasticd` starts fast
and plots work without a display.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from elasticd.errors import MissingExtra
from elasticd.metrics import JobRow, StepIntegral

if TYPE_CHECKING:
    from elasticd.intervals import Paired

_CURVES = (
    ("mean_turnaround", "mean turnaround (s)"),
    ("mean_wait", "mean wait (s)"),
    ("utilization", "node utilization"),
    ("mean_bounded_slowdown", "mean bounded slowdown (static run, tau 10 s)"),
    ("stretch_p95", "stretch p95 (run / static run)"),
    ("expands_per_job", "expands per job"),
)
DPI = 100


def plt_() -> Any:
    try:
        import matplotlib
    except ImportError:
        raise MissingExtra("drawing plots", "plots", "matplotlib") from None

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_grid(summary: list[dict[str, Any]], path: Path, title: str) -> Path:
    """Each metric against the malleable fraction, one line per policy, IQR as error bars."""
    plt = plt_()
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
    fig.savefig(path, dpi=DPI)
    plt.close(fig)
    return path


def plot_paired(panels: dict[str, dict[str, dict[str, list[tuple[float, Paired]]]]], path: Path, title: str) -> Path:
    """Rows: metrics; columns: settings; in each panel, per policy (in the order given), the
    paired change against rigid EASY (%) with its 95 % interval; 0 drawn. With one malleable
    fraction the policies are the x axis; with several, each policy is a line over the
    fractions, spread a little along x so that intervals at one fraction do not hide each other."""
    plt = plt_()
    metrics = list(panels)
    settings = list(dict.fromkeys(s for m in metrics for s in panels[m]))
    policies = list(dict.fromkeys(p for m in metrics for s in panels[m].values() for p in s))
    fractions = sorted({x for m in metrics for s in panels[m].values() for pts in s.values() for x, _ in pts})
    one = len(fractions) == 1
    fig, axes = plt.subplots(len(metrics), len(settings), figsize=(5.5 * len(settings), 4.4 * len(metrics)),
                             squeeze=False)
    cmap = plt.get_cmap("tab20")
    markers = "os^vD<>pPX*h"
    for i, metric in enumerate(metrics):
        for j, setting in enumerate(settings):
            ax = axes[i][j]
            series = panels[metric].get(setting, {})
            for k, p in enumerate(policies):
                pts = sorted(series.get(p, []), key=lambda x: x[0])
                if not pts:
                    continue
                dx = (k - (len(policies) - 1) / 2) * 0.8
                xs = [float(k)] if one else [x + dx for x, _ in pts]
                ys = [100 * q.mean for _, q in pts]
                err = [100 * q.half_width if q.n > 1 else 0.0 for _, q in pts]
                ax.errorbar(xs, ys, yerr=err, marker=markers[k % len(markers)], color=cmap(k % 20), capsize=2,
                            linestyle="none" if one else "-", label=p)
            ax.axhline(0, color="black", linewidth=0.8)
            ax.set_title(setting + (f", {fractions[0]:.0f} % malleable" if one else ""), fontsize=10)
            if one:
                ax.set_xticks(range(len(policies)), policies, rotation=60, ha="right", fontsize=8)
            else:
                ax.set_xlabel("malleable jobs (%)")
            ax.set_ylabel(f"{metric}:\nchange vs rigid EASY (%)")
            ax.grid(alpha=0.3)
    if not one:
        axes[0][0].legend(fontsize=7, ncol=2)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=DPI)
    plt.close(fig)
    return path


def busy_changes(rows: Iterable[JobRow], into: list[tuple[float, float]] | None = None) -> list[tuple[float, float]]:
    """(time, +/- nodes) of every size change of the jobs: busy nodes over time, summed."""
    changes = [] if into is None else into
    for r in rows:
        if not r.started:
            continue
        prev = 0
        for t, n in r.timeline():
            changes.append((t, n - prev))
            prev = n
    return changes


def binned_utilization(rows: Sequence[JobRow], nodes: int, t0: float, t1: float, width: float) -> list[tuple[float, float]]:
    """(bin start, share of the machine busy on average in the bin) over [t0, t1)."""
    return binned(StepIntegral(busy_changes(rows)), nodes, t0, t1, width)


def binned(busy: StepIntegral, nodes: int, t0: float, t1: float, width: float) -> list[tuple[float, float]]:
    out: list[tuple[float, float]] = []
    t = t0
    while t < t1:
        hi = min(t + width, t1)
        out.append((t, busy.over(t, hi) / (nodes * (hi - t))))
        t += width
    return out


BINS = ((1.0, "second"), (60.0, "minute"), (3600.0, "hour"), (86400.0, "day"))
MAX_BINS = 800


def bin_width(span: float) -> tuple[float, str]:
    """The shortest of a second, a minute, an hour and a day that cuts the run into at most
    800 bins: hours for a month of a log (CEA Curie's 32 days: 768), days beyond (Theta's 132)."""
    for w, unit in BINS:
        if span / w <= MAX_BINS:
            return w, unit
    return BINS[-1]


def plot_utilization(runs: dict[str, StepIntegral], reference: str | None, nodes: int, t0: float, t1: float, path: Path,
                     title: str, width: tuple[float, str] | None = None,
                     window: tuple[float, float] | None = None) -> Path:
    """Top: each run's busy share of the machine (busy nodes over time: busy_changes) per bin
    (bin_width), as steps; bottom: each run's difference from the reference run's (rigid EASY)
    in percentage points, bin by bin, so runs whose curves lie on each other are still told
    apart. Time from t0 (the first submission)."""
    plt = plt_()
    w, unit = width or bin_width(t1 - t0)
    series = {label: binned(busy, nodes, t0, t1, w) for label, busy in runs.items()}
    ref = series.get(reference) if reference is not None else None
    if ref is not None and len(series) > 1:
        fig, (top, low) = plt.subplots(2, 1, figsize=(13, 7), sharex=True, gridspec_kw={"height_ratios": [3, 2]})
    else:
        fig, top = plt.subplots(figsize=(13, 4.5))
        low = None
    cmap = plt.get_cmap("tab10")
    for k, (label, pts) in enumerate(series.items()):
        xs = [(t - t0) / w for t, _ in pts]
        color = "black" if label == reference else cmap(k % 10)
        top.step(xs, [100 * u for _, u in pts], where="post", label=label, linewidth=1.0, color=color)
        if low is not None and ref is not None and label != reference:
            low.step(xs, [100 * (u - v) for (_, u), (_, v) in zip(pts, ref)], where="post", label=label,
                     linewidth=1.0, color=color)
    top.set_ylabel(f"busy nodes, mean per {unit} (% of {nodes})")
    top.set_ylim(0, 105)
    top.legend(fontsize=8, loc="lower right")
    top.grid(alpha=0.3)
    top.set_title(title, fontsize=10)
    if window is not None:
        for ax in (top, low) if low is not None else (top,):
            for t in window:
                ax.axvline((t - t0) / w, color="grey", linestyle="--", linewidth=0.8)
    axis = top
    if low is not None:
        low.axhline(0, color="black", linewidth=0.8)
        low.set_ylabel(f"minus {reference}\n(percentage points)")
        low.grid(alpha=0.3)
        axis = low
    axis.set_xlabel(f"time from the first submission ({unit}s)")
    fig.tight_layout()
    fig.savefig(path, dpi=DPI)
    plt.close(fig)
    return path
