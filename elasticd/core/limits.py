"""Time limits: the core's rule, in both clocks.

A job's `time_limit` is wall time at its preferred size. A job without a performance model
gets exactly that from its start, as Slurm gives it. A job with a model (`model = { speedup
= ... }`) runs on other sizes too, so its limit scales with the model: on n nodes it is
consumed at S(n) / S(preferred) reference seconds per second, and every resize adds the
model's reconfiguration cost, during which the job makes no progress, to the time it may
run — the scheduler imposed the resize, the job does not pay for it. At constant size n the
limit is therefore time_limit x T(n) / T(preferred): the user's margin kept at every size,
and the arithmetic is the one WorkProgress (the simulator, the synthetic application)
advances by, so a job whose work fits its limit at one size fits it at every size.
"""

from __future__ import annotations

from elasticd.core.job import Job


def _rate(job: Job, n: int) -> float:
    if n == job.limit_pref or n <= 0:
        return 1.0  # S(n) / S(n), exactly 1.0 whatever the model; the model not even parsed
    s = job.limit_speedup
    if s is None:
        return 1.0
    return s.speedup(n) / job.limit_pref_speedup


def start_limit(job: Job, now: float) -> float | None:
    """The job started now on its hosts: when its limit falls."""
    limit = job.time_limit
    if limit is None:
        job.limit_due = None
        return None
    job.limit_used = 0.0
    job.limit_since = now
    job.limit_due = now + limit / _rate(job, job.size)
    return job.limit_due


def resize_limit(job: Job, old: int, new: int, now: float) -> float | None:
    """The job went from `old` to `new` nodes now: when its limit falls from here on (None
    when it does not move: no limit, or no model to scale it by)."""
    limit = job.time_limit
    cost = job.limit_cost
    since = job.limit_since
    if limit is None or cost is None or since is None or old == new:
        return None
    # max(0.0, x) and max(now, since) written out: a dozen resizes per job under some policies.
    d = now - since
    job.limit_used = used = job.limit_used + (d if d > 0.0 else 0.0) * _rate(job, old)  # noqa: FURB136
    job.limit_since = since = (since if since > now else now) + cost.seconds(old, new)  # noqa: FURB136
    left = limit - used
    job.limit_due = due = since + (left if left > 0.0 else 0.0) / _rate(job, new)  # noqa: FURB136
    return due
