"""Schedule metrics, computed the same way for real runs and simulated ones.

Bounded slowdown uses tau = 10 s, as the seed papers do, so that very short jobs do not
dominate the mean.
"""

from __future__ import annotations

import itertools
import statistics
from dataclasses import dataclass

BSLD_TAU = 10.0


@dataclass(frozen=True)
class JobRecord:
    job_id: int
    name: str
    state: str
    submit: float
    start: float | None
    end: float | None
    node_seconds: float


@dataclass(frozen=True)
class JobMetrics:
    job_id: int
    name: str
    state: str
    wait: float | None
    run: float | None
    turnaround: float | None
    bounded_slowdown: float | None


@dataclass(frozen=True)
class Summary:
    jobs: int
    started: int
    makespan: float
    utilization: float
    mean_wait: float
    mean_turnaround: float
    mean_bounded_slowdown: float


def job_metrics(r: JobRecord, tau: float = BSLD_TAU) -> JobMetrics:
    if r.start is None or r.end is None:
        return JobMetrics(r.job_id, r.name, r.state, None, None, None, None)
    wait = r.start - r.submit
    run = r.end - r.start
    turnaround = r.end - r.submit
    bsld = max(1.0, turnaround / max(run, tau))
    return JobMetrics(r.job_id, r.name, r.state, wait, run, turnaround, bsld)


def summarize(records: list[JobRecord], total_nodes: int, tau: float = BSLD_TAU) -> Summary:
    """Makespan runs from the first submission to the last end; jobs that never started
    count for makespan only through their submission."""
    per = [job_metrics(r, tau) for r in records]
    started = [m for m in per if m.turnaround is not None]
    if not records:
        return Summary(0, 0, 0.0, 0.0, 0.0, 0.0, 0.0)
    t0 = min(r.submit for r in records)
    ends = [r.end for r in records if r.end is not None]
    makespan = (max(ends) - t0) if ends else 0.0
    used = sum(r.node_seconds for r in records)
    util = used / (total_nodes * makespan) if makespan > 0 and total_nodes > 0 else 0.0

    def mean(xs: list[float]) -> float:
        return statistics.fmean(xs) if xs else 0.0

    return Summary(
        jobs=len(records),
        started=len(started),
        makespan=makespan,
        utilization=util,
        mean_wait=mean([m.wait for m in started if m.wait is not None]),
        mean_turnaround=mean([m.turnaround for m in started if m.turnaround is not None]),
        mean_bounded_slowdown=mean([m.bounded_slowdown for m in started if m.bounded_slowdown is not None]),
    )


@dataclass(frozen=True)
class SizedRecord:
    """A job with the history of its size: (time, nodes) change points, ending at 0."""

    job_id: int
    submit: float
    start: float
    end: float
    sizes: tuple[tuple[float, int], ...]
    shrinks: int = 0
    expands: int = 0
    timed_out: bool = False  # ended by its time limit


@dataclass(frozen=True)
class WindowSummary:
    jobs: int
    makespan: float
    utilization: float
    mean_wait: float
    median_wait: float
    mean_turnaround: float
    median_turnaround: float
    mean_slowdown: float
    mean_bounded_slowdown: float
    shrinks_per_job: float
    expands_per_job: float
    timeouts: float = 0.0  # share of the measured jobs ended by their time limit


def busy_node_seconds(records: list[SizedRecord], t0: float, t1: float) -> float:
    """Node-seconds used inside [t0, t1], following every job's size changes."""
    total = 0.0
    for r in records:
        pts = r.sizes
        for (ta, n), (tb, _) in itertools.pairwise(pts):
            lo, hi = max(ta, t0), min(tb, t1)
            if hi > lo:
                total += n * (hi - lo)
    return total


def windowed_summary(
    records: list[SizedRecord], total_nodes: int, warmup: float, tau: float = BSLD_TAU
) -> WindowSummary:
    """Metrics as the real-workloads paper computes them: jobs submitted after the warm-up
    and up to the last submission; utilization over that same window (drain-down excluded).
    Makespan is the whole run's: first submission to last end.

    A run whose jobs were all submitted at one instant (one job; a batch given to `elasticd
    run` or to one `esubmit`) has no submission window to measure use over: its utilization
    is then the whole run's, first submission to last end, rather than a 0 % that reads as
    an idle machine."""
    if not records:
        return WindowSummary(0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0)
    first = min(r.submit for r in records)
    last_submit = max(r.submit for r in records)
    w0 = first + warmup
    if w0 >= last_submit:
        w0 = first  # a trace shorter than the warm-up: measure all of it
    w1 = last_submit
    sel = [r for r in records if w0 <= r.submit <= w1] or records
    waits = [r.start - r.submit for r in sel]
    tat = [r.end - r.submit for r in sel]
    runs = [r.end - r.start for r in sel]
    sld = [t / max(run, 1e-9) for t, run in zip(tat, runs)]
    bsld = [max(1.0, t / max(run, tau)) for t, run in zip(tat, runs)]
    if w1 <= w0:
        w1 = max(r.end for r in records)
    span = w1 - w0
    util = busy_node_seconds(records, w0, w1) / (total_nodes * span) if span > 0 else 0.0
    return WindowSummary(
        jobs=len(sel),
        makespan=max(r.end for r in records) - first,
        utilization=util,
        mean_wait=statistics.fmean(waits),
        median_wait=statistics.median(waits),
        mean_turnaround=statistics.fmean(tat),
        median_turnaround=statistics.median(tat),
        mean_slowdown=statistics.fmean(sld),
        mean_bounded_slowdown=statistics.fmean(bsld),
        shrinks_per_job=statistics.fmean(r.shrinks for r in sel),
        expands_per_job=statistics.fmean(r.expands for r in sel),
        timeouts=statistics.fmean(r.timed_out for r in sel),
    )


def spread(values: list[float]) -> tuple[float, float, float]:
    """(mean, median, interquartile range) over seeds, as the seed papers report."""
    if not values:
        return 0.0, 0.0, 0.0
    if len(values) == 1:
        return values[0], values[0], 0.0
    q = statistics.quantiles(values, n=4, method="inclusive")
    return statistics.fmean(values), statistics.median(values), q[2] - q[0]
