"""The three-step skeleton shared by the seed's Malleable (minAgree) and by Min, Avg, Pref
and KeepPref, which differ only in the rules plugged into it:

1. Start waiting jobs with EASY backfilling, malleable ones on the strategy's start size.
2. If jobs still wait and idle nodes are too few, shrink running malleable jobs, highest
   priority first, so that waiting jobs (in queue order) can start.
3. Give the remaining idle nodes to running malleable jobs, lowest priority first.

Resizes are asynchronous (an order is answered, processes end, then nodes are free), so
step 2 counts nodes already promised back and does not shrink again for them, and step 3
gives nothing away while a waiting job is owed nodes. A job is not resized again within
`min_resize_interval` seconds of its last resize, so it is not flapped.

Nodes move either one at a time, re-ranking after each (balanced: minAgree, Avg), or as
many as a job can give or take before the next is touched (fewest jobs: Min, Pref,
KeepPref). Both run on a heap, so a pass costs O(queue + moved nodes * log jobs).
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from dataclasses import dataclass

from elastic_protocol.jobspec import JobKind

from elasticd.policies.base import (
    Decision,
    Grow,
    PendingView,
    RunningView,
    Shrink,
    Snapshot,
    grant_requests,
)
from elasticd.policies.easy import Sizer, easy_pass

# (current size, job) -> priority: shrunk from the highest, grown from the lowest.
Priority = Callable[[int, RunningView], float]


@dataclass(frozen=True)
class Strategy:
    size: Sizer  # step 1: nodes to start a job with on the usable nodes, or None
    need: Callable[[PendingView], int]  # fewest nodes a waiting job can start on
    priority: Priority
    floor: Callable[[RunningView], int]  # step 2 never shrinks a job below this
    balanced: bool  # move nodes one at a time (else: fewest jobs)


def resizable(r: RunningView, now: float, interval: float) -> bool:
    """A running malleable job an order can be sent to now, not resized too recently."""
    return (
        r.kind is JobKind.MALLEABLE
        and r.malleable_ready
        and not r.resizing
        and not r.ending
        and (r.last_resize is None or now - r.last_resize >= interval)
    )


def three_step(snap: Snapshot, s: Strategy, interval: float) -> list[Decision]:
    res = easy_pass(snap, s.size, s.need)
    decisions: list[Decision] = list(res.starts)
    free = res.free
    now = snap.now

    # Step 2: shrink for waiting jobs, in queue order.
    donors = {r.job_id: r for r in snap.running if resizable(r, now, interval) and r.size > s.floor(r)}
    size = {jid: r.size for jid, r in donors.items()}
    shrinkable = sum(size[j] - s.floor(donors[j]) for j in donors)
    heap = [(-s.priority(size[j], r), j) for j, r in donors.items()]
    heapq.heapify(heap)
    # Idle nodes plus those already on their way back (shrinks and ends in flight).
    avail = free + snap.incoming_nodes
    shrinks: dict[int, int] = {}
    owed = False
    for job in res.waiting:
        need = s.need(job)
        if need <= avail:
            owed = True  # nodes idle or coming back will start it: take nothing more
            avail -= need
            continue
        lack = need - avail
        if lack > shrinkable:
            if avail == 0 and shrinkable == 0:
                break
            continue  # cannot be made to fit now; a later, smaller job might
        owed = True
        avail = 0
        shrinkable -= lack
        _take(heap, donors, size, shrinks, lack, s)
    decisions.extend(Shrink(j, n) for j, n in sorted(shrinks.items()))

    # Step 3: idle nodes to running malleable jobs, unless a waiting job is owed them.
    if not owed and free > 0:
        grants = grant_requests(snap, free)
        decisions.extend(grants)
        free -= sum(g.by for g in grants)  # type: ignore[union-attr]
        takers = {
            r.job_id: r
            for r in snap.running
            if resizable(r, now, interval) and r.size < r.max_nodes and r.job_id not in shrinks
        }
        decisions.extend(Grow(j, n) for j, n in sorted(_give(takers, free, s).items()))
    return decisions


def _take(
    heap: list[tuple[float, int]],
    donors: dict[int, RunningView],
    size: dict[int, int],
    shrinks: dict[int, int],
    lack: int,
    s: Strategy,
) -> None:
    """Take `lack` nodes from donors, highest priority first (ties: lower job id)."""
    while lack > 0:
        _, j = heapq.heappop(heap)
        r = donors[j]
        n = 1 if s.balanced else min(lack, size[j] - s.floor(r))
        size[j] -= n
        shrinks[j] = shrinks.get(j, 0) + n
        lack -= n
        if size[j] > s.floor(r):
            heapq.heappush(heap, (-s.priority(size[j], r), j))


def _give(takers: dict[int, RunningView], free: int, s: Strategy) -> dict[int, int]:
    """Give `free` nodes to takers, lowest priority first (ties: lower job id)."""
    size = {j: r.size for j, r in takers.items()}
    heap = [(s.priority(size[j], r), j) for j, r in takers.items()]
    heapq.heapify(heap)
    grows: dict[int, int] = {}
    while free > 0 and heap:
        _, j = heapq.heappop(heap)
        r = takers[j]
        n = 1 if s.balanced else min(free, r.max_nodes - size[j])
        size[j] += n
        grows[j] = grows.get(j, 0) + n
        free -= n
        if size[j] < r.max_nodes:
            heapq.heappush(heap, (s.priority(size[j], r), j))
    return grows
