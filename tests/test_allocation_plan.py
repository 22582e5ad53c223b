"""The rules by which the daemon's Slurm allocation shrinks and grows (elasticd.core.allocation_plan):
pure, so pinned here on every state hypothesis can make up; Slurm itself in
tests/test_cluster_allocation.py."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from elasticd.core.allocation_plan import (
    AllocationRules,
    AllocationUsage,
    Holding,
    Outstanding,
    PendingNeed,
    Release,
    Request,
    ShrinkToRelease,
    Withdraw,
    plan,
)

NAMES = [f"n{i}" for i in range(8)]


@st.composite
def states(draw: st.DrawFn):  # type: ignore[no-untyped-def]
    members = NAMES[: draw(st.integers(1, 8))]
    free = [h for h in members if draw(st.booleans())]
    idle_since = {h: draw(st.floats(0, 100)) for h in free}
    companions = frozenset(h for h in members[1:] if draw(st.booleans()))
    pending = [PendingNeed(100 + i, draw(st.integers(1, 12)), draw(st.floats(0, 100)))
               for i in range(draw(st.integers(0, 4)))]
    outstanding = [Outstanding(f"s{i}", draw(st.integers(1, 3)), draw(st.sampled_from([100, 101, 200])))
                   for i in range(draw(st.integers(0, 2)))]
    rules = AllocationRules(release_idle=draw(st.one_of(st.none(), st.floats(1, 50))),
                            grow_max=draw(st.one_of(st.none(), st.integers(len(members), 12))))
    return members, free, idle_since, companions, pending, outstanding, rules


@settings(max_examples=300, deadline=None)
@given(states())
def test_only_idle_nodes_are_given_back_never_the_first_and_never_while_a_pending_job_could_use_them(s) -> None:  # type: ignore[no-untyped-def]
    members, free, idle_since, companions, pending, outstanding, rules = s
    steps = plan(100.0, members, free, idle_since, companions, pending, outstanding, rules)
    released = [h for step in steps if isinstance(step, Release) for h in step.hosts]
    assert set(released) <= set(free)
    assert members[0] not in released
    capacity = max(len(members), rules.grow_max or 0)
    if any(p.min_nodes <= capacity for p in pending):
        assert released == []
    for h in released:
        limit = rules.companion_idle if h in companions else rules.release_idle
        assert limit is not None and 100.0 - idle_since[h] >= limit


@settings(max_examples=300, deadline=None)
@given(states())
def test_growth_stays_within_its_limit_one_request_per_waiting_job_and_stale_requests_are_withdrawn(s) -> None:  # type: ignore[no-untyped-def]
    members, free, idle_since, companions, pending, outstanding, rules = s
    steps = plan(100.0, members, free, idle_since, companions, pending, outstanding, rules)
    waiting = {p.job_id for p in pending}
    withdrawn = {step.request_id for step in steps if isinstance(step, Withdraw)}
    assert withdrawn == {o.request_id for o in outstanding if o.for_job not in waiting}
    requests = [step for step in steps if isinstance(step, Request)]
    if rules.grow_max is None:
        assert requests == []
    live = [o for o in outstanding if o.for_job in waiting]
    for r in requests:
        assert r.for_job == pending[0].job_id and r.count > 0
        assert all(o.for_job != r.for_job for o in live)
        assert len(members) + sum(o.count for o in live) + r.count <= (rules.grow_max or 0)
        assert len(free) + sum(o.count for o in live) + r.count == pending[0].min_nodes


def test_a_job_that_waited_long_enough_gets_a_request_for_what_it_lacks() -> None:
    rules = AllocationRules(grow_max=4, grow_wait=5.0)
    head = PendingNeed(7, 3, submit_time=10.0)
    assert plan(12.0, ["a"], [], {}, frozenset(), [head], [], rules) == []  # not yet
    assert plan(15.0, ["a"], [], {}, frozenset(), [head], [], rules) == [Request(3, 7)]
    assert plan(15.0, ["a"], ["a"], {"a": 0.0}, frozenset(), [head], [], rules) == [Request(2, 7)]
    # Not past the limit: 4 nodes at most, 1 held, 3 more needed while the one is busy...
    assert plan(15.0, ["a", "b"], [], {}, frozenset(), [head], [], rules) == []
    # Asked already: not again; the request is withdrawn once the job no longer waits.
    asked = [Outstanding("s1", 2, 7)]
    assert plan(20.0, ["a"], [], {}, frozenset(), [head], asked, rules) == []
    assert plan(20.0, ["a"], [], {}, frozenset(), [], asked, rules) == [Withdraw("s1")]


def test_companion_nodes_go_back_after_a_minute_when_only_growth_was_asked_for() -> None:
    rules = AllocationRules(grow_max=4)
    members, free = ["a", "b", "c"], ["b", "c"]
    assert plan(100.0, members, free, {"b": 30.0, "c": 50.0}, frozenset({"b", "c"}), [], [], rules) == \
        [Release(("b",))]
    # The main allocation's own nodes stay without --release-idle.
    assert plan(100.0, members, free, {"b": 0.0, "c": 0.0}, frozenset(), [], [], rules) == []


def test_node_seconds_held_used_and_given_back_add_up_over_segments() -> None:
    u = AllocationUsage()
    u.advance(0.0, held=4, used=1)
    u.advance(10.0, held=4, used=3)  # 10 s at 4 held, 1 used
    u.advance(20.0, held=4, used=3)  # 10 s at 4 held, 3 used; then two nodes go back
    u.released_nodes = 2
    u.advance(20.0, held=2, used=2)
    u.advance(30.0, held=2, used=2)  # 10 s at 2 held, 2 used, 2 given back
    assert (u.held, u.used, u.given_back) == (4 * 10 + 4 * 10 + 2 * 10, 10 + 30 + 20, 2 * 10)


def test_malleable_jobs_are_shrunk_to_give_nodes_back_only_when_the_operator_asks_and_nothing_waits() -> None:
    held = [Holding(3, size=4, preferred=2, since=0.0), Holding(4, size=2, preferred=2, since=0.0),
            Holding(5, size=3, preferred=1, since=99.0)]
    ask = AllocationRules(release_idle=10.0, shrink_malleable=True)
    # Above its preferred size long enough: job 3 (job 4 is at it; job 5 only just grew).
    assert plan(100.0, ["a", "b"], [], {}, frozenset(), [], [], ask, held) == [ShrinkToRelease(3, 2)]
    # Not without the operator's word, and not while a pending job could use the nodes.
    assert plan(100.0, ["a", "b"], [], {}, frozenset(), [], [], AllocationRules(release_idle=10.0), held) == []
    assert plan(100.0, ["a", "b"], [], {}, frozenset(), [PendingNeed(9, 1, 0.0)], [], ask, held) == []


def test_eacct_counts_a_refused_give_back_as_held_all_along() -> None:
    from elasticd.accounting import allocation_accounts
    from elasticd.eventlog import Segment

    def ev(t: float, kind: str, hosts: list[str], refused: bool = False) -> dict:
        return {"seq": 1, "event": {"type": kind, "time": t, "hosts": hosts, "refused": refused}, "actions": []}

    refused = Segment({"time": 0.0, "nodes": ["a", "b", "c"]},
                      [ev(10.0, "NodesRemoved", ["b", "c"]), ev(15.0, "NodesAdded", ["b", "c"], refused=True),
                       ev(30.0, "NodesRemoved", ["c"]), {"seq": 2, "event": {"type": "PassDue", "time": 40.0}}])
    (run,) = allocation_accounts([refused], [])
    # b and c were held 0-30 s, c was given back at 30 s: 3 x 30 + 2 x 10 held, 1 x 10 given back.
    assert (run.held, run.given_back, run.released, run.added) == (110.0, 10.0, 1, 0)
