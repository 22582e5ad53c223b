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

import bisect
import math
from collections.abc import Callable
from operator import attrgetter

from elastic_protocol.jobspec import JobKind
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

# The kinds start_size starts on their start_nodes whatever is free.
_AT_NEED = (JobKind.RIGID, JobKind.EVOLVING)

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
    return _reservation(now, available, need, _ends(running))


def _reservation(now: float, avail: int, need: int, coming: list[tuple[float, int]]) -> tuple[float, int]:
    """shadow_time's walk over (end, nodes coming back) pairs, in any order (sorted here);
    jobs past their end count as ending now, all together."""
    coming.sort()
    i, n = 0, len(coming)
    while i < n:
        t = coming[i][0]
        t = max(t, now)
        while i < n and coming[i][0] <= t:
            avail += coming[i][1]
            i += 1
        if avail >= need:
            return t, avail - need
    return math.inf, 0


class EasyResult:
    """What an EASY pass started and what it left. The blocked head's reservation (and so
    `extra`) is computed only when something needs it: a later job that fits in the idle
    nodes, or a caller reading `extra`; `waiting` is listed only when read."""

    __slots__ = ("_ends", "_extra", "_head", "_pending", "_reservation", "_skip", "backfilled", "free", "starts")

    def __init__(self, starts: list[Start], free: int, extra: int | None, pending: tuple[PendingView, ...] = (),
                 head: int = 0, skip: list[int] | None = None) -> None:
        self.starts = starts
        self.free = free  # idle nodes left after the starts
        self._extra = extra
        # The queue the pass saw, where its blocked head is, and the later jobs it started.
        self._pending = pending
        self._head = head
        self._skip = skip
        self.backfilled = 0 if skip is None else len(skip)  # jobs started past the blocked head
        self._reservation: tuple[float, int, int, tuple[RunningView, ...], list[tuple[float, int]]] | None = None
        # (every (end, nodes) the reservation was worked out over, sorted; those of the jobs
        # started here), if the pass worked it out over the running jobs.
        self._ends: tuple[list[tuple[float, int]], list[tuple[float, int]]] | None = None

    @property
    def extra(self) -> int:
        """Of the idle nodes left, how many the blocked head does not need at its reservation."""
        if self._extra is None:
            assert self._reservation is not None
            self._extra = min(self.free, shadow_of(*self._reservation)[1])
        return self._extra

    @property
    def waiting(self) -> list[PendingView]:
        """The jobs not started, in queue order."""
        return self.first_waiting(len(self._pending))

    def started(self) -> list[PendingView]:
        """The jobs started, in the order of `starts` (a caller sizing jobs its own way
        reads them here instead of recording them in its sizer, which EASY calls for every
        job that fits)."""
        head = list(self._pending[: self._head])
        if self._skip:
            pending = self._pending
            head.extend(pending[k] for k in self._skip)
        return head

    def running_ends(self) -> list[tuple[float, int]] | None:
        """(end, nodes coming back) of the running jobs not being ended, sorted, if the pass
        sorted them for the head's reservation (None if it did not): a caller working out
        reservations of its own need not sort them again."""
        if self._ends is None:
            return None
        ends, started = self._ends
        out = list(ends)
        for pair in started:  # the jobs started here were sorted in with them: taken out
            k = bisect.bisect_left(out, pair)
            if k == len(out) or out[k] != pair:
                return None  # (a NaN limit does not sort)
            del out[k]
        return out

    def first_waiting(self, count: int) -> list[PendingView]:
        """The first `count` jobs not started, in queue order (a policy that looks only so
        deep into a queue of 100,000 need not list it all)."""
        pending, skip, head = self._pending, self._skip, self._head
        if not skip:
            return list(pending[head : head + count])
        # The runs between the started jobs (skip is in queue order), as slices.
        out: list[PendingView] = []
        k = head
        for s in skip:
            out.extend(pending[k : min(s, k + count - len(out))])
            if len(out) == count:
                return out
            k = s + 1
        out.extend(pending[k : k + count - len(out)])
        return out


def easy_pass(
    snap: Snapshot,
    size: Sizer = start_size,
    need: Callable[[PendingView], int] = start_nodes_of,
) -> EasyResult:
    """Start jobs as EASY does, sizing each with `size`; `need(job)` is the fewest nodes a
    job can start on (its reservation is made for that many)."""
    starts, free, extra, head, skip, reservation, ends = _easy(snap, size, need)
    res = EasyResult(starts, free, extra, snap.pending, head, skip)
    if reservation is not None:
        res._reservation = reservation
    elif ends is not None:
        res._ends = ends
    return res


# What an EASY pass leaves, as EasyResult takes it: starts, idle nodes left, extra (None: to
# be worked out from the reservation's arguments), the blocked head's place, the later jobs
# started, the reservation's arguments, the (end, nodes) it was worked out over.
_Pass = tuple[
    list[Start], int, "int | None", int, "list[int] | None",
    "tuple[float, int, int, tuple[RunningView, ...], list[tuple[float, int]]] | None",
    "tuple[list[tuple[float, int]], list[tuple[float, int]]] | None",
]


def _easy(snap: Snapshot, size: Sizer, need: Callable[[PendingView], int]) -> _Pass:
    """easy_pass's work, its result as a tuple: EASY itself reads only the starts (on most
    passes), and an EasyResult is ten attributes to set on every pass."""
    free = snap.free_nodes
    pending = snap.pending
    now = snap.now
    inf = math.inf
    starts: list[Start] = []
    # (when its limit falls, nodes) of each job started here, for the head's reservation.
    started: list[tuple[float, int]] = []
    i, count = 0, len(pending)
    # Sized by start_size, each needing its start_nodes: the loops below read and size each
    # job as these would, without their calls (a queue is often hundreds deep, and most of
    # it is looked at on every pass).
    plain = size is start_size and need is start_nodes_of
    # Start from the head while jobs fit, exactly as FCFS.
    while i < count:
        job = pending[i]
        if plain:
            first = job.start_nodes
            if free < first:
                break
            n = first if job.kind in _AT_NEED else min(job.max_nodes, free)
            limit = job.time_limit
            if limit is not None and n != job.preferred and job.model is not None:
                limit = limit_at(job, n)
        else:
            sized = size(job, free)
            if sized is None:
                break
            n = sized
            limit = limit_at(job, n)
        starts.append(Start(job.job_id, n))
        started.append((inf if limit is None else now + limit, n))
        free -= n
        i += 1
    if i == count:
        return starts, free, free, i, None, None, None
    if free <= 0:  # nothing else can start, and no node is spare: the reservation is moot
        return starts, free, 0, i, None, None, None
    available = free + snap.incoming_nodes
    head_need = need(pending[i])
    running = snap.running
    skip: list[int] = []
    ends: list[tuple[float, int]] | None = None
    shadow = -inf
    extra = 0
    known = False
    for k in range(i + 1, count):
        if free <= 0:
            break  # nothing further can start
        job = pending[k]
        first = job.start_nodes if plain else need(job)  # need(job), read without a call
        if free < first:
            continue
        if not known:  # the head's reservation, when a later job first could use it
            if available >= head_need:
                shadow, extra = now, available - head_need
            else:  # shadow_of, keeping the (end, nodes) it sorts for the caller
                ends = _ends(running)
                ends.extend(started)
                shadow, extra = _reservation(now, available, head_need, ends)
            known = True
        if plain:
            # start_size and limit_at spelled out (the same sizes and limits, without their
            # calls): most of the jobs that fit cannot start, one by one on every pass.
            # `first` is the job's start_nodes, at most `free`.
            if job.kind in _AT_NEED:
                n = first
                limit = job.time_limit
                if limit is not None and n != job.preferred and job.model is not None:
                    limit = limit_at(job, n)
                ends_in_time = limit is not None and now + limit <= shadow
                if not ends_in_time and extra < first:
                    continue  # neither in time nor in the spare nodes
            else:
                n = min(job.max_nodes, free)
                limit = job.time_limit
                if limit is not None and n != job.preferred and job.model is not None:
                    limit = limit_at(job, n)
                ends_in_time = limit is not None and now + limit <= shadow
                if not ends_in_time:
                    room = min(free, extra)
                    if room < first:
                        continue
                    n = min(job.max_nodes, room)
        else:
            sized = size(job, free)
            limit = None if sized is None else limit_at(job, sized)
            ends_in_time = limit is not None and now + limit <= shadow
            if not ends_in_time:
                sized = size(job, min(free, extra))
            if sized is None:
                continue
            n = sized
        starts.append(Start(job.job_id, n))
        skip.append(k)
        free -= n
        if not ends_in_time:
            extra -= n
    if not known:
        return starts, free, None, i, skip, (now, available, head_need, running, started), None
    return starts, free, min(free, extra), i, skip, None, None if ends is None else (ends, started)


def _ends(running: tuple[RunningView, ...]) -> list[tuple[float, int]]:
    """(end, nodes coming back) of the running jobs not being ended, unsorted. Their end is
    RunningView.estimated_end, read from limit_end without the property's call where the
    core set it (every job it runs), as this is worked out on most passes."""
    return [(e if (e := r.limit_end) is not None else r.estimated_end, r.size - r.shrinking)
            for r in running if not r.ending]


def shadow_of(now: float, available: int, need: int, running: tuple[RunningView, ...],
              started: list[tuple[float, int]]) -> tuple[float, int]:
    """shadow_time over the running jobs and the (end, nodes) of the jobs just started."""
    if available >= need:
        return now, available - need
    coming = _ends(running)
    coming.extend(started)
    return _reservation(now, available, need, coming)


_requested = attrgetter("requested")  # looked up for every running job on every pass: at C speed


class EasyBackfill:
    name = "easy"
    stateless = True  # see Policy

    def decide(self, snap: Snapshot) -> list[Decision]:
        if not any(map(_requested, snap.running)):
            # No evolving job asks for nodes: no use for the spare, only the starts are read.
            out: list[Decision] = list(_easy(snap, start_size, start_nodes_of)[0])
            return out
        r = easy_pass(snap)
        return [*r.starts, *grant_requests(snap, r.extra)]

