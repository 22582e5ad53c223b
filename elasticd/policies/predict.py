"""What the model-driven policies (MEBF, SD-Policy) predict about a job, using the one
implementation of the models in `elastic_protocol.models` (speedup, reconfiguration cost,
WorkProgress), so a policy predicts by the same arithmetic the synthetic application and
the simulator follow.

A job's work is `model.work` (seconds on one node) when given. Otherwise it is derived
from the time limit read as the run time on the job's *preferred* size: the size a user
would ask a rigid scheduler for, and the size a trace's logged run time belongs to in both
seeds' conversions (MEBF: preferred = logged size). A job with neither has no prediction,
and the policies leave it alone. A job without a model is taken to scale linearly.

A running job's progress is replayed from its size history (every size it had, from its
start), each change pausing it for the reconfiguration cost, exactly as WorkProgress
advances a real or simulated job.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Literal

from elastic_protocol.jobspec import PerfModel
from elastic_protocol.models import ReconfigCost, SpeedupModel, WorkProgress, parse_speedup
from elasticd.policies.base import PendingView, RunningView


@lru_cache(maxsize=512)
def _speedup(text: str) -> SpeedupModel:
    return parse_speedup(text)


@lru_cache(maxsize=512)
def _cost(alpha: float, beta: float, b: float) -> ReconfigCost:
    return ReconfigCost(alpha, beta, b)


def model_parts(model: PerfModel | None) -> tuple[SpeedupModel, ReconfigCost]:
    if model is None:
        return _speedup("linear"), _cost(0.0, 0.0, 0.0)
    return _speedup(model.speedup), _cost(model.alpha, model.beta, model.b)


def work_of(model: PerfModel | None, time_limit: float | None, preferred: int, s: SpeedupModel) -> float | None:
    if model is not None and model.work is not None:
        return model.work
    if time_limit is None:
        return None
    return time_limit * s.speedup(preferred)


def efficiency(model: PerfModel | None, n: int) -> float:
    """S(n) / n: how much of each added node the job turns into speed; 1 is linear."""
    s, _ = model_parts(model)
    return s.speedup(n) / n if n > 0 else 1.0


class PendingPrediction:
    """How long a queued job runs on n nodes."""

    __slots__ = ("speedup", "work")

    def __init__(self, job: PendingView) -> None:
        self.speedup, _ = model_parts(job.model)
        self.work = work_of(job.model, job.time_limit, job.preferred, self.speedup)

    def runtime(self, n: int) -> float | None:
        return None if self.work is None else self.work / self.speedup.speedup(n)


def resize_cost(job: RunningView, n_new: int) -> float:
    """Seconds of no progress resizing the job from its size to n_new would cost it, by its
    model's reconfiguration cost (MEBF's T_dr + T_p: elastic_protocol.models.ReconfigCost), the
    very seconds the simulator and the synthetic application then charge it: a policy sees what
    a resize costs before it orders it. 0 for a job without a model."""
    return model_parts(job.model)[1].seconds(job.size, n_new)


def replay(job: RunningView) -> WorkProgress | None:
    """The job's progress as of its last size change, by its history (None: no work known)."""
    s, cost = model_parts(job.model)
    work = work_of(job.model, job.time_limit, job.preferred, s)
    if work is None:
        return None
    history = job.history or ((job.start_time, job.size),)
    p = WorkProgress(work, s, cost, history[0][1], history[0][0])
    for t, n in history[1:]:
        if n != p.size:
            p.resize(n, t)
    return p


def end_at(progress: WorkProgress, now: float) -> float:
    """`progress.clone().end_time(now)`, without the copy: SD-Policy ranks every running job
    that could lend by its predicted end on each pass. The very arithmetic of
    WorkProgress.advance and end_time, step for step, so the floats are the same to the last
    bit (a test holds the two equal)."""
    s = progress.model.speedup(progress.size)
    remaining = progress.remaining
    start = max(progress.last, progress.frozen_until)
    if now > start:
        remaining -= s * (now - start)
    if remaining <= 0:
        return now
    return max(now, progress.frozen_until) + remaining / s


class RunningPrediction:
    """A running job's progress at `now`, and its end under what-if resizes from there."""

    __slots__ = ("cost", "end", "job", "now", "progress", "speedup", "start_size", "work")

    def __init__(self, job: RunningView, now: float, replayed: WorkProgress | Literal[False] | None = False) -> None:
        """`replayed`: the job's `replay()` if already known (False: replay it here)."""
        self.job = job
        self.now = now
        self.speedup, self.cost = model_parts(job.model)
        self.work = work_of(job.model, job.time_limit, job.preferred, self.speedup)
        self.start_size = job.history[0][1] if job.history else job.size
        base = replay(job) if replayed is False else replayed
        self.progress: WorkProgress | None = None
        self.end: float | None = None
        if base is None:
            return
        self.progress = base.clone()
        self.end = self.progress.end_time(now)

    def at(self, now: float, replayed: WorkProgress | None) -> RunningPrediction:
        """The same job's prediction at another time (its history unchanged): what does
        not depend on the time is taken over, not recomputed."""
        p = RunningPrediction.__new__(RunningPrediction)
        p.job, p.now, p.speedup, p.cost = self.job, now, self.speedup, self.cost
        p.work, p.start_size = self.work, self.start_size
        p.progress = p.end = None
        if replayed is not None:
            p.progress = replayed.clone()
            p.end = p.progress.end_time(now)
        return p

    @property
    def known(self) -> bool:
        return self.progress is not None

    def initial_runtime(self) -> float:
        """The run time predicted when the job started, on the nodes it started with."""
        assert self.work is not None
        return self.work / self.speedup.speedup(self.start_size)

    def end_if_resized(self, n_new: int) -> float:
        """Predicted end if the job changes to n_new nodes now (paying the cost)."""
        assert self.progress is not None
        q = self.progress.clone()
        q.resize(n_new, self.now)
        return q.end_time(self.now)

    def reconfig_seconds(self, n_new: int) -> float:
        """What resizing to n_new nodes now costs the job (resize_cost)."""
        return self.cost.seconds(self.job.size, n_new)

    def stretch_if_resized(self, n_new: int) -> float | None:
        """The job's predicted run, if resized to n_new nodes now (paying the cost), over its
        predicted static run (its work on its preferred size, unresized): the stretch the
        tables report (elasticd.metrics), as the policy can foresee it. None: work unknown."""
        if self.progress is None or self.work is None:
            return None
        static = self.work / self.speedup.speedup(self.job.preferred)
        return (self.end_if_resized(n_new) - self.job.start_time) / static

    def end_if_lent(self, k: int, until: float) -> float:
        """Predicted end if the job gives k nodes away now and gets them back at `until`
        (SD-Policy's mates); if it would finish first, when it finishes."""
        assert self.progress is not None
        q = self.progress.clone()
        q.resize(self.job.size - k, self.now)
        end = q.end_time(self.now)
        if end <= until:
            return end
        q.resize(self.job.size, until)
        return q.end_time(until)


class Predictions:
    """Running jobs' predictions for a pass, each job's history replayed once per view.

    The core hands a policy the same view object for a job until the job changes, so a
    policy keeping one of these between passes replays a job again only after it changed.
    Pure memoisation: the predictions are exactly those computed afresh.
    """

    def __init__(self) -> None:
        # id(view) -> (view, its replay, its latest prediction)
        self._replayed: dict[int, tuple[RunningView, WorkProgress | None, RunningPrediction]] = {}

    def new_pass(self, running: tuple[RunningView, ...]) -> None:
        """Forget jobs (or views) no longer in the snapshot once they outnumber the ones in
        it, so memory stays bounded at O(running) without a sweep on every pass. (A kept
        entry holds its view, so its id cannot be taken by another view meanwhile.)"""
        old = self._replayed
        if len(old) > 2 * len(running) + 64:
            self._replayed = {id(r): old[id(r)] for r in running if id(r) in old and old[id(r)][0] is r}

    def get(self, job: RunningView, now: float) -> RunningPrediction:
        hit = self._replayed.get(id(job))
        if hit is None or hit[0] is not job:
            replayed = replay(job)
            p = RunningPrediction(job, now, replayed)
        elif hit[2].now == now:
            return hit[2]
        else:
            replayed = hit[1]
            p = hit[2].at(now, replayed)
        self._replayed[id(job)] = (job, replayed, p)
        return p
