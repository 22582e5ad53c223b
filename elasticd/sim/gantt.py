"""Gantt charts: nodes (rows) over a window of time, a block per job and size.

Two sources of blocks, one drawing:
- a real run's queue document names the hosts of every size change (`blocks_from_events`);
- a per-job file has each job's node counts only (the simulator does not keep hosts), so
  its jobs are placed on rows by `place`: the run's starts, resizes and ends replayed in time
  order, each job taking the lowest free rows that hold it in one block if any do (a grow
  next to its block where it can), a shrink giving back its highest rows. The rows are then a
  placement of the recorded counts, not the simulator's hosts (which no metric depends on), and
  the chart's title says so.

The drawing: a colour per job that no job touching it shares (a greedy colouring of the jobs'
adjacency: blocks that share an edge, in rows or in time); each job's id written at the
middle of its largest block, when the block can hold it; grows and shrinks marked.
"""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from elasticd.metrics import JobRow

# A job's blocks: (from, to, rows it held) per stretch of one size.
Segment = tuple[float, float, tuple[int, ...]]
# A resize mark: (time, row it is drawn at, "grown" | "shrunk").
Mark = tuple[float, float, str]


@dataclass(frozen=True)
class Rect:
    job: int
    t0: float
    t1: float
    r0: int  # first row
    r1: int  # one past the last

    @property
    def area(self) -> float:
        return (self.t1 - self.t0) * (self.r1 - self.r0)


def runs_of(rows: Iterable[int]) -> list[tuple[int, int]]:
    """Sorted rows as [first, one past the last) runs of consecutive ones."""
    out: list[tuple[int, int]] = []
    for r in sorted(rows):
        if out and out[-1][1] == r:
            out[-1] = (out[-1][0], r + 1)
        else:
            out.append((r, r + 1))
    return out


def rects(blocks: dict[int, list[Segment]], t0: float, t1: float) -> list[Rect]:
    """Every job's blocks clipped to [t0, t1], as rectangles of consecutive rows."""
    out: list[Rect] = []
    for job, segs in blocks.items():
        for ta, tb, held in segs:
            lo, hi = max(ta, t0), min(tb, t1)
            if hi <= lo:
                continue
            out.extend(Rect(job, lo, hi, a, b) for a, b in runs_of(held))
    return out


def _overlap(a0: float, a1: float, b0: float, b1: float) -> bool:
    return a0 < b1 and b0 < a1


def adjacency(rs: list[Rect]) -> dict[int, set[int]]:
    """Jobs whose blocks share an edge: one's last row under another's first over a common
    time, or one's end at another's start over common rows."""
    adj: dict[int, set[int]] = {r.job: set() for r in rs}
    by_r0: dict[int, list[Rect]] = {}
    by_t0: dict[float, list[Rect]] = {}
    for r in rs:
        by_r0.setdefault(r.r0, []).append(r)
        by_t0.setdefault(r.t0, []).append(r)
    for a in rs:
        for b in by_r0.get(a.r1, ()):
            if b.job != a.job and _overlap(a.t0, a.t1, b.t0, b.t1):
                adj[a.job].add(b.job)
                adj[b.job].add(a.job)
        for b in by_t0.get(a.t1, ()):
            if b.job != a.job and _overlap(a.r0, a.r1, b.r0, b.r1):
                adj[a.job].add(b.job)
                adj[b.job].add(a.job)
    return adj


def colours(adj: dict[int, set[int]], palette: int) -> dict[int, int]:
    """A colour index per job that no neighbour has: most-constrained job first (DSatur),
    lowest free index. More neighbours than colours can force a repeat; then the colour
    least used among its neighbours is taken (never happened on the logs here)."""
    colour: dict[int, int] = {}
    left = set(adj)
    while left:
        job = max(left, key=lambda j: (len({colour[n] for n in adj[j] if n in colour}), len(adj[j]), -j))
        used = [colour[n] for n in adj[job] if n in colour]
        free = next((c for c in range(palette) if c not in used), None)
        colour[job] = free if free is not None else min(range(palette), key=used.count)
        left.discard(job)
    return colour


def blocks_from_events(jobs: Iterable[Any], node_index: dict[str, int]) -> tuple[dict[int, list[Segment]], list[Mark]]:
    """A real run's blocks and marks from its jobs' events (each with time, event, hosts)."""
    blocks: dict[int, list[Segment]] = {}
    marks: list[Mark] = []
    for j in jobs:
        segs = [(e.time, tuple(sorted(node_index[h] for h in e.hosts))) for e in j.events
                if e.event in ("started", "grow_ordered", "grown", "shrunk", "released", "requeued", "ended")]
        blocks[j.job_id] = [(ta, tb, held) for (ta, held), (tb, _) in itertools.pairwise(segs) if held and tb > ta]
        for e in j.events:
            if e.event in ("shrunk", "grown") and e.hosts:
                held = sorted(node_index[h] for h in e.hosts)
                marks.append((e.time, (held[0] + held[-1] + 1) / 2, e.event))
    return blocks, marks


def place(rows: Sequence[JobRow], nodes: int, t0: float, t1: float) -> tuple[dict[int, list[Segment]], list[Mark]]:
    """Rows for the jobs of a per-job file that overlap [t0, t1] (module docstring): the jobs
    running at t0 are placed first, in start order, then every change in time order, what
    is given back before what is taken at one instant."""
    live = [r for r in rows if r.started and r.start is not None and r.end is not None and r.start < t1 and r.end > t0]
    events: list[tuple[float, int, int, int, int]] = []  # (time, take?, order, job, size after)
    for k, r in enumerate(sorted(live, key=lambda r: (r.start, r.job_id))):
        tl = r.timeline()
        first = next(i for i in range(len(tl)) if i + 1 == len(tl) or tl[i + 1][0] > t0)
        ta, n = tl[first]
        events.append((max(ta, t0), 1, k, r.job_id, n))
        prev = n
        for t, n in tl[first + 1:]:
            if t >= t1:
                break
            events.append((t, 1 if n > prev else 0, k, r.job_id, n))
            prev = n
    events.sort()
    free = bytearray(b"\x01" * nodes)
    held: dict[int, list[int]] = {}
    since: dict[int, float] = {}
    blocks: dict[int, list[Segment]] = {}
    marks: list[Mark] = []
    for t, _, _, job, n in events:
        mine = held.get(job, [])
        if job in since and mine:
            blocks.setdefault(job, []).append((since[job], t, tuple(mine)))
        if n < len(mine):
            for row in mine[n:]:
                free[row] = 1
            mine = mine[:n]
            if n:
                marks.append((t, (mine[0] + mine[-1] + 1) / 2, "shrunk"))
        elif n > len(mine):
            grown = bool(mine)
            mine = sorted(mine + _take(free, n - len(mine), mine[-1] + 1 if mine else None))
            if grown:
                marks.append((t, (mine[0] + mine[-1] + 1) / 2, "grown"))
        held[job], since[job] = mine, t
    for job, mine in held.items():
        if mine:
            blocks.setdefault(job, []).append((since[job], t1, tuple(mine)))
    return blocks, marks


def _take(free: bytearray, n: int, near: int | None) -> list[int]:
    """n free rows (free[i] is 1): the block beginning at `near` if it is free, else the lowest
    block of n free rows, else the lowest free rows; taken from `free`."""
    block = b"\x01" * n
    at = near if near is not None and free[near:near + n] == block else free.find(block)
    if at >= 0:
        pick = list(range(at, at + n))
    else:
        pick = []
        i = free.find(1)
        while i >= 0 and len(pick) < n:
            pick.append(i)
            i = free.find(1, i + 1)
    if len(pick) < n:
        raise ValueError(f"{n} nodes asked with {len(pick)} free: the file's sizes exceed the machine")
    for i in pick:
        free[i] = 0
    return pick


def window(rows: Sequence[JobRow], after: float, starts: int = 40) -> tuple[float, float]:
    """A short, busy window: a typical stretch of `starts` consecutive starts after `after`,
    the one whose length is the median (neither an idle gap of the log nor a burst of seconds)."""
    begun = sorted(r.start for r in rows if r.start is not None)
    later = begun[bisect.bisect_left(begun, after):] or begun
    n = min(starts, len(later) - 1)
    if n <= 0:
        t = later[0] if later else 0.0
        return t, t + 1.0
    spans = sorted(range(len(later) - n), key=lambda i: (later[i + n] - later[i], i))
    k = spans[len(spans) // 2]
    t0, t1 = later[k], later[k + n]
    return t0, max(t1, t0 + 1.0)


def label_spots(rs: list[Rect], px_per_second: float, px_per_row: float) -> dict[int, tuple[float, float]]:
    """Where each job's id is written: the middle of its largest block (time, row), when that
    block is wide and tall enough to hold it; a job none of whose blocks can is not labelled
    (its id would sit on another job's)."""
    out = {}
    for job, mine in itertools.groupby(sorted(rs, key=lambda r: r.job), key=lambda r: r.job):
        big = max(mine, key=lambda r: r.area)
        if (big.t1 - big.t0) * px_per_second >= 5.5 * len(str(job)) + 4 and (big.r1 - big.r0) * px_per_row >= 11:
            out[job] = ((big.t0 + big.t1) / 2, (big.r0 + big.r1) / 2)
    return out


def _palette(plt: Any) -> list[Any]:
    """tab20's ten dark colours, then its ten light ones, then tab20b's and tab20c's: the
    colours a few neighbours get are as far apart as the palette allows."""
    t20 = list(plt.get_cmap("tab20").colors)
    return [*t20[0::2], *t20[1::2], *plt.get_cmap("tab20b").colors, *plt.get_cmap("tab20c").colors]


def plot_gantt(blocks: dict[int, list[Segment]], marks: list[Mark], nodes: int, t0: float, t1: float, path: Path,
               title: str, time_unit: float = 3600.0, unit_name: str = "h", origin: float | None = None) -> Path:
    """Nodes (rows) over [t0, t1] (module docstring). Times are shown from `origin` (the
    window's start by default) in `unit_name`."""
    from elasticd.sim.plots import DPI, plt_

    plt = plt_()
    origin = t0 if origin is None else origin
    rs = rects(blocks, t0, t1)
    palette = _palette(plt)
    colour = colours(adjacency(rs), len(palette))
    width_in, height_in = 14.0, 7.5
    fig, ax = plt.subplots(figsize=(width_in, height_in))
    from matplotlib.collections import PolyCollection

    def box(r: Rect) -> list[tuple[float, float]]:
        a, b = (r.t0 - origin) / time_unit, (r.t1 - origin) / time_unit
        return [(a, r.r0), (b, r.r0), (b, r.r1), (a, r.r1)]

    # One collection for every block: an artist each made a window of a thousand blocks slow.
    ax.add_collection(PolyCollection([box(r) for r in rs], facecolors=[palette[colour[r.job]] for r in rs],
                                     edgecolors="white", linewidths=0.3))
    # A label fits a block this wide and tall, from the axes' size in pixels (about 85 % by
    # 85 % of the figure) and a 6.5 pt font: ~5.5 px a digit, 11 px high.
    for job, (x, y) in label_spots(rs, 0.85 * width_in * DPI / max(t1 - t0, 1e-9),
                                   0.85 * height_in * DPI / max(nodes, 1)).items():
        ax.text((x - origin) / time_unit, y, str(job), ha="center", va="center", fontsize=6.5)
    shown = [m for m in marks if t0 <= m[0] <= t1]
    for kind, symbol in (("grown", "^"), ("shrunk", "v")):
        pts = [m for m in shown if m[2] == kind]
        if pts:
            ax.scatter([(t - origin) / time_unit for t, _, _ in pts], [y for _, y, _ in pts], marker=symbol, s=16,
                       color="black", zorder=3)
    ax.set_xlim((t0 - origin) / time_unit, (t1 - origin) / time_unit)
    ax.set_ylim(0, nodes)
    ax.set_xlabel(f"time ({unit_name})" if origin == t0 else f"time from the first submission ({unit_name})")
    ax.set_ylabel("node")
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    ax.legend(handles=[Patch(facecolor=palette[0], label="a job (its id on its largest block)"),
                       Line2D([], [], marker="^", color="black", linestyle="", label="grown"),
                       Line2D([], [], marker="v", color="black", linestyle="", label="shrunk")],
              loc="upper right", fontsize=8, framealpha=0.9)
    ax.set_title(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=DPI)
    plt.close(fig)
    return path

