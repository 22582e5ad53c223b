"""EASY backfilling: FCFS with a reservation for the head job only.

When the head cannot start, its reservation ("shadow time") is the earliest time enough
nodes are free, counting running jobs as ending at start + time limit and nodes already
promised back (jobs being ended, shrinks and releases in flight) as back now. A later job may
start now only if it does not delay that reservation: it ends by the shadow time, or it
fits in the nodes the head will not need at the shadow time ("extra" nodes).

The pass is also the first step of every malleable policy built on EASY (the seed's
Malleable, Min/Avg/Pref/KeepPref, MEBF), which differ only in how many nodes a job is
started with: `easy_pass` takes that rule as a function.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from elasticd.policies.base import (
    Decision,
    PendingView,
    RunningView,
    Snapshot,
    Start,
    grant_requests,
    limit_at,
    start_nodes_of,
    start_size,
)

# (job, usable nodes) -> nodes to start it with, or None if it cannot start on them.
Sizer = Callable[[PendingView, int], "int | None"]


def shadow_time(
    now: float, available: int, need: int, running: tuple[RunningView, ...]
) -> tuple[float, int]:
    """(time the head can start, nodes spare at that time beyond the head's need).

    `available`: idle nodes plus every node already promised back (a job being ended, a
    shrink or a release in flight: `Snapshot.incoming_nodes`), which are back in seconds
    whatever the limits say. The other nodes come back at their jobs' limits; every job
    ending at the shadow time counts toward the spare nodes.
    """
    if available >= need:
        return now, available - need
    avail = available
    inf = math.inf
    # (end, nodes coming back); jobs past their end count as ending now, all together.
    ordered = sorted(
        [
            (r.estimated_end, r.size - r.shrinking)
            for r in running
            if not r.ending
        ]
    )
    i, n = 0, len(ordered)
    while i < n:
        t = ordered[i][0]
        t = max(t, now)
        while i < n and ordered[i][0] <= t:
            avail += ordered[i][1]
            i += 1
        if avail >= need:
            return t, avail - need
    return inf, 0


@dataclass
class EasyResult:
    starts: list[Start]
    free: int  # idle nodes left after the starts
    extra: int  # of those, how many the blocked head does not need at its reservation
    waiting: list[PendingView]  # not started, in queue order
    backfilled: int = 0  # jobs started past the blocked head


def easy_pass(
    snap: Snapshot,
    size: Sizer = start_size,
    need: Callable[[PendingView], int] = start_nodes_of,
) -> EasyResult:
    """Start jobs as EASY does, sizing each with `size`; `need(job)` is the fewest nodes a
    job can start on (its reservation is made for that many)."""
    free = snap.free_nodes
    pending = snap.pending
    starts: list[Start] = []
    started: list[RunningView] = []
    i = 0
    # Start from the head while jobs fit, exactly as FCFS.
    while i < len(pending):
        n = size(pending[i], free)
        if n is None:
            break
        job = pending[i]
        starts.append(Start(job.job_id, n))
        started.append(_as_running(job, n, snap.now))
        free -= n
        i += 1
    if i == len(pending):
        return EasyResult(starts, free, free, [])
    head = pending[i]
    waiting = [head]
    rest = pending[i + 1 :]
    if free <= 0:  # nothing else can start, and no node is spare: the reservation is moot
        waiting.extend(rest)
        return EasyResult(starts, free, 0, waiting, len(starts) - i)
    shadow, extra = shadow_time(snap.now, free + snap.incoming_nodes, need(head), snap.running + tuple(started))
    now = snap.now
    for k, job in enumerate(rest):
        if free <= 0:
            waiting.extend(rest[k:])  # nothing further can start
            break
        if free < need(job):
            waiting.append(job)
            continue
        n = size(job, free)
        limit = None if n is None else limit_at(job, n)
        ends_in_time = limit is not None and now + limit <= shadow
        if not ends_in_time:
            n = size(job, min(free, extra))
        if n is None:
            waiting.append(job)
            continue
        starts.append(Start(job.job_id, n))
        free -= n
        if not ends_in_time:
            extra -= n
    return EasyResult(starts, free, min(free, extra), waiting, len(starts) - i)


class EasyBackfill:
    name = "easy"

    def decide(self, snap: Snapshot) -> list[Decision]:
        r = easy_pass(snap)
        return [*r.starts, *grant_requests(snap, r.extra)]


def _as_running(job: PendingView, n: int, now: float) -> RunningView:
    return RunningView(
        job_id=job.job_id,
        kind=job.kind,
        size=n,
        min_nodes=job.min_nodes,
        max_nodes=job.max_nodes,
        preferred=job.preferred,
        start_time=now,
        time_limit=job.time_limit,
        malleable_ready=False,
        last_resize=None,
        ending=False,
        limit_end=None if (limit := limit_at(job, n)) is None else now + limit,
    )
