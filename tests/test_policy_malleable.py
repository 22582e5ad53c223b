"""Hand-computed decisions of the seed's Malleable ("minAgree") policy.

First its `decide` on hand-built snapshots (counts only, as the policy sees the cluster),
then the same rules through the real core, where orders are asynchronous: an order is sent,
answered, processes end, and only then are nodes free.
"""

from __future__ import annotations

import pytest

from core_support import submit
from elastic_protocol.jobspec import JobKind, JobSpec
from elasticd.core.actions import Action, Launch, LaunchJoining, Reclaim, SendOrder
from elasticd.core.engine import Core
from elasticd.core.events import (
    CancelRequested,
    Exited,
    GrowAnswered,
    HostsGone,
    OrderDeferred,
    OrderRefused,
    PassDue,
    Registered,
    ShrinkAnswered,
)
from elasticd.core.job import Job
from elasticd.policies import make_policy
from elasticd.policies.base import (
    Grow,
    PendingView,
    RunningView,
    Shrink,
    Snapshot,
    Start,
)
from elasticd.policies.malleable import MalleableMinAgree

M = JobKind.MALLEABLE
NOW = 100.0


def run_view(
    job_id: int,
    size: int,
    lo: int = 1,
    hi: int = 8,
    kind: JobKind = M,
    ready: bool = True,
    last_resize: float | None = None,
    ending: bool = False,
    resizing: bool = False,
    requested: int = 0,
    requested_at: float | None = None,
    shrinking: int = 0,
) -> RunningView:
    return RunningView(
        job_id=job_id,
        kind=kind,
        size=size,
        min_nodes=lo,
        max_nodes=hi,
        preferred=hi,
        start_time=0.0,
        time_limit=None,
        malleable_ready=ready,
        last_resize=last_resize,
        ending=ending,
        resizing=resizing,
        requested=requested,
        requested_at=requested_at,
        shrinking=shrinking,
    )


def wait_view(
    job_id: int, lo: int, hi: int | None = None, kind: JobKind = JobKind.RIGID, limit: float | None = None
) -> PendingView:
    hi = lo if hi is None else hi
    return PendingView(
        job_id=job_id, submit_time=float(job_id), kind=kind, min_nodes=lo, max_nodes=hi, preferred=hi,
        time_limit=limit,
    )


def snap(
    total: int,
    free: int,
    running: tuple[RunningView, ...] = (),
    pending: tuple[PendingView, ...] = (),
    incoming: int = 0,
) -> Snapshot:
    assert free + sum(r.size for r in running) <= total, "a snapshot the core could not produce"
    return Snapshot(NOW, total, free, pending, running, incoming)


def decide(s: Snapshot, interval: float = 10.0) -> list[object]:
    return list(MalleableMinAgree(min_resize_interval=interval).decide(s))


def test_policy_is_registered_under_the_name_malleable_with_its_resize_interval() -> None:
    p = make_policy("malleable", min_resize_interval=3.5)
    assert isinstance(p, MalleableMinAgree) and p.name == "malleable"
    assert p.min_resize_interval == 3.5
    assert make_policy("Malleable").min_resize_interval == 10.0  # type: ignore[attr-defined]


# ---- step 1: starting -----------------------------------------------------------------


def test_malleable_jobs_start_at_their_minimum_other_kinds_as_easy_starts_them() -> None:
    s = snap(
        10,
        10,
        pending=(
            wait_view(1, 2, 8, M),
            wait_view(2, 1, 3, JobKind.MOLDABLE),
            wait_view(3, 2),
            wait_view(4, 1, 4, JobKind.EVOLVING),
        ),
    )
    # Moldable takes as many as allowed, evolving its minimum; nothing is running to grow.
    assert decide(s) == [Start(1, 2), Start(2, 3), Start(3, 2), Start(4, 1)]


def test_a_just_started_malleable_job_is_not_grown_in_the_same_pass() -> None:
    s = snap(8, 8, pending=(wait_view(1, 2, 8, M),))
    assert decide(s) == [Start(1, 2)]


# ---- step 2: shrinking for waiting jobs ----------------------------------------------


def test_shrinks_level_the_widest_jobs_one_node_at_a_time() -> None:
    # A 5, B 3, C 2 (at its minimum); a rigid 4 waits: A 5->4->3, tie A/B -> A (lower id)
    # 3->2, then B 3->2.
    s = snap(
        10,
        0,
        running=(run_view(1, 5), run_view(2, 3), run_view(3, 2, lo=2)),
        pending=(wait_view(4, 4),),
    )
    assert decide(s) == [Shrink(1, 3), Shrink(2, 1)]


def test_shrinks_never_take_a_job_below_its_minimum() -> None:
    # A 4 (min 3), B 4 (min 1), need 3: A->3 (tie, lower id), then only B: 4->3->2.
    s = snap(8, 0, running=(run_view(1, 4, lo=3), run_view(2, 4)), pending=(wait_view(3, 3),))
    assert decide(s) == [Shrink(1, 1), Shrink(2, 2)]


def test_shrinks_take_only_what_the_waiting_job_lacks_beyond_idle_nodes() -> None:
    s = snap(7, 1, running=(run_view(1, 6),), pending=(wait_view(2, 3),))
    assert decide(s) == [Shrink(1, 2)]


def test_waiting_malleable_job_is_owed_only_its_minimum() -> None:
    s = snap(8, 0, running=(run_view(1, 8),), pending=(wait_view(2, 2, 6, M),))
    assert decide(s) == [Shrink(1, 2)]


def test_nodes_already_coming_back_are_counted_so_no_second_shrink_is_ordered() -> None:
    # 1 idle + 2 promised back (a shrink being reclaimed, or a job being ended) = 3.
    s = snap(8, 1, running=(run_view(1, 5), run_view(2, 2, resizing=True)), pending=(wait_view(3, 3),), incoming=2)
    assert decide(s) == []


def test_an_unanswered_shrink_counts_as_nodes_coming_back() -> None:
    # A was ordered to give 1 node back (not answered yet); with 1 idle, R (2) is covered.
    s = snap(
        6, 1, running=(run_view(1, 3, resizing=True, shrinking=1), run_view(2, 2)), pending=(wait_view(3, 2),),
        incoming=1,
    )
    assert decide(s) == []


def test_idle_nodes_owed_to_a_waiting_job_are_not_backfilled_away_while_its_shrink_is_in_flight() -> None:
    """H (2 nodes, head) is covered by 1 idle node plus the node A was ordered to give back.
    S (1 node, limit 10 min) may not be backfilled onto H's idle node: that would make H's
    start depend on yet another shrink (EASY: a backfilled job must not delay the head).
    S waits, and B is shrunk for S instead.

    FAILS today: step 1 is EASY, whose reservation for H (`easy.shadow_time`) counts only
    idle nodes and the nodes of jobs at their limits or being ended, not nodes promised back
    by shrinks or releases (`RunningView.leaving` / `shrinking`). With no limits on A and B,
    H's reservation is "never", so any job with a limit backfills past H, onto H's node;
    then B is shrunk for H, and H waits on B's answer too.
    """
    s = snap(
        6,
        1,
        running=(run_view(1, 3, resizing=True, shrinking=1), run_view(2, 2, hi=2)),
        pending=(wait_view(3, 2), wait_view(4, 1, limit=600.0)),
        incoming=1,
    )
    assert decide(s) == [Shrink(2, 1)]


def test_nodes_coming_back_that_are_too_few_are_topped_up_by_a_shrink() -> None:
    s = snap(8, 1, running=(run_view(1, 5), run_view(2, 2, resizing=True)), pending=(wait_view(3, 4),), incoming=2)
    assert decide(s) == [Shrink(1, 1)]


def test_waiting_jobs_are_served_in_queue_order_from_idle_and_incoming_nodes_first() -> None:
    # R1 (3) is covered by 1 idle + 2 incoming; R2 (2) needs a shrink of 2.
    s = snap(
        8,
        1,
        running=(run_view(1, 5), run_view(2, 2, resizing=True)),
        pending=(wait_view(3, 3), wait_view(4, 2)),
        incoming=2,
    )
    assert decide(s) == [Shrink(1, 2)]


def test_shrinks_for_two_waiting_jobs_add_up_and_keep_leveling() -> None:
    s = snap(10, 0, running=(run_view(1, 6), run_view(2, 4)), pending=(wait_view(3, 2), wait_view(4, 2)))
    # 6,4 -> 5,4 -> 4,4 -> 3,4 (tie: A) -> 3,3
    assert decide(s) == [Shrink(1, 3), Shrink(2, 1)]


def test_waiting_job_that_shrinking_cannot_satisfy_triggers_no_shrink() -> None:
    # 8 needed; A can give 6 (8 -> min 2): nothing is shrunk for nothing.
    s = snap(8, 0, running=(run_view(1, 8, lo=2),), pending=(wait_view(2, 8),))
    assert decide(s) == []


def test_unsatisfiable_waiting_job_does_not_block_idle_nodes_from_being_grown_into() -> None:
    s = snap(8, 1, running=(run_view(1, 7, lo=2),), pending=(wait_view(2, 8),))
    assert decide(s) == [Grow(1, 1)]


def test_a_later_smaller_waiting_job_is_served_when_the_first_cannot_be() -> None:
    s = snap(8, 0, running=(run_view(1, 8, lo=2),), pending=(wait_view(2, 8), wait_view(3, 2)))
    assert decide(s) == [Shrink(1, 2)]


# ---- step 3: growing into idle nodes ---------------------------------------------------


def test_idle_nodes_go_to_the_narrowest_malleable_jobs_one_at_a_time() -> None:
    # A 1, B 3, 4 idle: A 1->2->3, tie A/B -> A 3->4, then B 3->4.
    s = snap(10, 4, running=(run_view(1, 1), run_view(2, 3)))
    assert decide(s) == [Grow(1, 3), Grow(2, 1)]


def test_growth_stops_at_each_jobs_maximum() -> None:
    s = snap(12, 6, running=(run_view(1, 1, hi=2), run_view(2, 3, hi=5)))
    assert decide(s) == [Grow(1, 1), Grow(2, 2)]  # 3 idle nodes are left over


def test_no_idle_node_is_given_away_while_a_waiting_job_is_owed_nodes() -> None:
    # 2 idle, R needs 3: one node is taken from A, and B (narrow, registered) gets nothing.
    s = snap(8, 2, running=(run_view(1, 4), run_view(2, 1, hi=8)), pending=(wait_view(3, 3),))
    assert decide(s) == [Shrink(1, 1)]


def test_no_idle_node_is_given_away_while_incoming_nodes_are_owed_to_a_waiting_job() -> None:
    s = snap(8, 2, running=(run_view(1, 4), run_view(2, 1), run_view(4, 1, ending=True)), pending=(wait_view(3, 3),),
             incoming=1)
    assert decide(s) == []


def test_evolving_requests_are_granted_before_malleable_jobs_grow() -> None:
    s = snap(
        10,
        3,
        running=(
            run_view(1, 1, kind=JobKind.EVOLVING, hi=4, requested=2, requested_at=50.0),
            run_view(2, 1),
            run_view(3, 1, kind=JobKind.EVOLVING, hi=4),  # asks for nothing: not grown
        ),
    )
    assert decide(s) == [Grow(1, 2), Grow(2, 1)]


def test_evolving_requests_wait_while_a_waiting_job_is_owed_nodes() -> None:
    s = snap(
        8,
        2,
        running=(run_view(1, 1, kind=JobKind.EVOLVING, hi=4, requested=2, requested_at=50.0), run_view(2, 4)),
        pending=(wait_view(3, 3),),
    )
    assert decide(s) == [Shrink(2, 1)]


# ---- which jobs may be resized --------------------------------------------------------


@pytest.mark.parametrize(
    ("last_resize", "eligible"), [(None, True), (90.0, True), (80.0, True), (90.5, False), (99.9, False)]
)
def test_jobs_resized_within_the_minimum_interval_are_neither_shrunk_nor_grown(
    last_resize: float | None, eligible: bool
) -> None:
    shrink = snap(6, 0, running=(run_view(1, 6, last_resize=last_resize),), pending=(wait_view(2, 1),))
    grow = snap(6, 2, running=(run_view(1, 4, last_resize=last_resize),))
    assert decide(shrink, interval=10.0) == ([Shrink(1, 1)] if eligible else [])
    assert decide(grow, interval=10.0) == ([Grow(1, 2)] if eligible else [])


@pytest.mark.parametrize(
    "flags",
    [{"ready": False}, {"resizing": True}, {"ending": True}, {"kind": JobKind.RIGID}, {"kind": JobKind.MOLDABLE},
     {"kind": JobKind.EVOLVING}],
)
def test_unregistered_resizing_ending_or_non_malleable_jobs_are_neither_shrunk_nor_grown(
    flags: dict[str, object]
) -> None:
    shrink = snap(6, 0, running=(run_view(1, 6, **flags),), pending=(wait_view(2, 1),))  # type: ignore[arg-type]
    grow = snap(6, 2, running=(run_view(1, 4, **flags),))  # type: ignore[arg-type]
    assert decide(shrink) == []
    assert decide(grow) == []


def test_an_ineligible_wide_job_is_passed_over_for_a_narrower_eligible_one() -> None:
    s = snap(10, 0, running=(run_view(1, 6, ready=False), run_view(2, 4)), pending=(wait_view(3, 2),))
    assert decide(s) == [Shrink(2, 2)]


# ---- through the core ----------------------------------------------------------------


def malleable(lo: int, hi: int) -> JobSpec:
    return JobSpec(name="m", command=["true"], nodes={"min": lo, "max": hi}, kind=M)


def rigid(n: int) -> JobSpec:
    return JobSpec(name="r", command=["true"], nodes=n)


def cluster(n: int, interval: float = 10.0) -> Core:
    return Core([f"n{i}" for i in range(1, n + 1)], make_policy("malleable", min_resize_interval=interval))


def order_of(actions: list[Action]) -> SendOrder:
    (order,) = [a for a in actions if isinstance(a, SendOrder)]
    return order


def grown_to_max(core: Core, job: Job, now: float) -> None:
    core.handle(Registered(now, job.job_id))
    o = order_of(core.handle(PassDue(now)))
    assert o.kind == "grow"
    core.handle(GrowAnswered(now, job.job_id, o.order_id, tuple(job.hosts)))


def test_through_the_core_a_malleable_job_grows_shrinks_for_a_rigid_one_and_grows_back() -> None:
    core = cluster(8)
    a = submit(core, malleable(2, 8), 0.0)
    assert core.handle(PassDue(0.0)) == [Launch(a.job_id, ("n1", "n2"))]  # at its minimum
    assert core.handle(PassDue(0.5)) == []  # not registered yet: nothing to grow
    core.handle(Registered(1.0, a.job_id))
    actions = core.handle(PassDue(1.0))
    assert actions == [
        LaunchJoining(a.job_id, ("n3", "n4", "n5", "n6", "n7", "n8"), tuple(f"n{i}" for i in range(1, 9))),
        SendOrder(a.job_id, 1, "grow", 6, ("n3", "n4", "n5", "n6", "n7", "n8"), 30.0),
    ]
    core.handle(GrowAnswered(2.0, a.job_id, 1, tuple(a.hosts)))

    r = submit(core, rigid(3), 5.0)
    assert core.handle(PassDue(5.0)) == []  # A was resized at 2: not again before 12
    assert core.handle(PassDue(12.0)) == [SendOrder(a.job_id, 2, "shrink", 3, (), 30.0)]
    assert core.handle(ShrinkAnswered(13.0, a.job_id, 2, ("n8", "n2", "n5"))) == [Reclaim(a.job_id, ("n8", "n2", "n5"), 0.0)]
    assert core.handle(PassDue(13.0)) == []  # promised back: no second shrink, nothing to start yet
    core.handle(HostsGone(14.0, a.job_id, ("n8", "n2", "n5")))
    assert core.handle(PassDue(14.0)) == [Launch(r.job_id, ("n2", "n5", "n8"))]
    assert a.size == 5 and a.last_resize == 14.0

    core.handle(Exited(20.0, r.job_id, 0, 0))
    assert core.handle(PassDue(20.0)) == []  # 14 + 10 > 20
    assert order_of(core.handle(PassDue(24.0))) == SendOrder(a.job_id, 3, "grow", 3, ("n2", "n5", "n8"), 30.0)


def test_through_the_core_a_job_being_ended_is_counted_and_nothing_is_shrunk() -> None:
    core = cluster(4, interval=0.0)
    a = submit(core, malleable(1, 2), 0.0)
    x = submit(core, rigid(2), 0.0)
    core.handle(PassDue(0.0))
    grown_to_max(core, a, 0.0)
    r = submit(core, rigid(2), 1.0)
    core.handle(CancelRequested(1.0, x.job_id))
    assert core.handle(PassDue(1.0)) == []  # X's 2 nodes are on their way back
    core.handle(Exited(2.0, x.job_id, None, 15))
    assert core.handle(PassDue(2.0)) == [Launch(r.job_id, ("n2", "n3"))]


def test_through_the_core_a_refused_shrink_is_ordered_again_only_after_the_refusal_back_off() -> None:
    """An application that refuses is not asked again on every pass (Core.refuse_backoff)."""
    core = cluster(4, interval=10.0)
    a = submit(core, malleable(1, 4), 0.0)
    core.handle(PassDue(0.0))
    grown_to_max(core, a, 0.0)
    submit(core, rigid(1), 20.0)
    o = order_of(core.handle(PassDue(20.0)))
    core.handle(OrderRefused(21.0, a.job_id, o.order_id, "busy"))
    assert core.refuse_backoff == 10.0
    assert core.handle(PassDue(30.9)) == []
    assert order_of(core.handle(PassDue(31.0))).kind == "shrink"


def test_through_the_core_a_deferring_job_is_left_alone_until_its_deferral_ends() -> None:
    core = cluster(4, interval=0.0)
    a = submit(core, malleable(1, 4), 0.0)
    core.handle(PassDue(0.0))
    grown_to_max(core, a, 0.0)
    submit(core, rigid(1), 20.0)
    o = order_of(core.handle(PassDue(20.0)))
    core.handle(OrderDeferred(21.0, a.job_id, o.order_id, 30.0))
    assert core.handle(PassDue(50.9)) == []
    assert order_of(core.handle(PassDue(51.0))).kind == "shrink"


def test_through_the_core_no_second_shrink_is_ordered_while_the_first_is_unanswered() -> None:
    """Between `SendOrder(shrink)` and the application's `shrunk` the job is only marked
    resizing; the nodes it was ordered to give back must still count as coming back, or the
    next pass (any event: a submit, a registration, a tick) finds the waiting job short and
    shrinks another job for it, and the extra node is grown back afterwards (flapping).
    Regression: `Core.snapshot` once counted only hosts already leaving.
    """
    core = cluster(5, interval=0.0)
    a = submit(core, malleable(1, 3), 0.0)
    b = submit(core, malleable(1, 2), 0.0)
    core.handle(PassDue(0.0))
    core.handle(Registered(0.0, a.job_id))
    core.handle(Registered(0.0, b.job_id))
    for o in [x for x in core.handle(PassDue(0.0)) if isinstance(x, SendOrder)]:
        core.handle(GrowAnswered(0.0, o.job_id, o.order_id, tuple(core.job(o.job_id).hosts)))
    assert (a.size, b.size, core.nodes.free_count) == (3, 2, 0)

    submit(core, rigid(1), 1.0)
    assert core.handle(PassDue(1.0)) == [SendOrder(a.job_id, 3, "shrink", 1, (), 30.0)]
    # A has not answered yet; the waiting job is already covered by A's order.
    assert core.handle(PassDue(2.0)) == []


def test_through_the_core_idle_nodes_owed_to_a_waiting_job_are_not_given_away_during_its_shrink() -> None:
    """Same cause as above, worse effect when it regresses: while A's shrink is unanswered
    the waiting job would count as unsatisfiable, so no longer "owed", and the idle node it
    needs would be grown into B; when A's nodes come back the job is short again."""
    core = cluster(6, interval=0.0)
    a = submit(core, malleable(1, 4), 0.0)
    core.handle(PassDue(0.0))
    grown_to_max(core, a, 0.0)  # n1..n4
    b = submit(core, malleable(1, 3), 1.0)
    assert core.handle(PassDue(1.0)) == [Launch(b.job_id, ("n5",))]  # B not registered yet
    r = submit(core, rigid(3), 2.0)
    assert core.handle(PassDue(2.0)) == [SendOrder(a.job_id, 2, "shrink", 2, (), 30.0)]  # 1 idle + 2
    core.handle(Registered(3.0, b.job_id))
    assert core.handle(PassDue(3.0)) == []  # n6 is R's, not B's
    core.handle(ShrinkAnswered(4.0, a.job_id, 2, ("n3", "n4")))
    core.handle(HostsGone(5.0, a.job_id, ("n3", "n4")))
    assert core.handle(PassDue(5.0)) == [Launch(r.job_id, ("n3", "n4", "n6"))]


def test_through_the_core_a_backfilled_job_does_not_take_the_node_owed_to_a_job_whose_shrink_is_in_flight() -> None:
    """The core-level form of
    test_idle_nodes_owed_to_a_waiting_job_are_not_backfilled_away_while_its_shrink_is_in_flight
    (FAILS today): S is started on n6, the head H's idle node; B, shrunk for H instead,
    refuses, and H is left waiting behind S although A's shrink alone covered it."""
    core = cluster(6, interval=0.0)
    a = submit(core, malleable(1, 3), 0.0)
    b = submit(core, malleable(1, 2), 0.0)
    core.handle(PassDue(0.0))
    core.handle(Registered(0.0, a.job_id))
    core.handle(Registered(0.0, b.job_id))
    for o in [x for x in core.handle(PassDue(0.0)) if isinstance(x, SendOrder)]:
        core.handle(GrowAnswered(0.0, o.job_id, o.order_id, tuple(core.job(o.job_id).hosts)))
    assert (a.size, b.size, core.nodes.free_count) == (3, 2, 1)
    h = submit(core, rigid(2), 1.0)
    assert core.handle(PassDue(1.0)) == [SendOrder(a.job_id, 3, "shrink", 1, (), 30.0)]
    s = submit(core, JobSpec(name="s", command=["true"], nodes=1, time_limit=10), 2.0)
    actions = core.handle(PassDue(2.0))
    assert not [x for x in actions if isinstance(x, Launch)], f"{s.job_id} backfilled onto H's node"
    for o in [x for x in actions if isinstance(x, SendOrder)]:
        core.handle(OrderRefused(2.5, o.job_id, o.order_id, "busy"))
    core.handle(ShrinkAnswered(3.0, a.job_id, 3, ("n4",)))
    core.handle(HostsGone(4.0, a.job_id, ("n4",)))
    assert [x for x in core.handle(PassDue(4.0)) if isinstance(x, Launch)] == [Launch(h.job_id, ("n4", "n6"))]
