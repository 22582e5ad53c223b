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
KeepPref). Both run on a heap; balanced moves go in stretches (a job keeps its rank for
a number of nodes found by bisection), so a pass costs O(queue + jobs touched * log
nodes), not one heap operation per node.
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
    # Built when first needed: most passes neither shrink nor grow anything.
    ready: list[RunningView] | None = None

    # Step 2: shrink for waiting jobs, in queue order.
    donors: dict[int, RunningView] | None = None
    size: dict[int, int] = {}
    heap: list[tuple[float, int]] = []
    shrinkable = 0
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
        if donors is None:
            ready = [r for r in snap.running if resizable(r, now, interval)]
            floor = s.floor
            donors = {r.job_id: r for r in ready if r.size > floor(r)}
            size = {jid: r.size for jid, r in donors.items()}
            shrinkable = sum(r.size - floor(r) for r in donors.values())
            heap = [(-s.priority(r.size, r), j) for j, r in donors.items()]
            heapq.heapify(heap)
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
        free -= sum(g.by for g in grants)
        if ready is None:
            ready = [r for r in snap.running if resizable(r, now, interval)]
        takers = {r.job_id: r for r in ready if r.size < r.max_nodes and r.job_id not in shrinks}
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
    priority, floor = s.priority, s.floor
    while lack > 0:
        _, j = heapq.heappop(heap)
        r = donors[j]
        sz = size[j]
        n = min(lack, sz - floor(r))
        if s.balanced and n > 1 and heap:
            # One node at a time, re-ranking after each: j gives until another job ranks higher.
            top = heap[0]
            n = 1 if (-priority(sz - 1, r), j) > top else 1 + _lead(lambda m: (-priority(sz - m, r), j) < top, n - 1)  # noqa: B023 - called at once, in this iteration
        size[j] = sz = sz - n
        shrinks[j] = shrinks.get(j, 0) + n
        lack -= n
        if sz > floor(r):
            heapq.heappush(heap, (-priority(sz, r), j))


def _give(takers: dict[int, RunningView], free: int, s: Strategy) -> dict[int, int]:
    """Give `free` nodes to takers, lowest priority first (ties: lower job id)."""
    priority = s.priority
    size = {j: r.size for j, r in takers.items()}
    grows: dict[int, int] = {}
    if s.balanced and len(takers) > 1:
        # Most of the nodes in one step: every node the one-at-a-time rounds give below a
        # priority level, which the heap then continues from.
        for j, n in _below_level(takers, free, priority).items():
            size[j] += n
            grows[j] = n
            free -= n
    heap = [(priority(size[j], r), j) for j, r in takers.items() if size[j] < r.max_nodes]
    heapq.heapify(heap)
    while free > 0 and heap:
        _, j = heapq.heappop(heap)
        r = takers[j]
        sz = size[j]
        n = min(free, r.max_nodes - sz)
        if s.balanced and n > 1 and heap:
            # One node at a time, re-ranking after each: j takes until another job ranks lower.
            top = heap[0]
            n = 1 if (priority(sz + 1, r), j) > top else 1 + _lead(lambda m: (priority(sz + m, r), j) < top, n - 1)  # noqa: B023 - called at once, in this iteration
        size[j] = sz = sz + n
        grows[j] = grows.get(j, 0) + n
        free -= n
        if sz < r.max_nodes:
            heapq.heappush(heap, (priority(sz, r), j))
    return grows


def _below_level(takers: dict[int, RunningView], free: int, priority: Priority) -> dict[int, int]:
    """Nodes per job that one-at-a-time giving (lowest priority first) hands out before any
    job's priority reaches some level, the level chosen so that at most `free` are.

    Giving one node at a time to the lowest (priority, job id) takes each job's priorities
    at sizes size, size+1, ... in increasing order across all jobs (priorities grow with
    size), so everything below a level comes first, whatever the level. The level is
    estimated by taking each job's priority as linear in its size (it is, for every
    strategy here); the counts below it are then exact (bisection on the real priority),
    and an estimate that would hand out too many is not used. Too few is harmless: the
    heap hands out the rest in the same order."""
    jobs = []
    for j, r in takers.items():
        cap = r.max_nodes - r.size
        p0 = priority(r.size, r)
        step = priority(r.size + 1, r) - p0
        if step <= 0:
            return {}
        jobs.append((j, r, cap, p0, step))
    if sum(x[2] for x in jobs) <= free:
        return {j: cap for j, _, cap, _, _ in jobs}  # every job gets all it can take
    # The level where the linear counts add up to `free`, without the jobs that take all
    # they can below it, nor those already above it.
    active = jobs
    budget = float(free)
    while True:
        level = (budget + sum(p0 / step for _, _, _, p0, step in active)) / sum(1 / step for *_, step in active)
        full = [x for x in active if (level - x[3]) / x[4] >= x[2]]
        above = [x for x in active if x[3] >= level]
        if not full and not above:
            break
        budget -= sum(x[2] for x in full)
        active = [x for x in active if x not in full and x not in above]
        if budget <= 0 or not active:
            return {}
    level -= max(step for *_, step in jobs)  # below the estimate, so as not to overshoot
    counts: dict[int, int] = {}
    for j, r, cap, p0, _ in jobs:
        if p0 < level:
            size = r.size
            counts[j] = 1 + _lead(lambda m: priority(size + m, r) < level, cap - 1)  # noqa: B023 - called at once, in this iteration
    return counts if sum(counts.values()) <= free else {}


def _lead(still_first: Callable[[int], bool], most: int) -> int:
    """The largest m <= most with still_first(m), given that it holds up to some m and not
    after: priorities grow with size (every strategy's do), so moving nodes one at a time
    keeps serving the same job for a stretch that bisection finds in O(log most) steps."""
    lo, hi = 0, most
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if still_first(mid):
            lo = mid
        else:
            hi = mid - 1
    return lo
