"""Min, Avg, Pref and KeepPref (real-workloads paper) on hand-built snapshots, with the
expected decisions worked out in the comments, then one run through the real core."""

from __future__ import annotations

import heapq

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from core_support import submit
from elastic_protocol.jobspec import JobKind, JobSpec
from elasticd.core.actions import Launch, SendOrder
from elasticd.core.engine import Core
from elasticd.core.events import CancelRequested, GrowAnswered, PassDue, Registered
from elasticd.policies import make_policy
from elasticd.policies.base import (
    Grow,
    PendingView,
    RunningView,
    Shrink,
    Snapshot,
    Start,
)

M = JobKind.MALLEABLE
NOW = 100.0


def run(job_id: int, size: int, lo: int, pref: int, hi: int, kind: JobKind = M, limit: float | None = None) -> RunningView:
    return RunningView(
        job_id=job_id, kind=kind, size=size, min_nodes=lo, max_nodes=hi, preferred=pref, start_time=0.0,
        time_limit=limit, malleable_ready=True, last_resize=None, ending=False,
    )


def wait(job_id: int, lo: int, pref: int | None = None, hi: int | None = None, kind: JobKind = JobKind.RIGID,
         limit: float | None = None) -> PendingView:
    hi = hi if hi is not None else (pref if pref is not None else lo)
    return PendingView(job_id, float(job_id), kind, lo, hi, pref if pref is not None else hi, limit)


def snap(total: int, free: int, running: tuple[RunningView, ...] = (), pending: tuple[PendingView, ...] = ()) -> Snapshot:
    assert free == total - sum(r.size for r in running)
    return Snapshot(NOW, total, free, pending, running)


def decide(policy: str, s: Snapshot) -> list[object]:
    return make_policy(policy, {"min_resize_interval": 0}).decide(s)


# ---- step 1: start sizes ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("policy", "expected"),
    [("min", [Start(1, 2)]), ("avg", [Start(1, 2)]), ("pref", [Start(1, 5)]), ("keeppref", [Start(1, 5)])],
)
def test_malleable_jobs_start_at_the_minimum_or_the_preferred_size(policy: str, expected: list[object]) -> None:
    s = snap(10, 10, pending=(wait(1, 2, 5, 8, kind=M),))
    assert decide(policy, s) == expected


@pytest.mark.parametrize(
    ("policy", "expected"),
    [("min", [Start(1, 2)]), ("avg", [Start(1, 2)]), ("pref", [Start(1, 3)]), ("keeppref", [])],
)
def test_with_too_few_nodes_pref_starts_on_fewer_and_keeppref_waits_for_its_preferred_size(
    policy: str, expected: list[object]
) -> None:
    # 3 idle nodes; the job wants 5, can run on 2. KeepPref "always" starts at preferred, and
    # no running job is above its preferred size to be shrunk for it.
    s = snap(10, 3, running=(run(9, 7, 7, 7, 7, kind=JobKind.RIGID),), pending=(wait(1, 2, 5, 8, kind=M),))
    assert decide(policy, s) == expected


# ---- step 2: who is shrunk --------------------------------------------------------------

# A runs 6 (min 1, pref 6), B runs 5 (min 1, pref 2), C runs 4 (min 2, pref 4): 15 of 15.
SHRINK_RUNNING = (run(1, 6, 1, 6, 8), run(2, 5, 1, 2, 8), run(3, 4, 2, 4, 8))


@pytest.mark.parametrize(
    ("policy", "expected"),
    [
        # Min: current - min = 5, 4, 2 -> A gives all 3 (fewest jobs).
        ("min", [Shrink(1, 3)]),
        # Pref: current - preferred = 0, 3, 0 -> B gives all 3.
        ("pref", [Shrink(2, 3)]),
        # Avg: (current - min)/(max - min) = 5/7, 4/7, 2/6, one node at a time:
        # A 6->5 (4/7, ties B: lower id) A 5->4 (3/7), then B 5->4.
        ("avg", [Shrink(1, 2), Shrink(2, 1)]),
        # KeepPref: only B is above its preferred size, and may give 5 - 2 = 3.
        ("keeppref", [Shrink(2, 3)]),
    ],
)
def test_step_two_shrinks_by_each_strategys_priority(policy: str, expected: list[object]) -> None:
    s = snap(15, 0, running=SHRINK_RUNNING, pending=(wait(4, 3),))
    assert decide(policy, s) == expected


@pytest.mark.parametrize(
    ("policy", "expected"),
    [("pref", [Shrink(2, 4)]), ("keeppref", [])],
)
def test_keeppref_never_shrinks_a_job_below_its_preferred_size(policy: str, expected: list[object]) -> None:
    # The waiting job needs 4. Pref takes B down to its minimum (5 -> 1); KeepPref could
    # only take B to its preferred 2 (3 nodes), A and C are at theirs: not enough, nothing.
    s = snap(15, 0, running=SHRINK_RUNNING, pending=(wait(4, 4),))
    assert decide(policy, s) == expected


def test_min_takes_from_as_few_jobs_as_possible_and_avg_spreads_the_cut() -> None:
    # A 4 (min 1), B 4 (min 1): 2 nodes needed.
    running = (run(1, 4, 1, 4, 4), run(2, 4, 1, 4, 4))
    s = snap(8, 0, running=running, pending=(wait(3, 2),))
    assert decide("min", s) == [Shrink(1, 2)]  # tie -> lower id gives both
    assert decide("avg", s) == [Shrink(1, 1), Shrink(2, 1)]


def test_keeppref_shrinks_for_a_waiting_malleable_job_its_preferred_size() -> None:
    # The waiting malleable job (min 1, pref 3) needs 3 under KeepPref, 1 under Pref.
    running = (run(1, 8, 1, 2, 8),)
    s = snap(8, 0, running=running, pending=(wait(2, 1, 3, 6, kind=M),))
    assert decide("keeppref", s) == [Shrink(1, 3)]
    assert decide("pref", s) == [Shrink(1, 1)]


# ---- step 3: who grows -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("policy", "expected"),
    [
        # Min: current - min = 1, 1 -> tie, lower id: A takes all 4.
        ("min", [Grow(1, 4)]),
        # Avg: 1/7 vs 1/6 -> A 2->3 (2/7), B 3->4 (2/6), A 3->4 (3/7), B 4->5: 2 each.
        ("avg", [Grow(1, 2), Grow(2, 2)]),
        # Pref: current - preferred = -2 (A, pref 4) vs 0 (B, pref 3): A takes all 4.
        ("pref", [Grow(1, 4)]),
        ("keeppref", [Grow(1, 4)]),
    ],
)
def test_step_three_gives_idle_nodes_lowest_priority_first(policy: str, expected: list[object]) -> None:
    s = snap(9, 4, running=(run(1, 2, 1, 4, 8), run(2, 3, 2, 3, 8)))
    assert decide(policy, s) == expected


def test_no_idle_node_is_given_away_while_a_waiting_job_is_owed_it() -> None:
    # 2 idle, the waiting job needs 3: one node is taken from A, none given to B.
    s = snap(8, 2, running=(run(1, 5, 1, 5, 8), run(2, 1, 1, 1, 8)), pending=(wait(3, 3),))
    for policy in ("min", "avg", "pref"):
        assert decide(policy, s) == [Shrink(1, 1)], policy


def test_rigid_moldable_and_evolving_jobs_start_as_under_easy() -> None:
    s = snap(10, 10, pending=(wait(1, 1, 3, 3, kind=JobKind.MOLDABLE), wait(2, 2, 4, 4, kind=JobKind.EVOLVING)))
    for policy in ("min", "avg", "pref", "keeppref"):
        assert decide(policy, s) == [Start(1, 3), Start(2, 2)], policy


# ---- through the core --------------------------------------------------------------------


def test_keeppref_through_the_core_shrinks_only_down_to_the_preferred_size() -> None:
    core = Core([f"n{i}" for i in range(1, 7)], make_policy("keeppref", {"min_resize_interval": 0}))
    a = submit(core, JobSpec(name="a", command=["x"], nodes={"min": 1, "max": 6, "preferred": 2}, kind=M), 0.0)
    assert core.handle(PassDue(0.0)) == [Launch(a.job_id, ("n1", "n2"))]
    core.handle(Registered(0.0, a.job_id))
    grow = [x for x in core.handle(PassDue(1.0)) if isinstance(x, SendOrder)]
    assert [(o.kind, o.count) for o in grow] == [("grow", 4)]
    core.handle(GrowAnswered(1.0, a.job_id, grow[0].order_id, tuple(a.hosts)))
    r = submit(core, JobSpec(name="r", command=["x"], nodes=5), 2.0)
    # Needs 5 of 6; A may go down to 2, giving 4: not enough, so A keeps its 6.
    assert core.handle(PassDue(2.0)) == []
    core.handle(CancelRequested(2.5, r.job_id))
    submit(core, JobSpec(name="s", command=["x"], nodes=3), 3.0)
    (order,) = [x for x in core.handle(PassDue(3.0)) if isinstance(x, SendOrder)]
    assert (order.kind, order.count) == ("shrink", 3)


def _one_node_at_a_time(jobs: list[RunningView], free: int, priority: object, give: bool) -> dict[int, int]:
    """The balanced rule as the seed states it: move one node, re-rank, repeat."""
    size = {r.job_id: r.size for r in jobs}
    moved: dict[int, int] = {}
    for _ in range(free):
        if give:
            open_ = [r for r in jobs if size[r.job_id] < r.max_nodes]
            if not open_:
                break
            r = min(open_, key=lambda r: (priority(size[r.job_id], r), r.job_id))  # type: ignore[operator]
            size[r.job_id] += 1
        else:
            open_ = [r for r in jobs if size[r.job_id] > r.min_nodes]
            r = min(open_, key=lambda r: (-priority(size[r.job_id], r), r.job_id))  # type: ignore[operator]
            size[r.job_id] -= 1
        moved[r.job_id] = moved.get(r.job_id, 0) + 1
    return moved


balanced_jobs = st.lists(
    st.tuples(st.integers(1, 40), st.integers(0, 60), st.integers(1, 200)),  # (min, size above min, range)
    min_size=1,
    max_size=7,
)


@settings(max_examples=300, deadline=None)
@given(balanced_jobs, st.integers(1, 600), st.sampled_from(["avg", "malleable"]))
def test_balanced_giving_and_taking_match_moving_one_node_at_a_time(
    spec: list[tuple[int, int, int]], free: int, policy: str
) -> None:
    """Avg and minAgree move nodes in stretches and by levels; the result must be exactly
    the one-node-at-a-time rule's, ties to the lower job id included."""
    from elasticd.policies.malleable import MIN_AGREE
    from elasticd.policies.min_avg_pref import STRATEGIES
    from elasticd.policies.threestep import _give, _take

    s = MIN_AGREE if policy == "malleable" else STRATEGIES["avg"]
    jobs = [run(i + 1, lo + min(above, rng), lo, lo, lo + rng) for i, (lo, above, rng) in enumerate(spec)]
    takers = {r.job_id: r for r in jobs if r.size < r.max_nodes}
    assert _give(takers, free, s) == _one_node_at_a_time(list(takers.values()), free, s.priority, give=True)

    donors = {r.job_id: r for r in jobs if r.size > r.min_nodes}
    lack = min(free, sum(r.size - r.min_nodes for r in donors.values()))
    size = {j: r.size for j, r in donors.items()}
    heap = [(-s.priority(r.size, r), j) for j, r in donors.items()]
    heapq.heapify(heap)
    shrinks: dict[int, int] = {}
    _take(heap, donors, size, shrinks, lack, s)
    assert shrinks == _one_node_at_a_time(list(donors.values()), lack, s.priority, give=False)
