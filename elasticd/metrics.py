"""Schedule metrics as the seed papers define them, computed the same way for real runs and
simulated ones, from one record per job (JobRow: what a per-job file holds, elasticd.perjob).

Per job, with its *static run* (below):
- wait = start - submit; turnaround = end - submit (SD-Policy's "response time", MEBF's TAT).
- slowdown = turnaround / static run. SD-Policy (D'Amico et al., Sec. 4, "Average slowdown"):
  "the response time divided by the static execution time of the job"; MEBF (Sec. 4.3): the
  static execution time is "the execution time when the workload is executed without any
  reconfigurations". A job that a shrink stretched is slowed down by it: measured against the
  run it really had, it would score about 1 however long the shrink made it.
- bounded slowdown = max(1, turnaround / max(static run, tau)), tau = 10 s: Feitelson,
  Rudolph, Schwiegelshohn, Sevcik and Wong, "Theory and Practice in Parallel Job Scheduling"
  (JSSPP 1997), so that a job of a few seconds does not dominate the mean.
- stretch = run / static run (run = end - start): what resizing did to the job's own run (not
  in the seeds: elastic's, named so). Above 1 a job ran longer than it would have unresized.
- MEBF's own "slowdown" of a workload is a ratio of means, mean turnaround / mean static run:
  kept as `mebf_slowdown` beside SD-Policy's mean of ratios.

The static run of a job (`JobRow.static_run`):
- a trace job (a workload log, elasticd.sim.workload): its logged run time, at its logged
  size: the run it had, unreconfigured, on the machine that logged it;
- a job file whose model declares its `work`: its model's run on the size it asks a rigid
  scheduler for (`nodes` for a rigid job, `preferred` otherwise): work / S(preferred), the
  simulator's SimJob.run for the same file (elasticd.sim.workload.from_specs);
- any other job (no model, or a model without work): its own run if it was never resized
  (it ran statically), else unknown: nothing says how long it would have run unresized, and it
  is left out of slowdown and stretch (counted in `static_unknown`).

The earlier figure of this project, bounded slowdown over the run as it ran, is kept only as
`mean_bounded_slowdown_own_run`, never under the literature's name.

Workload metrics follow the real-workloads paper: jobs submitted after the warm-up and up to
the last submission are measured, utilization over that same window (drain-down excluded).
"""

from __future__ import annotations

import bisect
import itertools
import math
import statistics
from collections.abc import Iterable
from dataclasses import dataclass, fields
from typing import Any

from elastic_protocol.jobspec import PerfModel

BSLD_TAU = 10.0
STRETCHED = 2.0  # a job "stretched" in the tables: its run over twice its static run


@dataclass(frozen=True, slots=True)
class JobRow:
    """A job as its run left it: what its metrics, its plots and a reader need. Times are
    seconds on the run's clock; a job that never started has start and end None."""

    job_id: int
    kind: str  # rigid, moldable, malleable or evolving
    state: str  # COMPLETED, TIMEOUT, ...
    submit: float
    start: float | None
    end: float | None
    static_run: float | None  # see the module's docstring; None: unknown
    limit: float | None  # seconds at its logged size; None: none
    min_nodes: int
    preferred_nodes: int
    max_nodes: int
    logged_nodes: int  # the size it was logged (or asks a rigid scheduler) with
    start_nodes: int  # 0: never started
    final_nodes: int  # the size it ended on
    shrinks: int
    expands: int
    reconfig_seconds: float  # seconds its progress stood still for its resizes (its cost model)
    reconfig_node_seconds: float  # the same, times the nodes it held meanwhile
    # (time, nodes) of every size change strictly between its start and its end.
    size_changes: tuple[tuple[float, int], ...] = ()

    @property
    def started(self) -> bool:
        return self.start is not None and self.end is not None

    def timeline(self) -> list[tuple[float, int]]:
        """(time, nodes) from its start to its end, the last point at 0 nodes."""
        assert self.start is not None and self.end is not None
        return [(self.start, self.start_nodes), *self.size_changes, (self.end, 0)]

    def node_seconds(self) -> float:
        if not self.started:
            return 0.0
        return sum(n * (tb - ta) for (ta, n), (tb, _) in itertools.pairwise(self.timeline()))


@dataclass(frozen=True)
class JobMetrics:
    job_id: int
    wait: float | None
    run: float | None
    turnaround: float | None
    slowdown: float | None
    bounded_slowdown: float | None
    stretch: float | None


def slowdown(turnaround: float, static_run: float) -> float:
    return turnaround / static_run


def bounded_slowdown(turnaround: float, static_run: float, tau: float = BSLD_TAU) -> float:
    return max(1.0, turnaround / max(static_run, tau))


def job_metrics(r: JobRow, tau: float = BSLD_TAU) -> JobMetrics:
    if r.start is None or r.end is None:
        return JobMetrics(r.job_id, None, None, None, None, None, None)
    wait, run, tat = r.start - r.submit, r.end - r.start, r.end - r.submit
    s = r.static_run
    if s is None or s <= 0:
        return JobMetrics(r.job_id, wait, run, tat, None, None, None)
    return JobMetrics(r.job_id, wait, run, tat, slowdown(tat, s), bounded_slowdown(tat, s, tau), run / s)


def static_run_of(model: PerfModel | None, request: int, run: float | None, resized: bool) -> float | None:
    """A job file's static run (the module's docstring): its model's work at the size it asks
    a rigid scheduler for (`request`: nodes, or preferred), else its own run if it was never
    resized, else unknown."""
    if model is not None and model.work is not None:
        return model.work / model.speedup_model.speedup(request)
    if run is not None and not resized:
        return run
    return None


def recorded_row(job_id: int, kind: str, state: str, submit: float, start: float | None, end: float | None,
                 bounds: tuple[int, int, int], limit: float | None, model: PerfModel | None,
                 history: Iterable[tuple[float, int]], shrinks: int, expands: int) -> JobRow:
    """A job of a real run (the daemon's record, a queue document) as a row: its sizes from its
    (time, nodes) history, its static run from its job file (static_run_of), its
    reconfiguration seconds as its model prices each size change (0 without a model); its
    "logged" size is the one it asks a rigid scheduler for (bounds: min, max, preferred)."""
    # Its sizes while it ran (a size of 0 is its end, not a size).
    sizes = [(t, n) for t, n in history if n > 0 and (end is None or t < end)]
    changes: list[tuple[float, int]] = []
    seconds = node_seconds = 0.0
    cost = model.reconfig_cost if model is not None else None
    for (_, a), (t, b) in itertools.pairwise(sizes):
        if b != a:
            changes.append((t, b))
            if cost is not None:
                s = cost.seconds(a, b)
                seconds += s
                node_seconds += s * b
    lo, hi, pref = bounds
    run = end - start if start is not None and end is not None else None
    first = sizes[0][1] if sizes else 0
    return JobRow(job_id, kind, state, submit, start, end, static_run_of(model, pref, run, resized=bool(changes)),
                  limit, lo, pref, hi, pref, first, changes[-1][1] if changes else first, shrinks, expands, seconds,
                  node_seconds, tuple(changes))


# ---- a run as a whole ---------------------------------------------------------------------------
@dataclass(frozen=True)
class Summary:
    """A batch's figures (`elasticd run`, `elasticd experiment`): makespan from the first
    submission to the last end, utilization over it."""

    jobs: int
    started: int
    makespan: float
    utilization: float
    mean_wait: float
    mean_turnaround: float
    mean_bounded_slowdown: float  # over the jobs whose static run is known
    static_unknown: int


def _mean(xs: list[float]) -> float:
    return statistics.fmean(xs) if xs else 0.0


def summarize(rows: list[JobRow], total_nodes: int, tau: float = BSLD_TAU) -> Summary:
    """Jobs that never started count for makespan only through their submission."""
    if not rows:
        return Summary(0, 0, 0.0, 0.0, 0.0, 0.0, 0.0, 0)
    per = [job_metrics(r, tau) for r in rows]
    started = [m for m in per if m.turnaround is not None]
    t0 = min(r.submit for r in rows)
    ends = [r.end for r in rows if r.end is not None]
    makespan = (max(ends) - t0) if ends else 0.0
    used = sum(r.node_seconds() for r in rows)
    util = used / (total_nodes * makespan) if makespan > 0 and total_nodes > 0 else 0.0
    return Summary(
        jobs=len(rows), started=len(started), makespan=makespan, utilization=util,
        mean_wait=_mean([m.wait for m in started if m.wait is not None]),
        mean_turnaround=_mean([m.turnaround for m in started if m.turnaround is not None]),
        mean_bounded_slowdown=_mean([m.bounded_slowdown for m in started if m.bounded_slowdown is not None]),
        static_unknown=sum(1 for m in started if m.bounded_slowdown is None),
    )


@dataclass(frozen=True)
class WindowSummary:
    jobs: int
    makespan: float
    utilization: float
    mean_wait: float
    median_wait: float
    mean_turnaround: float
    median_turnaround: float
    mean_slowdown: float  # SD-Policy's: mean of turnaround / static run
    mean_bounded_slowdown: float  # the same, bounded (tau = 10 s)
    mebf_slowdown: float  # MEBF's: mean turnaround / mean static run
    stretch_mean: float  # run / static run
    stretch_p95: float
    stretch_max: float
    stretched: float  # share of the jobs whose run was over STRETCHED times their static run
    reconfig_node_seconds: float  # summed over the measured jobs
    reconfig_share: float  # of the node-seconds the measured jobs used
    shrinks_per_job: float
    expands_per_job: float
    timeouts: float  # share of the jobs ended by their time limit
    mean_bounded_slowdown_own_run: float  # NOT the literature's: over the run as it ran
    static_unknown: int = 0  # measured jobs without a static run (real runs only)


_FIGURES = tuple(f.name for f in fields(WindowSummary) if f.name not in ("jobs", "static_unknown"))


def measurement_window(rows: list[JobRow], warmup: float) -> tuple[float, float]:
    """(first submission + warm-up, last submission): the jobs submitted in it are measured.
    A trace shorter than its warm-up is measured whole, from its first submission."""
    first = min(r.submit for r in rows)
    last = max(r.submit for r in rows)
    w0 = first + warmup
    return (first if w0 >= last else w0), last


def busy_node_seconds(rows: list[JobRow], t0: float, t1: float) -> float:
    """Node-seconds used inside [t0, t1], following every job's size changes."""
    total = 0.0
    for r in rows:
        if not r.started:
            continue
        for (ta, n), (tb, _) in itertools.pairwise(r.timeline()):
            lo, hi = max(ta, t0), min(tb, t1)
            if hi > lo:
                total += n * (hi - lo)
    return total


def percentile(values: list[float], p: float) -> float:
    """Linear interpolation between the closest ranks: numpy.percentile's default, and
    statistics.quantiles' "inclusive" method."""
    xs = sorted(values)
    if not xs:
        return 0.0
    k = (len(xs) - 1) * p / 100
    lo = math.floor(k)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


def summarize_window(rows: list[JobRow], total_nodes: int, w0: float, w1: float,
                     tau: float = BSLD_TAU) -> WindowSummary:
    """The measured jobs' figures: those submitted in [w0, w1] (every started job when none
    is); utilization over [w0, w1], or, when the jobs were all submitted at one instant (one
    job; a batch given to `elasticd run` or to one `esubmit`), over the whole run, first
    submission to last end, rather than a 0 % that reads as an idle machine."""
    ran = [r for r in rows if r.started]
    if not ran:
        zeros: dict[str, Any] = dict.fromkeys(_FIGURES, 0.0)
        return WindowSummary(0, **zeros)
    sel = [r for r in ran if w0 <= r.submit <= w1] or ran
    per = [job_metrics(r, tau) for r in sel]
    waits = [m.wait for m in per if m.wait is not None]
    tats = [m.turnaround for m in per if m.turnaround is not None]
    known = [(m, r) for m, r in zip(per, sel) if m.slowdown is not None]
    slds = [m.slowdown for m, _ in known if m.slowdown is not None]
    bslds = [m.bounded_slowdown for m, _ in known if m.bounded_slowdown is not None]
    stretches = [m.stretch for m, _ in known if m.stretch is not None]
    statics = [r.static_run for _, r in known if r.static_run is not None]
    own = [max(1.0, t / max(m.run or 0.0, tau)) for m, t in zip(per, tats)]
    first = min(r.submit for r in rows)
    last_end = max(r.end for r in ran if r.end is not None)
    span0, span1 = (w0, w1) if w1 > w0 else (w0, last_end)
    span = span1 - span0
    util = busy_node_seconds(ran, span0, span1) / (total_nodes * span) if span > 0 else 0.0
    used = sum(r.node_seconds() for r in sel)
    reconf = sum(r.reconfig_node_seconds for r in sel)
    return WindowSummary(
        jobs=len(sel),
        makespan=last_end - first,
        utilization=util,
        mean_wait=statistics.fmean(waits),
        median_wait=statistics.median(waits),
        mean_turnaround=statistics.fmean(tats),
        median_turnaround=statistics.median(tats),
        mean_slowdown=_mean(slds),
        mean_bounded_slowdown=_mean(bslds),
        mebf_slowdown=statistics.fmean([m.turnaround for m, _ in known if m.turnaround is not None])
        / statistics.fmean(statics) if statics else 0.0,
        stretch_mean=_mean(stretches),
        stretch_p95=percentile(stretches, 95),
        stretch_max=max(stretches, default=0.0),
        stretched=sum(1 for s in stretches if s > STRETCHED) / len(stretches) if stretches else 0.0,
        reconfig_node_seconds=reconf,
        reconfig_share=reconf / used if used > 0 else 0.0,
        shrinks_per_job=statistics.fmean(r.shrinks for r in sel),
        expands_per_job=statistics.fmean(r.expands for r in sel),
        timeouts=statistics.fmean(r.state == "TIMEOUT" for r in sel),
        mean_bounded_slowdown_own_run=statistics.fmean(own),
        static_unknown=len(sel) - len(known),
    )


def windowed_summary(rows: list[JobRow], total_nodes: int, warmup: float, tau: float = BSLD_TAU) -> WindowSummary:
    """summarize_window over measurement_window(rows, warmup)."""
    if not rows:
        return summarize_window(rows, total_nodes, 0.0, 0.0, tau)
    w0, w1 = measurement_window(rows, warmup)
    return summarize_window(rows, total_nodes, w0, w1, tau)


def spread(values: list[float]) -> tuple[float, float, float]:
    """(mean, median, interquartile range) over seeds, as the seed papers report."""
    if not values:
        return 0.0, 0.0, 0.0
    if len(values) == 1:
        return values[0], values[0], 0.0
    q = statistics.quantiles(values, n=4, method="inclusive")
    return statistics.fmean(values), statistics.median(values), q[2] - q[0]


class StepIntegral:
    """The integral over time of a step function given as (time, +/- change) points: how many
    node-seconds something held over any interval, in O(log n) per question (the "why worse"
    lines ask it once per job that lost)."""

    def __init__(self, changes: list[tuple[float, float]]) -> None:
        self.times: list[float] = []
        self.levels: list[float] = []
        self.areas: list[float] = []  # integral from the first time to times[i]
        level = area = 0.0
        last: float | None = None
        for t, d in sorted(changes):
            if last is not None:
                area += level * (t - last)
            if self.times and self.times[-1] == t:
                level += d
                self.levels[-1] = level
                continue
            level += d
            self.times.append(t)
            self.levels.append(level)
            self.areas.append(area)
            last = t

    def _area_to(self, t: float) -> float:
        i = bisect.bisect_right(self.times, t) - 1
        if i < 0:
            return 0.0
        return self.areas[i] + self.levels[i] * (t - self.times[i])

    def over(self, t0: float, t1: float) -> float:
        return self._area_to(t1) - self._area_to(t0) if t1 > t0 else 0.0
