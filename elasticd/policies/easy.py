"""EASY backfilling: FCFS with a reservation for the head job only.

When the head cannot start, its reservation ("shadow time") is the earliest time enough
nodes are free, counting running jobs as ending at start + time limit. A later job may
start now only if it does not delay that reservation: it ends by the shadow time, or it
fits in the nodes the head will not need at the shadow time ("extra" nodes).
"""

from __future__ import annotations

import math

from elasticd.policies.base import (
    Decision,
    RunningView,
    Snapshot,
    Start,
    grant_requests,
    start_size,
)


def shadow_time(
    now: float, free: int, need: int, running: tuple[RunningView, ...]
) -> tuple[float, int]:
    """(time the head can start, nodes spare at that time beyond the head's need).

    A job already being ended gives its nodes back now, whatever its limit says; every job
    ending at the shadow time counts toward the spare nodes.
    """
    if free >= need:
        return now, free - need

    def end(r: RunningView) -> float:
        return now if r.ending else max(now, r.estimated_end)

    avail = free
    ordered = sorted(running, key=lambda r: (end(r), r.job_id))
    i = 0
    while i < len(ordered):
        t = end(ordered[i])
        while i < len(ordered) and end(ordered[i]) == t:
            avail += ordered[i].size
            i += 1
        if avail >= need:
            return t, avail - need
    return math.inf, 0


class EasyBackfill:
    name = "easy"

    def decide(self, snap: Snapshot) -> list[Decision]:
        free = snap.free_nodes
        out: list[Decision] = []
        queue = list(snap.pending)
        started: list[RunningView] = []
        # Start from the head while jobs fit, exactly as FCFS.
        while queue:
            n = start_size(queue[0], free)
            if n is None:
                break
            head = queue.pop(0)
            out.append(Start(head.job_id, n))
            started.append(_as_running(head, n, snap.now))
            free -= n
        if not queue:
            return out + grant_requests(snap, free)
        head, rest = queue[0], queue[1:]
        shadow, extra = shadow_time(snap.now, free, head.min_nodes, snap.running + tuple(started))
        for job in rest:
            if free < job.min_nodes:
                continue
            ends_in_time = (
                job.time_limit is not None and snap.now + job.time_limit <= shadow
            )
            if ends_in_time:
                n = start_size(job, free)
            else:
                n = start_size(job, min(free, extra))
            if n is None:
                continue
            out.append(Start(job.job_id, n))
            free -= n
            if not ends_in_time:
                extra -= n
        return out + grant_requests(snap, min(free, extra))


def _as_running(job, n: int, now: float) -> RunningView:
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
    )
