"""The availability map (elasticd/policies/profile.py) against a plain step function.

The map is blocked for speed; every answer it gives must equal what a naive list of
(start, free) segments says, through random reservations that split and merge blocks.
"""

from __future__ import annotations

import bisect
import math

from hypothesis import given, settings
from hypothesis import strategies as st

from elasticd.policies import profile as profile_mod
from elasticd.policies.profile import FreeProfile


class Naive:
    def __init__(self, now: float, free: int, releases: list[tuple[float, int]]) -> None:
        self.now = now
        self.changes: list[tuple[float, float, int]] = [(now, math.inf, free)]
        for t, n in releases:
            self.changes.append((max(t, now), math.inf, n))

    def reserve(self, start: float, end: float, n: int) -> None:
        self.changes.append((max(start, self.now), end, -n))

    def free(self, t: float) -> int:
        return sum(n for s, e, n in self.changes if s <= t < e)

    def points(self) -> list[float]:
        pts = {self.now}
        for s, e, _ in self.changes:
            pts.add(s)
            if e != math.inf:
                pts.add(e)
        return sorted(p for p in pts if p >= self.now)

    def min_free(self, start: float, end: float) -> int:
        pts = [p for p in self.points() if start < p < end] + [start]
        return min(self.free(p) for p in pts)

    def earliest(self, need: int, dur: float, after: float) -> float:
        for p in [after] + [q for q in self.points() if q > after]:
            inner = [q for q in self.points() if p < q < p + dur]
            if all(self.free(q) >= need for q in [p] + inner):
                return p
        return math.inf


ops = st.lists(
    st.tuples(st.integers(0, 60), st.integers(1, 40), st.integers(-2, 3)),  # < 0: nodes lent
    max_size=60,
)


@settings(max_examples=150, deadline=None)
@given(
    releases=st.lists(st.tuples(st.integers(-5, 50), st.integers(0, 4)), max_size=12),
    free=st.integers(0, 6),
    reservations=ops,
    queries=st.lists(st.tuples(st.integers(1, 12), st.integers(1, 50), st.integers(0, 60)), max_size=10),
    block=st.sampled_from([1, 2, 3, 64]),
)
def test_blocked_map_answers_like_a_plain_step_function(
    releases: list[tuple[int, int]],
    free: int,
    reservations: list[tuple[int, int, int]],
    queries: list[tuple[int, int, int]],
    block: int,
) -> None:
    old = profile_mod._BLOCK
    profile_mod._BLOCK = block  # tiny blocks exercise splits and whole-block shortcuts
    try:
        fast = FreeProfile(0.0, free, [(float(t), n) for t, n in releases])
        slow = Naive(0.0, free, [(float(t), n) for t, n in releases])
        for start, length, n in reservations:
            end = math.inf if length == 40 else float(start + length)
            fast.reserve(float(start), end, n)
            slow.reserve(float(start), end, n)
            for p in slow.points():
                assert fast.min_free(p, p) == slow.free(p)
        for need, dur, after in queries:
            d = math.inf if dur == 50 else float(dur)
            assert fast.earliest(need, d, float(after)) == slow.earliest(need, d, float(after))
            end = float(after + dur)
            assert fast.min_free(float(after), end) == slow.min_free(float(after), end)
            enough = [p for p in [float(after)] + slow.points() if p >= after and slow.free(p) >= need]
            assert fast.first_with(need, float(after)) == (min(enough) if enough else math.inf)
            starts, fewest = fast.fewest_from_now()
            j = bisect.bisect_left(starts, end) - 1
            assert fewest[max(j, 0)] == slow.min_free(0.0, end)
            short = fast.last_short(float(after), end, need)
            window = [float(after)] + [q for q in slow.points() if after < q < end]
            if all(slow.free(q) >= need for q in window):
                assert short is None
            else:
                # Short just before `short`, enough from there to the end of the window.
                assert short is not None and after < short
                assert slow.free(max(q for q in slow.points() + [float(after)] if q < short)) < need
                assert all(slow.free(q) >= need for q in window if q >= short)
    finally:
        profile_mod._BLOCK = old


def test_release_times_in_the_past_count_as_now_and_equal_times_merge() -> None:
    p = FreeProfile(100.0, 2, [(50.0, 1), (200.0, 3), (200.0, 1)])
    assert p.segments() == [(100.0, 3), (200.0, 7)]
    assert p.earliest(5, 10.0) == 200.0
    assert p.earliest(3, math.inf) == 100.0
    assert p.earliest(8, 1.0) == math.inf


@settings(max_examples=200, deadline=None)
@given(
    releases=st.lists(st.tuples(st.integers(-5, 50), st.integers(0, 4)), max_size=12),
    free=st.integers(0, 6),
    steps=st.lists(
        st.one_of(
            st.tuples(st.just("reserve"), st.integers(0, 60), st.integers(1, 40), st.integers(-2, 3)),
            st.tuples(st.just("earliest"), st.integers(1, 12), st.integers(1, 50), st.just(0)),
        ),
        max_size=40,
    ),
    block=st.sampled_from([1, 2, 64]),
)
def test_searches_between_reservations_answer_like_a_plain_step_function(
    releases: list[tuple[int, int]], free: int, steps: list[tuple[str, int, int, int]], block: int
) -> None:
    """A pass searches, reserves, searches again: each search starts from earlier answers
    for narrower, shorter jobs, which holds only while the map loses nodes (a lent node
    comes back with a negative reservation)."""
    old = profile_mod._BLOCK
    profile_mod._BLOCK = block
    try:
        fast = FreeProfile(0.0, free, [(float(t), n) for t, n in releases])
        slow = Naive(0.0, free, [(float(t), n) for t, n in releases])
        for op, a, b, c in steps:
            if op == "reserve":
                end = math.inf if b == 40 else float(a + b)
                fast.reserve(float(a), end, c)
                slow.reserve(float(a), end, c)
            else:
                d = math.inf if b == 50 else float(b)
                assert fast.earliest(a, d) == slow.earliest(a, d, 0.0)
    finally:
        profile_mod._BLOCK = old


def test_nodes_given_back_let_a_later_search_start_earlier_than_an_earlier_answer() -> None:
    p = FreeProfile(0.0, 2, [(10.0, 2)])  # 2 free until 10, then 4
    assert p.earliest(3, 5.0) == 10.0
    p.reserve(0.0, 20.0, -1)  # a lender's node comes back now
    assert p.earliest(3, 5.0) == 0.0
    p.reserve(0.0, 5.0, 3)
    assert p.earliest(1, 1.0) == 5.0
    assert p.earliest(2, 2.0) == 5.0  # from the answer above: no window opens before it
