"""Free nodes over future time: the availability map that reservation-based policies
(conservative backfilling, SD-Policy, the evolving-profile fit) place jobs into.

A step function from `now` on, kept as segments (start time, free nodes), each lasting
until the next one starts; the last lasts for ever. Segments live in blocks of at most
`2 * _BLOCK` so that one pass with a queue thousands deep stays near-linear: a search
skips whole blocks whose largest free count is too small, a range update touches whole
blocks through a lazy offset, and inserting a breakpoint shifts one small list, not the
whole map. (A flat list made conservative backfilling of 10,000 queued jobs quadratic.)

Why free nodes at `now` include nodes still in flight (ends and shrinks being carried
out): they are promised back and will be here in seconds, so planning counts them; a
policy that wants to *start* a job now still checks the idle nodes it really has.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Iterable
from itertools import accumulate

_BLOCK = 64
_RECENT = 8  # earliest() answers kept as lower bounds for the next searches


class _Block:
    __slots__ = ("add", "free", "hi", "lo", "times")

    def __init__(self, times: list[float], free: list[int]) -> None:
        self.times = times
        self.free = free  # stored values; the real free count is value + add
        self.add = 0
        self.lo = min(free)  # exact
        self.hi = max(free)  # at least the largest (reservations leave it stale)

    def refresh(self) -> None:
        self.lo = min(self.free)
        self.hi = max(self.free)

    def take(self, i: int, stop: int, nodes: int) -> None:
        """Take `nodes` from segments i..stop-1 (i < stop; negative: give them back)."""
        taken = [f - nodes for f in self.free[i:stop]]
        self.free[i:stop] = taken
        if nodes > 0:
            # Taking nodes only lowers values: the least is exact this way, and the largest
            # stays an upper bound, which only lets a search skip fewer blocks.
            low = min(taken)
            self.lo = min(self.lo, low)
        else:
            self.refresh()


class FreeProfile:
    def __init__(self, now: float, free_now: int, releases: Iterable[tuple[float, int]]) -> None:
        """`releases`: (time, nodes) that come back at `time` (times before now count as now)."""
        self.now = now
        merged: dict[float, int] = {}
        get = merged.get
        for t, n in releases:  # a map per pass, over every running job's releases
            if n:
                if now > t:  # noqa: PLR1730  # max(t, now), without the call
                    t = now
                merged[t] = get(t, 0) + n
        free = free_now + merged.pop(now, 0)
        times = [now]
        values = [free]
        for t in sorted(merged):
            free += merged[t]
            times.append(t)
            values.append(free)
        self._blocks = [
            _Block(times[i : i + _BLOCK], values[i : i + _BLOCK]) for i in range(0, len(times), _BLOCK)
        ]
        self._firsts = [b.times[0] for b in self._blocks]
        # (need, duration, earliest start) of the last searches since the map last gained
        # nodes (see `earliest`).
        self._recent: list[tuple[int, float, float]] = []

    # ---- reading ---------------------------------------------------------------------
    def free_at_now(self) -> int:
        b = self._blocks[0]
        return b.free[0] + b.add

    def segments(self) -> list[tuple[float, int]]:
        """Every (start, free) pair in time order; for tests and debugging."""
        return [(t, f + b.add) for b in self._blocks for t, f in zip(b.times, b.free)]

    def fewest_from_now(self) -> tuple[list[float], list[int]]:
        """(segment starts, fewest free nodes from now to the end of each segment): for a
        reader asking many `min_free(now, t)` of an unchanging map, which is then
        fewest[bisect_left(starts, t) - 1] (index 0 at least)."""
        starts: list[float] = []
        values: list[int] = []
        for b in self._blocks:
            starts.extend(b.times)
            values.extend(b.free if b.add == 0 else [f + b.add for f in b.free])
        return starts, list(accumulate(values, min))

    def _locate(self, t: float) -> tuple[int, int]:
        """(block, index) of the segment containing time t (t >= now)."""
        if t == self.now:
            return 0, 0  # most questions start now
        bi = bisect.bisect_right(self._firsts, t) - 1
        b = self._blocks[bi]
        return bi, bisect.bisect_right(b.times, t) - 1

    def _end_of(self, bi: int, i: int) -> float:
        b = self._blocks[bi]
        if i + 1 < len(b.times):
            return b.times[i + 1]
        if bi + 1 < len(self._blocks):
            return self._firsts[bi + 1]
        return math.inf

    def earliest(self, need: int, duration: float, after: float | None = None) -> float:
        """Earliest start >= `after` (default now) with `need` nodes free for `duration`
        seconds; inf if that never happens.

        One walk forward: a candidate start is the first time with enough nodes since the
        last short segment; it is the answer once a segment begins `duration` after it.
        Blocks with enough nodes everywhere, or nowhere, are passed whole.

        The walk starts at the latest recent answer for a job no wider and no longer: while
        the map only loses nodes, no window for this job can open before that one did. (A
        pass places its queue one job after another, mostly near the end of the map, and
        this skips most of the way there.)
        """
        unbounded = after is None or after <= self.now
        t: float = self.now if after is None or unbounded else after
        if need <= 0:
            return t
        if duration <= 0:
            return self.first_with(need, t)
        for n2, d2, t2 in self._recent:
            if t2 > t and n2 <= need and d2 <= duration:
                t = t2
        if t == math.inf:
            return t
        c = self._walk(need, duration, t)
        if unbounded:
            recent = self._recent
            recent.append((need, duration, c))
            if len(recent) > _RECENT:
                del recent[0]
        return c

    def _walk(self, need: int, duration: float, t: float) -> float:
        bi, i = self._locate(t)
        blocks, nb = self._blocks, len(self._blocks)
        inf = math.inf
        c = cd = inf  # the candidate start (inf: none since the last short segment), + duration
        while bi < nb:
            b = blocks[bi]
            short = need - b.add  # stored values below this are short
            if i == 0:
                t0 = b.times[0]
                if t0 >= cd:
                    return c
                if b.lo >= short:
                    if c == inf:
                        c = max(t, t0)
                        cd = c + duration
                    bi += 1
                    continue
                if b.hi < short:
                    c = cd = inf
                    bi += 1
                    continue
            for tj, fj in zip(b.times[i:], b.free[i:]) if i else zip(b.times, b.free):
                if tj >= cd:
                    return c
                if fj < short:
                    c = cd = inf
                elif c == inf:
                    c = max(t, tj)
                    cd = c + duration
            bi += 1
            i = 0
        return c

    def first_with(self, need: int, t: float) -> float:
        """The first time >= t at which at least `need` nodes are free (inf: never)."""
        bi, i = self._locate(t)
        blocks, nb = self._blocks, len(self._blocks)
        while bi < nb:
            b = blocks[bi]
            if i == 0 and b.hi + b.add < need:
                bi += 1  # nothing in this block has enough
                continue
            times, free, add = b.times, b.free, b.add
            for j in range(i, len(times)):
                if free[j] + add >= need:
                    return max(times[j], t)
            bi += 1
            i = 0
        return math.inf

    def min_free(self, start: float, end: float) -> int:
        """Fewest free nodes at any time in [start, end) (at `start` if the range is empty)."""
        bi, i = self._locate(max(self.now, start))
        blocks, nb = self._blocks, len(self._blocks)
        best = math.inf
        first = True  # the segment at `start` counts even if the range is empty
        while bi < nb:
            b = blocks[bi]
            low: float
            if i == 0 and bi + 1 < nb and self._firsts[bi + 1] <= end:
                low = b.lo + b.add  # the whole block lies inside the range
            else:
                times = b.times
                stop = bisect.bisect_left(times, end, i + 1 if first else i)
                low = min(b.free[i:stop]) + b.add if stop > i else math.inf
                if stop < len(times):
                    return int(min(best, low))
            best = min(best, low)
            first = False
            bi += 1
            i = 0
        return int(best)

    def last_short(self, start: float, end: float, need: int) -> float | None:
        """End time of the last segment in [start, end) with fewer than `need` free nodes,
        or None if every segment there has enough: where a search for a window can resume.
        Scans backwards from `end`, skipping blocks that have enough everywhere."""
        start = max(start, self.now)
        blocks = self._blocks
        bs, i_s = self._locate(start)
        if end == math.inf:
            be, ie = len(blocks) - 1, len(blocks[-1].times) - 1
        else:
            be, ie = self._locate(end)
            if blocks[be].times[ie] >= end and (be, ie) != (bs, i_s):
                # The segment starting at `end` is outside the window: the one before it.
                if ie > 0:
                    ie -= 1
                else:
                    be -= 1
                    ie = len(blocks[be].times) - 1
        for bi in range(be, bs - 1, -1):
            b = blocks[bi]
            lo_i = i_s if bi == bs else 0
            hi_i = ie if bi == be else len(b.times) - 1
            if b.lo + b.add >= need:
                continue  # no short segment anywhere in this block
            free, add = b.free, b.add
            for j in range(hi_i, lo_i - 1, -1):
                if free[j] + add < need:
                    return self._end_of(bi, j)
        return None

    # ---- writing ---------------------------------------------------------------------
    def _split(self, t: float) -> tuple[int, int]:
        """Make t a segment boundary (t > now); (block, index) of the segment starting at t."""
        bi, i = self._locate(t)
        b = self._blocks[bi]
        if b.times[i] == t:
            return bi, i
        i += 1
        b.times.insert(i, t)
        b.free.insert(i, b.free[i - 1])
        half = self._halve_if_full(bi)
        if half and i >= half:
            return bi + 1, i - half
        return bi, i

    def _halve_if_full(self, bi: int) -> int:
        """Split block `bi` in two once it holds more than 2 * _BLOCK segments; where (0: not)."""
        b = self._blocks[bi]
        if len(b.times) <= 2 * _BLOCK:
            return 0
        half = len(b.times) // 2
        nb = _Block(b.times[half:], b.free[half:])
        nb.add = b.add
        del b.times[half:], b.free[half:]
        b.refresh()
        self._blocks.insert(bi + 1, nb)
        self._firsts.insert(bi + 1, nb.times[0])
        return half

    def reserve(self, start: float, end: float, nodes: int) -> None:
        """Take `nodes` from every segment in [start, end)."""
        if nodes == 0 or end <= start:
            return
        if nodes < 0:
            self._recent.clear()  # nodes given back: a window may open earlier than before
        start = max(start, self.now)
        bi = 0 if start == self.now else bisect.bisect_right(self._firsts, start) - 1
        if bi + 1 == len(self._blocks) or end < self._firsts[bi + 1]:
            self._reserve_in_block(bi, start, end, nodes)  # the usual case: one block
            return
        if end != math.inf:
            self._split(end)
        bi, i = self._split(start) if start > self.now else (0, 0)
        nb = len(self._blocks)
        while bi < nb:
            b = self._blocks[bi]
            if b.times[i] >= end:
                break
            block_end = self._firsts[bi + 1] if bi + 1 < nb else math.inf
            if i == 0 and block_end <= end:
                b.add -= nodes
                bi += 1
                continue
            stop = bisect.bisect_left(b.times, end, i)
            b.take(i, stop, nodes)
            if stop < len(b.times):
                break
            bi += 1
            i = 0

    def _reserve_in_block(self, bi: int, start: float, end: float, nodes: int) -> None:
        """`reserve` of a range that starts and ends inside block `bi` (the map's first
        segment starts at `now`, so start >= the block's first time)."""
        b = self._blocks[bi]
        times, free = b.times, b.free
        i = bisect.bisect_right(times, start) - 1
        if times[i] != start:
            i += 1
            times.insert(i, start)
            free.insert(i, free[i - 1])
        if end == math.inf:
            stop = len(times)
        else:
            stop = bisect.bisect_left(times, end, i)
            if stop == len(times) or times[stop] != end:
                times.insert(stop, end)
                free.insert(stop, free[stop - 1])
        b.take(i, stop, nodes)
        self._halve_if_full(bi)


def running_releases(snap_running: Iterable[object], now: float) -> list[tuple[float, int]]:
    """When each running job's nodes come back: at its limit (never, if unlimited), now if
    it is being ended; nodes an unanswered shrink will give back are counted as incoming."""
    out: list[tuple[float, int]] = []
    for r in snap_running:
        if r.ending:  # type: ignore[attr-defined]
            continue  # its nodes are in snapshot.incoming_nodes
        end = r.estimated_end  # type: ignore[attr-defined]
        n = r.size - r.shrinking  # type: ignore[attr-defined]
        if end != math.inf and n > 0:
            out.append((max(now, end), n))
    return out


def profile_of(snap: object) -> FreeProfile:
    """The availability map of a snapshot, before any queued job is placed."""
    return FreeProfile(
        snap.now,  # type: ignore[attr-defined]
        snap.free_nodes + snap.incoming_nodes,  # type: ignore[attr-defined]
        running_releases(snap.running, snap.now),  # type: ignore[attr-defined]
    )


def queue_entries(snap: object, limit: int | None = None) -> list[tuple[object, bool]]:
    """The queue with evolving jobs' requests merged in by time: (view, is_request).

    A request made at time t waits behind jobs submitted before t and ahead of those
    submitted after, exactly as if it were a job: first come, first served, so neither
    new jobs nor requests can starve the other. Requests come from registered evolving
    jobs that can take an order now. `limit`: only the first so many entries.
    """
    pending = snap.pending  # type: ignore[attr-defined]
    asks = sorted(
        (r for r in snap.running if r.requested > 0 and r.malleable_ready and not r.ending),  # type: ignore[attr-defined]
        key=lambda r: (_asked_at(r), r.job_id),
    )
    if not asks:
        return [(p, False) for p in pending[:limit]]
    out: list[tuple[object, bool]] = []
    k = 0
    for p in pending:
        while k < len(asks) and _asked_at(asks[k]) <= p.submit_time:
            out.append((asks[k], True))
            k += 1
        out.append((p, False))
    out.extend((a, True) for a in asks[k:])
    return out[:limit]


def _asked_at(r: object) -> float:
    t: float | None = r.requested_at  # type: ignore[attr-defined]
    start: float = r.start_time  # type: ignore[attr-defined]
    return start if t is None else t


def profile_from_segments(now: float, segments: list[tuple[float, int]]) -> FreeProfile:
    """A map with the given (start, free) segments; the first must start at `now`."""
    assert segments and segments[0][0] == now
    prof = FreeProfile(now, 0, ())
    times = [t for t, _ in segments]
    values = [f for _, f in segments]
    prof._blocks = [_Block(times[i : i + _BLOCK], values[i : i + _BLOCK]) for i in range(0, len(times), _BLOCK)]
    prof._firsts = [b.times[0] for b in prof._blocks]
    return prof
