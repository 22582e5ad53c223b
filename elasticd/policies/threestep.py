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
KeepPref). Fewest-jobs moves run on a heap, a job at a time. Balanced moves are counted
per job at once (`_first`: the nodes below a level, the level estimated, the few it is
off by settled on a heap), so a pass costs O(queue + jobs * log jobs), not one heap
operation per node moved.
"""

from __future__ import annotations

import heapq
import math
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
    # Balanced moves only, optional: the keys of `_grown` and `_shrunk` as one function each
    # rather than a function calling `priority` (the very same numbers): _first asks for
    # them a few times per job on every pass that moves nodes.
    grown_key: Callable[[RunningView], Callable[[int], float]] | None = None
    shrunk_key: Callable[[int, RunningView], Callable[[int], float]] | None = None


# A job's nodes to move as (job id, key of its m-th node, how many it can move): keys
# increase with m (priorities grow with size, for every strategy here).
Units = list[tuple[int, Callable[[int], float], int]]


def resizable(r: RunningView, now: float, interval: float) -> bool:
    """A running malleable job an order can be sent to now, not resized too recently."""
    return (
        r.kind is JobKind.MALLEABLE
        and r.malleable_ready
        and not r.resizing
        and not r.ending
        and (r.last_resize is None or now - r.last_resize >= interval)
    )


def _resizable(running: tuple[RunningView, ...], now: float, interval: float) -> list[RunningView]:
    """The running jobs `resizable` accepts, without a call per job."""
    malleable = JobKind.MALLEABLE
    return [
        r for r in running
        if r.kind is malleable
        and r.malleable_ready
        and not r.resizing
        and not r.ending
        and (r.last_resize is None or now - r.last_resize >= interval)
    ]


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
            ready = _resizable(snap.running, now, interval)
            floor = s.floor
            donors = {r.job_id: r for r in ready if r.size > floor(r)}
            size = {jid: r.size for jid, r in donors.items()}
            shrinkable = sum(r.size - floor(r) for r in donors.values())
            if not s.balanced:  # balanced taking counts afresh from `size` each time
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
    if shrinks:
        decisions.extend([Shrink(j, n) for j, n in sorted(shrinks.items())])

    # Step 3: idle nodes to running malleable jobs, unless a waiting job is owed them.
    if not owed and free > 0:
        grants = grant_requests(snap, free)
        if grants:
            decisions.extend(grants)
            free -= sum([g.by for g in grants])
            if free <= 0:
                return decisions
        if ready is None:
            ready = _resizable(snap.running, now, interval)
        takers = {r.job_id: r for r in ready if r.size < r.max_nodes and r.job_id not in shrinks}
        if takers:
            decisions.extend([Grow(j, n) for j, n in sorted(_give(takers, free, s).items())])
    return decisions


def _take(
    heap: list[tuple[float, int]],
    donors: dict[int, RunningView],
    size: dict[int, int],
    shrinks: dict[int, int],
    lack: int,
    s: Strategy,
) -> None:
    """Take `lack` nodes from donors, highest priority first (ties: lower job id).

    Balanced: counted from `size` at once (the heap is not used); fewest jobs: each job
    popped from the heap gives all it can."""
    priority, floor = s.priority, s.floor
    if s.balanced:
        # Giving a node one at a time from the highest (priority, then lowest id) takes the
        # keys (-priority(size - m), m = 0, 1, ...) of every job in increasing order.
        units: Units = []
        shrunk = s.shrunk_key
        for j, r in donors.items():
            sz = size[j]
            cap = sz - floor(r)
            if cap > 0:
                units.append((j, _shrunk(priority, sz, r) if shrunk is None else shrunk(sz, r), cap))
        for j, n in _first(units, lack).items():
            size[j] -= n
            shrinks[j] = shrinks.get(j, 0) + n
        return
    while lack > 0:
        _, j = heapq.heappop(heap)
        r = donors[j]
        sz = size[j]
        n = min(lack, sz - floor(r))
        size[j] = sz = sz - n
        shrinks[j] = shrinks.get(j, 0) + n
        lack -= n
        if sz > floor(r):
            heapq.heappush(heap, (-priority(sz, r), j))


def _give(takers: dict[int, RunningView], free: int, s: Strategy) -> dict[int, int]:
    """Give `free` nodes to takers, lowest priority first (ties: lower job id)."""
    priority = s.priority
    if s.balanced:
        # One node at a time to the lowest (priority, id): the keys priority(size + m).
        if free <= 0:
            return {}
        room = {j: r.max_nodes - r.size for j, r in takers.items() if r.size < r.max_nodes}
        if sum(room.values()) <= free:  # every taker filled: no key is needed
            return room
        grown = s.grown_key
        if grown is None:
            units = [(j, _grown(priority, takers[j]), cap) for j, cap in room.items()]
        else:
            units = [(j, grown(takers[j]), cap) for j, cap in room.items()]
        return _first(units, free)
    size = {j: r.size for j, r in takers.items()}
    grows: dict[int, int] = {}
    heap = [(priority(size[j], r), j) for j, r in takers.items() if size[j] < r.max_nodes]
    heapq.heapify(heap)
    while free > 0 and heap:
        _, j = heapq.heappop(heap)
        r = takers[j]
        sz = size[j]
        n = min(free, r.max_nodes - sz)
        size[j] = sz = sz + n
        grows[j] = grows.get(j, 0) + n
        free -= n
        if sz < r.max_nodes:
            heapq.heappush(heap, (priority(sz, r), j))
    return grows


def _grown(priority: Priority, r: RunningView) -> Callable[[int], float]:
    """The key of the m-th node given to r (from its size): its priority with it."""
    size = r.size
    return lambda m: priority(size + m, r)


def _shrunk(priority: Priority, size: int, r: RunningView) -> Callable[[int], float]:
    """The key of the m-th node taken from r (from `size`): minus its priority before."""
    return lambda m: -priority(size - m, r)


def _first(units: Units, budget: int) -> dict[int, int]:
    """Per job (those with any), how many of its nodes are among the `budget` first of all
    jobs' nodes in (key, job id) order: what moving one node at a time to or from the job
    ranked first, re-ranking after each, comes to.

    Each job's keys come in increasing order, so everything below a level comes first,
    whatever the level. The level is estimated by taking each job's keys as linear in m
    (they are, up to rounding, for every strategy here); the nodes below it are counted
    exactly (with the real keys), and what the estimate is off by (about a node per job)
    is dropped from the largest keys counted, or added from the smallest left, on a heap.
    Any estimate gives the same result; a good one only makes it quick."""
    if budget <= 0:
        return {}
    if sum([u[2] for u in units]) <= budget:
        return {j: cap for j, _, cap in units}
    # (A popped entry that comes back is put in its place with heapreplace: entries are
    # distinct, so what is popped, in what order, is the same as with a pop and a push.)
    heappop, heapreplace = heapq.heappop, heapq.heapreplace
    if budget <= 2 * len(units):
        # Few nodes for the jobs there are: node by node on a heap is cheaper than a level.
        heap = [(key(0), j, i) for i, (j, key, _) in enumerate(units)]
        heapq.heapify(heap)
        taken = [0] * len(units)
        for _ in range(budget):
            _, j, i = heap[0]
            taken[i] = m = taken[i] + 1
            u = units[i]
            if m < u[2]:
                heapreplace(heap, (u[1](m), j, i))
            else:
                heappop(heap)
        return {units[i][0]: m for i, m in enumerate(taken) if m}
    # The linear counts' breakpoints: a job's count starts rising at its first key and
    # stops at its last (slope 1/step in between); a job of one node (or whose keys do not
    # rise) counts all at once at its first key.
    first: list[float] = []
    steps: list[float] = []
    points: list[tuple[float, float, int]] = []  # (level, change of slope, jump)
    for _, key, cap in units:
        k0 = key(0)
        step = key(1) - k0 if cap > 1 else 0.0
        first.append(k0)
        steps.append(step)
        if step > 0:
            points.append((k0, 1.0 / step, 0))
            points.append((k0 + cap * step, -1.0 / step, 0))
        else:
            points.append((k0, 0.0, cap))
    points.sort()
    level = points[-1][0]
    value = slope = 0.0
    prev = points[0][0]
    for at, dslope, jump in points:
        reached = value + slope * (at - prev)
        if reached >= budget:
            level = prev + (budget - value) / slope
            break
        value, prev = reached + jump, at
        slope += dslope
        if value >= budget:
            level = at
            break
    # The exact count below the level, per job: the estimate m (keys taken as linear),
    # corrected until key(m - 1) < level <= key(m).
    counts: list[int] = []
    total = 0
    for (_, key, cap), k0, step in zip(units, first, steps):
        if level <= k0:
            m = 0
        else:
            m = cap if step <= 0 else max(1, min(cap, math.ceil((level - k0) / step)))
            while m > 0 and key(m - 1) >= level:
                m -= 1
            while m < cap and key(m) < level:
                m += 1
        counts.append(m)
        total += m
    if total > budget:  # drop the largest keys counted
        top = [(-units[i][1](m - 1), -units[i][0], i) for i, m in enumerate(counts) if m > 0]
        heapq.heapify(top)
        for _ in range(total - budget):
            _, neg_j, i = top[0]
            counts[i] = m = counts[i] - 1
            if m > 0:
                heapreplace(top, (-units[i][1](m - 1), neg_j, i))
            else:
                heappop(top)
    elif total < budget:  # add the smallest keys left
        low = [(units[i][1](m), units[i][0], i) for i, m in enumerate(counts) if m < units[i][2]]
        heapq.heapify(low)
        for _ in range(budget - total):
            _, j, i = low[0]
            counts[i] = m = counts[i] + 1
            u = units[i]
            if m < u[2]:
                heapreplace(low, (u[1](m), j, i))
            else:
                heappop(low)
    return {units[i][0]: m for i, m in enumerate(counts) if m}
