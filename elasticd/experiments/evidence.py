"""Why a cell is worse than rigid EASY, from its runs' per-job files, never from a guess.

Each seed's run is set beside rigid EASY's run of the same seed (the same jobs, submitted at
the same times), job by job, over the measured jobs (submitted in the file's window):
- which jobs ended later, by how much, and how that splits into waiting and running;
- what kind they were (rigid, malleable; started below their logged size, shrunk);
- while those jobs waited longer than under rigid EASY, what the machine's nodes were doing:
  held beyond a job's logged size (grown or started wide), held by a job running past the end
  its static run would have given it (stretched by its resizes), or idle;
- the largest losses, by job, with what happened to each.
Counts and sums are per seed, averaged over the seeds.
"""

from __future__ import annotations

import itertools
import math
import statistics
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from elasticd.metrics import JobRow, StepIntegral
from elasticd.perjob import RunFile, read


@dataclass(frozen=True)
class Loss:
    seed: int
    job: JobRow
    delta: float  # seconds of turnaround lost
    waited: float  # of which waiting
    easy_start: float


@dataclass(frozen=True)
class SeedEvidence:
    measured: int
    losers: int
    lost: float  # seconds
    lost_waiting: float
    lost_running: float
    gainers: int
    gained: float
    losers_malleable: int
    losers_below_logged: int  # malleable losers started on fewer nodes than logged
    losers_shrunk: int
    # Node-seconds over the losers' extra waits: the machine's, and what was beyond logged
    # sizes, past static ends, idle.
    machine: float
    beyond_logged: float
    past_static_end: float
    idle: float
    losses: list[Loss]


def _held(rows: list[JobRow], level: Callable[[JobRow, int], int], since: Callable[[JobRow], float]) -> StepIntegral:
    """Nodes held over time by each job, counted as `level(job, size)` from `since(job)` on."""
    changes: list[tuple[float, float]] = []
    for r in rows:
        if not r.started:
            continue
        t0 = since(r)
        for (ta, n), (tb, _) in itertools.pairwise(r.timeline()):
            lo, k = max(ta, t0), level(r, n)
            if tb > lo and k:
                changes += [(lo, k), (tb, -k)]
    return StepIntegral(changes)


def _beyond_logged(r: JobRow, n: int) -> int:
    return max(0, n - r.logged_nodes)


def _all(r: JobRow, n: int) -> int:
    return n


def _from_start(r: JobRow) -> float:
    return r.start if r.start is not None else math.inf


def _from_static_end(r: JobRow) -> float:
    """When its static run would have ended it (never, if its static run is unknown)."""
    if r.start is None or r.static_run is None:
        return math.inf
    return r.start + r.static_run


def compare_seed(seed: int, run: RunFile, easy: RunFile) -> SeedEvidence:
    w0, w1 = run.window
    theirs = {r.job_id: r for r in easy.rows if r.started}
    mine = [r for r in run.rows if r.started and w0 <= r.submit <= w1 and r.job_id in theirs]
    beyond = _held(run.rows, _beyond_logged, _from_start)
    past = _held(run.rows, _all, _from_static_end)
    busy = _held(run.rows, _all, _from_start)
    losses: list[Loss] = []
    gained = 0.0
    gainers = 0
    machine = b = p = idle = 0.0
    for r in mine:
        e = theirs[r.job_id]
        assert r.end is not None and e.end is not None and r.start is not None and e.start is not None
        delta = (r.end - r.submit) - (e.end - e.submit)
        if delta > 0:
            losses.append(Loss(seed, r, delta, r.start - e.start, e.start))
            if r.start > e.start:
                a, z = e.start, r.start
                machine += run.machine_nodes * (z - a)
                b += beyond.over(a, z)
                p += past.over(a, z)
                idle += run.machine_nodes * (z - a) - busy.over(a, z)
        elif delta < 0:
            gainers += 1
            gained -= delta
    return SeedEvidence(
        measured=len(mine), losers=len(losses), lost=sum(x.delta for x in losses),
        lost_waiting=sum(x.waited for x in losses), lost_running=sum(x.delta - x.waited for x in losses),
        gainers=gainers, gained=gained, losers_malleable=sum(1 for x in losses if x.job.kind != "rigid"),
        losers_below_logged=sum(1 for x in losses if x.job.kind != "rigid" and x.job.start_nodes < x.job.logged_nodes),
        losers_shrunk=sum(1 for x in losses if x.job.shrinks > 0),
        machine=machine, beyond_logged=b, past_static_end=p, idle=idle,
        losses=sorted(losses, key=lambda x: -x.delta)[:3])


def _hours(seconds: float) -> str:
    return f"{seconds / 3600:,.0f}"


def _what_happened(x: Loss) -> str:
    j = x.job
    parts = [j.kind]
    if j.kind == "rigid":
        parts.append(f"{j.logged_nodes} nodes")
    else:
        parts.append(f"started on {j.start_nodes} of {j.logged_nodes} logged nodes")
        if j.shrinks or j.expands:
            n = j.shrinks + j.expands
            parts.append(f"{n} resize{'s' if n != 1 else ''}")
        if j.static_run and j.start is not None and j.end is not None:
            parts.append(f"stretch {(j.end - j.start) / j.static_run:.1f}x")
    how = "waiting" if x.waited >= x.delta / 2 else "running"
    return f"job {j.job_id} seed {x.seed} ({', '.join(parts)}) +{x.delta:,.0f} s, mostly {how}"


def why_worse(files: dict[int, Path], easy_files: dict[int, Path]) -> str:
    """The evidence line of a cell: its seeds' per-job files against rigid EASY's of the same
    seeds (module docstring)."""
    seeds = sorted(files.keys() & easy_files.keys())
    if not seeds:
        return "no per-job files to compare"
    ev = [compare_seed(s, read(files[s]), read(easy_files[s])) for s in seeds]

    def avg(f: str) -> float:
        return statistics.fmean(float(getattr(e, f)) for e in ev)

    machine = sum(e.machine for e in ev)
    text = (f"per seed, {avg('losers'):,.0f} of {avg('measured'):,.0f} measured jobs ended later than under rigid "
            f"EASY (+{_hours(avg('lost'))} job-h: {_hours(avg('lost_waiting'))} waiting, "
            f"{_hours(avg('lost_running'))} running; {avg('losers_malleable'):,.0f} of them malleable, "
            f"{avg('losers_below_logged'):,.0f} started below their logged size, {avg('losers_shrunk'):,.0f} shrunk) "
            f"and {avg('gainers'):,.0f} earlier (-{_hours(avg('gained'))} job-h)")
    if machine > 0:
        text += (f"; while those jobs waited longer, {100 * sum(e.beyond_logged for e in ev) / machine:.0f} % of the "
                 f"machine was held beyond jobs' logged sizes, {100 * sum(e.past_static_end for e in ev) / machine:.0f} % "
                 f"by jobs running past their static run's end, {100 * sum(e.idle for e in ev) / machine:.0f} % idle")
    # The largest losses over the seeds, a job once (a rigid job loses alike in every seed).
    top: list[Loss] = []
    for x in sorted((x for e in ev for x in e.losses), key=lambda x: -x.delta):
        if all(x.job.job_id != y.job.job_id for y in top):
            top.append(x)
        if len(top) == 3:
            break
    if top:
        text += "; largest: " + "; ".join(_what_happened(x) for x in top)
    return text
