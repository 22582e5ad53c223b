"""Schedule metrics, computed the same way for real runs and simulated ones.

Bounded slowdown uses tau = 10 s, as the seed papers do, so that very short jobs do not
dominate the mean.
"""

from __future__ import annotations

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
