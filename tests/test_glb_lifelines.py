"""The lifeline graph (cyclic hypercube) and the termination counters of the GLB runtime.

The graph must stay connected for every member count a resize can leave (ranks are
positions in the current member list), with bounded out-degree and low diameter."""

from __future__ import annotations

from collections import deque

import pytest

from elastic_apps.glb.lifelines import dimensions, lifeline_buddies, lifeline_graph
from elastic_apps.glb.termination import ActiveCount, PlaceActivity


def distances_from(graph: dict[int, list[int]], start: int) -> dict[int, int]:
    seen = {start: 0}
    todo = deque([start])
    while todo:
        v = todo.popleft()
        for w in graph[v]:
            if w not in seen:
                seen[w] = seen[v] + 1
                todo.append(w)
    return seen


@pytest.mark.parametrize("base", [2, 3, 4, 5])
def test_every_member_count_gives_a_strongly_connected_graph_of_bounded_degree(base: int) -> None:
    for p in range(1, 80):
        graph = lifeline_graph(p, base)
        l = dimensions(p, base)
        for r, buddies in graph.items():
            assert len(buddies) <= l
            assert r not in buddies and len(set(buddies)) == len(buddies)
            assert all(0 <= b < p for b in buddies)
        reverse: dict[int, list[int]] = {r: [] for r in range(p)}
        for r, buddies in graph.items():
            for b in buddies:
                reverse[b].append(r)
        assert len(distances_from(graph, 0)) == p, f"P={p}: rank 0 does not reach every rank"
        assert len(distances_from(reverse, 0)) == p, f"P={p}: some rank does not reach rank 0"


def test_diameter_stays_logarithmic() -> None:
    for p in (2, 5, 8, 13, 16, 31, 32, 64, 100):
        graph = lifeline_graph(p, 2)
        diameter = max(max(distances_from(graph, r).values()) for r in range(p))
        # Hypercube: one hop per bit towards rank 0, one hop per bit back out.
        assert diameter <= 2 * dimensions(p, 2), (p, diameter)


def test_hypercube_buddies_flip_one_bit_each() -> None:
    assert lifeline_buddies(5, 8, 2) == [4, 7, 1]
    assert lifeline_buddies(0, 1, 2) == []
    assert lifeline_buddies(0, 2, 2) == [1]
    # Ranks past the end are skipped: 6 has no bit-0 neighbour 7 when P = 7, and its
    # bit-1 neighbour 4, bit-2 neighbour 2.
    assert lifeline_buddies(6, 7, 2) == [4, 2]
    # Base 3, P = 5: rank 1 is digits (1, 0): +1 on each digit gives 2 and 4; rank 2
    # is (2, 0): 2+1 wraps to 0, and 2+3 = 5, 2+6 = 8 are past the end.
    assert lifeline_buddies(1, 5, 3) == [2, 4]
    assert lifeline_buddies(2, 5, 3) == [0]


def test_termination_counters_reject_impossible_sequences() -> None:
    count = ActiveCount(1)
    count.admitted(2)
    count.idled()
    count.idled()
    count.activated()
    count.idled()
    count.idled()
    assert count.quiescent
    with pytest.raises(RuntimeError):
        count.idled()
    place = PlaceActivity()
    place.gave_work()
    assert not place.may_report_idle()  # owes an ACK
    place.acked()
    assert place.may_report_idle()
    place.reported_idle()
    assert place.received_work() is True  # was idle: the root must count it again
    assert place.received_work() is False  # already counted: ACK the giver directly
    with pytest.raises(RuntimeError):
        place.acked()
