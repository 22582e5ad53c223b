"""The life of a resize order in the pure core, driven by hand with explicit `now` values.

A policy (or a user's `resize`) decides a Shrink or Grow; the core turns it into actions
(`SendOrder`, `LaunchJoining`, `Reclaim`) and the test plays both the application
(`answer_shrink`, `answer_grow`, `refuse_order`) and the driver (`hosts_gone`, `exited`,
`order_deadline_passed`, `order_undeliverable`). Nodes only come back to the pool when the
driver reports the job's processes gone from them.
"""

from __future__ import annotations

import copy

import pytest

from core_support import submit
from elastic_protocol.jobspec import JobKind, JobSpec
from elasticd.core.actions import (
    Action,
    ArmLimit,
    Launch,
    LaunchJoining,
    Reclaim,
    SendOrder,
    Terminate,
)
from elasticd.core.engine import Core
from elasticd.core.events import (
    CancelRequested,
    Cause,
    Exited,
    GrowAnswered,
    HostsGone,
    HostsReleased,
    JoinLaunchFailed,
    NodesRequested,
    OrderDeadline,
    OrderDeferred,
    OrderRefused,
    OrderUndeliverable,
    PassDue,
    Registered,
    ResizeRequested,
    ShrinkAnswered,
    Unregistered,
)
from elasticd.core.job import Job
from elasticd.core.states import JobState
from elasticd.errors import OrderRejected, PolicyError, ResizeRejected
from elasticd.policies import make_policy
from elasticd.policies.base import Decision, Grow, Shrink, Snapshot, Start

NODES = [f"n{i}" for i in range(1, 7)]  # n1 .. n6
DEADLINE = 30.0


class Scripted:
    """A policy that decides exactly what the test queued for the next pass, nothing else."""

    name = "scripted"
    replayable = False  # a pass consumes the script: conftest's rollback check does not run it twice

    def __init__(self) -> None:
        self.queued: list[Decision] = []

    def decide(self, snap: Snapshot) -> list[Decision]:
        out, self.queued = self.queued, []
        return out


def spec(name: str, nodes: int | tuple[int, int], kind: JobKind | None = None) -> JobSpec:
    n: int | dict[str, int] = nodes if isinstance(nodes, int) else {"min": nodes[0], "max": nodes[1]}
    return JobSpec(name=name, command=["true"], nodes=n, kind=kind)


def malleable(lo: int, hi: int) -> JobSpec:
    return spec("m", (lo, hi), JobKind.MALLEABLE)


def evolving(lo: int, hi: int) -> JobSpec:
    return spec("e", (lo, hi), JobKind.EVOLVING)


def cluster(nodes: list[str] = NODES) -> tuple[Core, Scripted]:
    policy = Scripted()
    return Core(nodes, policy, order_deadline=DEADLINE), policy


def decide(core: Core, policy: Scripted, now: float, *decisions: Decision) -> list[Action]:
    policy.queued = list(decisions)
    return core.handle(PassDue(now))


def run(core: Core, policy: Scripted, s: JobSpec, nodes: int, now: float = 0.0, register: bool = True) -> Job:
    """Submit a job, start it on `nodes` nodes and (by default) register its handler."""
    job = submit(core, s, now)
    assert decide(core, policy, now, Start(job.job_id, nodes)) == [Launch(job.job_id, tuple(job.hosts))]
    if register:
        core.handle(Registered(now, job.job_id))
    return job


def owned_by(core: Core, job_id: int) -> list[str]:
    return [n for n in core.nodes.names if core.nodes.owner[n] == job_id]


def only_order(actions: list[Action]) -> SendOrder:
    orders = [a for a in actions if isinstance(a, SendOrder)]
    assert len(orders) == 1, actions
    return orders[0]


def state_of(job: Job) -> tuple[object, ...]:
    """Everything an order answer could change, to show that a rejected one changed nothing."""
    return (
        job.state,
        list(job.hosts),
        set(job.leaving),
        copy.copy(job.order),
        job.last_resize,
        job.no_orders_until,
        len(job.events),
    )


def events(job: Job) -> list[str]:
    return [e.event for e in job.events]


# ---- which jobs a policy may order ----------------------------------------------------


def test_policy_shrink_of_a_registered_malleable_job_sends_a_shrink_order_and_job_turns_resizing() -> None:
    core, policy = cluster()
    job = run(core, policy, malleable(1, 6), 4, now=0.0)
    actions = decide(core, policy, 10.0, Shrink(job.job_id, 2))
    assert actions == [SendOrder(job.job_id, 1, "shrink", 2, (), DEADLINE)]
    assert job.state is JobState.RESIZING
    assert job.order is not None and (job.order.kind, job.order.count, job.order.deadline) == ("shrink", 2, 40.0)
    # Nothing is taken yet: the application chooses which hosts go.
    assert job.hosts == ["n1", "n2", "n3", "n4"] and job.leaving == set()
    assert core.nodes.free_count == 2
    assert events(job)[-1] == "shrink_ordered"


@pytest.mark.parametrize("what", ["shrink", "grow"])
def test_policy_order_to_an_unregistered_job_is_a_policy_error_and_changes_nothing(what: str) -> None:
    core, policy = cluster()
    job = run(core, policy, malleable(1, 6), 3, register=False)
    before = state_of(job)
    d = Shrink(job.job_id, 1) if what == "shrink" else Grow(job.job_id, 1)
    with pytest.raises(PolicyError, match="cannot take an order now"):
        decide(core, policy, 1.0, d)
    assert state_of(job) == before and core.nodes.free_count == 3


@pytest.mark.parametrize("kind", [JobKind.RIGID, JobKind.MOLDABLE])
@pytest.mark.parametrize("what", ["shrink", "grow"])
def test_policy_order_to_a_job_that_is_not_resizable_is_a_policy_error(kind: JobKind, what: str) -> None:
    core, policy = cluster()
    s = spec("r", 3, kind) if kind is JobKind.RIGID else spec("m", (1, 6), kind)
    job = run(core, policy, s, 3)  # even if its application registered a handler
    d = Shrink(job.job_id, 1) if what == "shrink" else Grow(job.job_id, 1)
    with pytest.raises(PolicyError, match="cannot take an order now"):
        decide(core, policy, 1.0, d)
    assert job.state is JobState.RUNNING and job.order is None and job.size == 3


def test_policy_order_to_a_pending_finished_or_unknown_job_is_a_policy_error() -> None:
    core, policy = cluster()
    done = run(core, policy, malleable(1, 6), 2)
    core.handle(Exited(5.0, done.job_id, 0, 0))
    pending = submit(core, malleable(1, 6), 6.0)
    for jid in (done.job_id, pending.job_id, 99):
        with pytest.raises(PolicyError, match="which is not running"):
            decide(core, policy, 7.0, Shrink(jid, 1))


def test_policy_order_to_a_job_with_an_open_order_deferring_being_ended_or_deregistered_is_refused() -> None:
    core, policy = cluster()
    busy = run(core, policy, malleable(1, 2), 2)
    decide(core, policy, 1.0, Shrink(busy.job_id, 1))
    deferring = run(core, policy, malleable(1, 2), 2)
    order = only_order(decide(core, policy, 1.0, Shrink(deferring.job_id, 1)))
    core.handle(OrderDeferred(2.0, deferring.job_id, order.order_id, 100.0))
    assert deferring.order is None and not deferring.leaving
    ending = run(core, policy, malleable(1, 2), 1, now=2.0)
    core.handle(CancelRequested(3.0, ending.job_id))
    gone = run(core, policy, malleable(1, 2), 1, now=3.0)
    core.handle(Unregistered(4.0, gone.job_id, final=True))
    for job in (busy, deferring, ending, gone):
        with pytest.raises(PolicyError, match="cannot take an order now"):
            decide(core, policy, 5.0, Grow(job.job_id, 1) if job.size < 2 else Shrink(job.job_id, 1))


@pytest.mark.parametrize(
    ("decision", "message"),
    [
        (Shrink(1, 0), "shrink of job 1 by 0 from 4 \\(min 2\\)"),
        (Shrink(1, 3), "shrink of job 1 by 3 from 4 \\(min 2\\)"),
        (Grow(1, 0), "grow of job 1 by 0 from 4 \\(max 6, 2 free\\)"),
        (Grow(1, 3), "grow of job 1 by 3 from 4 \\(max 6, 2 free\\)"),
    ],
)
def test_policy_shrink_below_minimum_or_grow_beyond_maximum_or_free_nodes_is_a_policy_error(
    decision: Decision, message: str
) -> None:
    core, policy = cluster()
    job = run(core, policy, malleable(2, 6), 4)
    with pytest.raises(PolicyError, match=message):
        decide(core, policy, 1.0, decision)
    assert job.state is JobState.RUNNING and job.order is None and core.nodes.free_count == 2


def test_policy_grow_beyond_the_jobs_maximum_is_a_policy_error_even_with_nodes_free() -> None:
    core, policy = cluster()
    job = run(core, policy, malleable(1, 3), 2)
    with pytest.raises(PolicyError, match="max 3"):
        decide(core, policy, 1.0, Grow(job.job_id, 2))


# ---- shrink ----------------------------------------------------------------------------


def test_answered_shrink_reclaims_exactly_the_named_hosts_and_frees_them_once_gone() -> None:
    core, policy = cluster()
    job = run(core, policy, malleable(1, 6), 4)
    order = only_order(decide(core, policy, 10.0, Shrink(job.job_id, 2)))
    assert core.handle(ShrinkAnswered(12.0, job.job_id, order.order_id, ("n3", "n1"))) == [
        Reclaim(job.job_id, ("n3", "n1"), 0.0)
    ]
    # Promised back, still owned until the driver reports the processes gone.
    assert job.state is JobState.RESIZING
    assert job.leaving == {"n1", "n3"} and job.hosts == ["n1", "n2", "n3", "n4"]
    assert owned_by(core, job.job_id) == ["n1", "n2", "n3", "n4"] and core.nodes.free_count == 2
    snap = core.snapshot(12.0)
    (view,) = snap.running
    assert (view.size, view.resizing, view.malleable_ready, snap.incoming_nodes) == (2, True, False, 2)
    assert job.last_resize is None

    core.handle(HostsGone(15.0, job.job_id, ("n3", "n1")))
    assert job.state is JobState.RUNNING and job.order is None
    assert job.hosts == ["n2", "n4"] and job.leaving == set()
    assert owned_by(core, job.job_id) == ["n2", "n4"]
    assert core.nodes.free_hosts() == ["n1", "n3", "n5", "n6"]
    assert job.last_resize == 15.0
    assert events(job)[-1] == "shrunk"
    assert core.snapshot(15.0).incoming_nodes == 0
    assert core.can_take_order(job, 15.0)


def test_shrink_completes_only_when_the_last_reclaimed_host_is_gone() -> None:
    core, policy = cluster()
    job = run(core, policy, malleable(1, 6), 4)
    order = only_order(decide(core, policy, 10.0, Shrink(job.job_id, 2)))
    core.handle(ShrinkAnswered(11.0, job.job_id, order.order_id, ("n1", "n2")))
    core.handle(HostsGone(12.0, job.job_id, ("n2",)))
    assert job.state is JobState.RESIZING and job.leaving == {"n1"}
    assert job.hosts == ["n1", "n3", "n4"] and core.nodes.owner["n2"] is None
    assert job.order is not None
    # A report naming hosts that are not leaving is ignored.
    core.handle(HostsGone(12.5, job.job_id, ("n3", "n5")))
    assert job.hosts == ["n1", "n3", "n4"] and job.state is JobState.RESIZING
    core.handle(HostsGone(13.0, job.job_id, ("n1",)))
    assert job.state is JobState.RUNNING and job.order is None and job.hosts == ["n3", "n4"]


@pytest.mark.parametrize(
    ("hosts", "order_delta", "code"),
    [
        (["n1", "n5"], 0, "bad_hosts"),  # n5 belongs to the other job
        (["n1", "zz"], 0, "bad_hosts"),  # no such node at all
        (["n6", "n1"], 0, "bad_hosts"),  # an idle node
        (["n1"], 0, "bad_hosts"),  # too few
        (["n1", "n2", "n3"], 0, "bad_hosts"),  # too many
        (["n1", "n1"], 0, "bad_hosts"),  # the same host twice
        ([], 0, "bad_hosts"),
        (["n1", "n2"], 1, "unknown_order"),  # right hosts, wrong order id
        (["n1", "n2"], -1, "unknown_order"),
    ],
)
def test_invalid_shrink_answer_is_rejected_with_a_code_and_changes_nothing(
    hosts: list[str], order_delta: int, code: str
) -> None:
    core, policy = cluster()
    job = run(core, policy, malleable(1, 6), 4)
    other = run(core, policy, spec("r", 1), 1)
    order = only_order(decide(core, policy, 10.0, Shrink(job.job_id, 2)))
    assert other.hosts == ["n5"]
    before = state_of(job)
    with pytest.raises(OrderRejected) as exc:
        core.handle(ShrinkAnswered(11.0, job.job_id, order.order_id + order_delta, tuple(hosts)))
    assert exc.value.code == code
    assert state_of(job) == before and core.nodes.free_count == 1
    # The order is still open: a valid answer is taken afterwards.
    assert core.handle(ShrinkAnswered(12.0, job.job_id, order.order_id, ("n1", "n2"))) == [
        Reclaim(job.job_id, ("n1", "n2"), 0.0)
    ]


def test_shrink_answered_as_grown_and_a_second_answer_are_unknown_orders() -> None:
    core, policy = cluster()
    job = run(core, policy, malleable(1, 6), 4)
    order = only_order(decide(core, policy, 10.0, Shrink(job.job_id, 1)))
    with pytest.raises(OrderRejected, match="is a shrink, not a grow") as exc:
        core.handle(GrowAnswered(11.0, job.job_id, order.order_id, tuple(job.hosts)))
    assert exc.value.code == "unknown_order"
    core.handle(ShrinkAnswered(11.0, job.job_id, order.order_id, ("n4",)))
    before = state_of(job)
    for answer in (
        lambda: core.handle(ShrinkAnswered(12.0, job.job_id, order.order_id, ("n3",))),
        lambda: core.handle(OrderRefused(12.0, job.job_id, order.order_id, "too late")),
        lambda: core.handle(OrderDeferred(12.0, job.job_id, order.order_id, 5.0)),
    ):
        with pytest.raises(OrderRejected) as exc:
            answer()
        assert exc.value.code == "unknown_order"
    assert state_of(job) == before


def test_answer_from_a_job_without_any_order_is_an_unknown_order() -> None:
    core, policy = cluster()
    job = run(core, policy, malleable(1, 6), 4)
    with pytest.raises(OrderRejected) as exc:
        core.handle(ShrinkAnswered(1.0, job.job_id, 1, ("n1",)))
    assert exc.value.code == "unknown_order"
    assert job.state is JobState.RUNNING and job.leaving == set()


def test_refused_shrink_drops_the_order_and_the_job_runs_on_unchanged() -> None:
    core, policy = cluster()
    job = run(core, policy, malleable(1, 6), 4)
    order = only_order(decide(core, policy, 10.0, Shrink(job.job_id, 2)))
    assert core.handle(OrderRefused(11.0, job.job_id, order.order_id, "in a phase that cannot be split")) == []
    assert job.state is JobState.RUNNING and job.order is None and job.size == 4
    assert job.last_resize is None
    assert job.events[-1].event == "refused"
    assert job.events[-1].detail == "order 1: in a phase that cannot be split"
    assert core.can_take_order(job, 11.0)  # a user may ask again at once
    assert not core.policy_may_order(job, 11.0)  # the policy backs off for refuse_backoff
    assert core.policy_may_order(job, 11.0 + core.refuse_backoff)



def test_orders_wait_until_the_last_of_resize_guard_deferral_and_refusal_backoff() -> None:
    # The instant a driver makes a pass at, though no event happens then (elasticd.daemon.timers).
    core, policy = cluster()
    job = run(core, policy, malleable(1, 6), 4)
    assert core.orders_wait_until(job) <= 0.0  # nothing holds it back
    order = only_order(decide(core, policy, 10.0, Shrink(job.job_id, 2)))
    core.handle(OrderDeferred(11.0, job.job_id, order.order_id, 5.0))
    assert core.orders_wait_until(job) == 16.0
    assert not core.policy_may_order(job, 15.9) and core.policy_may_order(job, 16.0)
    order = only_order(decide(core, policy, 16.0, Shrink(job.job_id, 2)))
    core.handle(OrderRefused(17.0, job.job_id, order.order_id, "busy"))
    assert core.orders_wait_until(job) == 17.0 + core.refuse_backoff
    assert core.policy_may_order(job, core.orders_wait_until(job))

# ---- what the policy sees of an order -------------------------------------------------


def test_snapshot_counts_an_unanswered_shrink_as_nodes_coming_back() -> None:
    core, policy = cluster()
    job = run(core, policy, malleable(1, 6), 4)
    decide(core, policy, 10.0, Shrink(job.job_id, 3))
    snap = core.snapshot(10.0)
    (view,) = snap.running
    # Not taken yet (the application chooses which hosts), but promised.
    assert (view.size, view.leaving, view.shrinking, view.resizing) == (4, 0, 3, True)
    assert snap.incoming_nodes == 3 and snap.free_nodes == 2
    core.handle(ShrinkAnswered(11.0, job.job_id, 1, ("n1", "n2", "n3")))
    snap = core.snapshot(11.0)
    (view,) = snap.running
    assert (view.size, view.leaving, view.shrinking) == (1, 3, 0)
    assert snap.incoming_nodes == 3  # counted once, whether answered or not


def test_snapshot_counts_a_job_being_ended_whole_and_an_open_grow_not_at_all() -> None:
    core, policy = cluster()
    ending = run(core, policy, malleable(1, 6), 2)
    growing = run(core, policy, malleable(1, 6), 1)
    decide(core, policy, 1.0, Shrink(ending.job_id, 1))
    core.handle(ShrinkAnswered(2.0, ending.job_id, 1, ("n2",)))
    core.handle(CancelRequested(3.0, ending.job_id))
    decide(core, policy, 3.0, Grow(growing.job_id, 2))
    snap = core.snapshot(3.0)
    by_id = {r.job_id: r for r in snap.running}
    assert by_id[ending.job_id].ending and by_id[ending.job_id].size == 1
    assert by_id[growing.job_id].size == 3 and by_id[growing.job_id].shrinking == 0
    assert snap.incoming_nodes == 2  # the ending job's two nodes, its leaving one included


def test_snapshot_view_turns_ready_when_a_deferral_runs_out_with_nothing_else_happening() -> None:
    """The core keeps each running job's policy view until the job changes; a deferral
    running out changes no job, so the view must expire on its own."""
    core, policy = cluster()
    job = run(core, policy, malleable(1, 6), 4)
    decide(core, policy, 10.0, Shrink(job.job_id, 1))
    core.handle(OrderDeferred(20.0, job.job_id, 1, 60.0))
    assert core.snapshot(20.0).running[0].malleable_ready is False
    assert core.snapshot(79.9).running[0].malleable_ready is False
    assert core.snapshot(80.0).running[0].malleable_ready is True
    assert core.snapshot(81.0).running[0].malleable_ready is True


def test_snapshot_view_follows_every_step_of_an_order_without_reading_the_job_in_between() -> None:
    core, policy = cluster()
    job = run(core, policy, malleable(1, 6), 2)
    jid = job.job_id

    def view() -> tuple[object, ...]:
        (r,) = core.snapshot(50.0).running
        return (r.size, r.malleable_ready, r.resizing, r.last_resize, r.leaving, r.shrinking)

    assert view() == (2, True, False, None, 0, 0)
    decide(core, policy, 1.0, Grow(jid, 2))
    assert view() == (4, False, True, None, 0, 0)
    core.handle(GrowAnswered(2.0, jid, 1, ("n1", "n2", "n3", "n4")))
    assert view() == (4, True, False, 2.0, 0, 0)
    decide(core, policy, 3.0, Shrink(jid, 1))
    assert view() == (4, False, True, 2.0, 0, 1)
    core.handle(OrderDeadline(33.0, jid, 2))
    assert view() == (3, False, True, 2.0, 1, 0)
    core.handle(HostsGone(34.0, jid, ("n4",)))
    assert view() == (3, True, False, 34.0, 0, 0)
    core.handle(Unregistered(35.0, jid))
    assert view() == (3, False, False, 34.0, 0, 0)


# ---- grow ------------------------------------------------------------------------------


def test_grow_allocates_the_lowest_free_nodes_at_once_and_starts_them_before_the_order() -> None:
    core, policy = cluster()
    job = run(core, policy, malleable(1, 6), 2)  # n1 n2
    run(core, policy, spec("r", 1), 1)  # n3
    actions = decide(core, policy, 10.0, Grow(job.job_id, 2))
    assert actions == [
        LaunchJoining(job.job_id, ("n4", "n5"), ("n1", "n2", "n4", "n5")),
        SendOrder(job.job_id, 1, "grow", 2, ("n4", "n5"), DEADLINE),
    ]
    assert job.state is JobState.RESIZING
    assert job.hosts == ["n1", "n2", "n4", "n5"] and owned_by(core, job.job_id) == job.hosts
    assert core.nodes.free_hosts() == ["n6"]
    assert job.order is not None and job.order.new_hosts == ("n4", "n5")


@pytest.mark.parametrize(
    "hosts",
    [
        ["n3", "n4"],  # only the new hosts
        ["n1", "n2"],  # only the old ones
        ["n1", "n2", "n3"],  # one missing
        ["n1", "n2", "n3", "n4", "n6"],  # one too many
        ["n1", "n2", "n3", "n4", "n4"],
        [],
    ],
)
def test_grown_answer_must_name_every_host_of_the_job(hosts: list[str]) -> None:
    core, policy = cluster()
    job = run(core, policy, malleable(1, 6), 2)
    order = only_order(decide(core, policy, 10.0, Grow(job.job_id, 2)))
    before = state_of(job)
    with pytest.raises(OrderRejected) as exc:
        core.handle(GrowAnswered(11.0, job.job_id, order.order_id, tuple(hosts)))
    assert exc.value.code == "bad_hosts"
    assert state_of(job) == before


def test_grown_answer_naming_all_hosts_in_any_order_completes_the_grow() -> None:
    core, policy = cluster()
    job = run(core, policy, malleable(1, 6), 2)
    order = only_order(decide(core, policy, 10.0, Grow(job.job_id, 2)))
    with pytest.raises(OrderRejected, match="is a grow, not a shrink") as exc:
        core.handle(ShrinkAnswered(11.0, job.job_id, order.order_id, ("n1", "n2")))
    assert exc.value.code == "unknown_order"
    with pytest.raises(OrderRejected) as exc:
        core.handle(GrowAnswered(11.0, job.job_id, order.order_id + 1, ("n1", "n2", "n3", "n4")))
    assert exc.value.code == "unknown_order"
    core.handle(GrowAnswered(12.0, job.job_id, order.order_id, ("n4", "n1", "n3", "n2")))
    assert job.state is JobState.RUNNING and job.order is None
    assert job.hosts == ["n1", "n2", "n3", "n4"] and job.last_resize == 12.0
    assert events(job)[-1] == "grown"
    # Settled: the deadline that follows does nothing.
    assert core.handle(OrderDeadline(40.0, job.job_id, order.order_id)) == []
    assert job.hosts == ["n1", "n2", "n3", "n4"]


def test_refused_grow_reclaims_the_new_hosts_which_return_to_the_pool_once_gone() -> None:
    core, policy = cluster()
    job = run(core, policy, malleable(1, 6), 2)
    order = only_order(decide(core, policy, 10.0, Grow(job.job_id, 3)))
    assert core.handle(OrderRefused(11.0, job.job_id, order.order_id, "busy")) == [
        Reclaim(job.job_id, ("n3", "n4", "n5"), 0.0)
    ]
    # The processes started there must be gone before the nodes are free.
    assert job.state is JobState.RESIZING and job.leaving == {"n3", "n4", "n5"}
    assert core.nodes.free_hosts() == ["n6"]
    snap = core.snapshot(11.0)
    assert (snap.running[0].size, snap.incoming_nodes) == (2, 3)
    with pytest.raises(OrderRejected):
        core.handle(GrowAnswered(11.5, job.job_id, order.order_id, tuple(job.hosts)))  # settled: too late
    core.handle(HostsGone(13.0, job.job_id, ("n3", "n4", "n5")))
    assert job.state is JobState.RUNNING and job.order is None
    assert job.hosts == ["n1", "n2"] and core.nodes.free_hosts() == ["n3", "n4", "n5", "n6"]
    assert job.last_resize is None  # nothing was resized
    assert "refused" in events(job) and "grown" not in events(job)


# ---- defer -----------------------------------------------------------------------------


def test_deferred_shrink_blocks_orders_until_now_plus_the_seconds_asked() -> None:
    core, policy = cluster()
    job = run(core, policy, malleable(1, 6), 4)
    order = only_order(decide(core, policy, 10.0, Shrink(job.job_id, 1)))
    assert core.handle(OrderDeferred(20.0, job.job_id, order.order_id, 60.0)) == []
    assert job.state is JobState.RUNNING and job.order is None and job.no_orders_until == 80.0
    assert job.events[-1].event == "deferred" and job.events[-1].detail == "order 1: 60 s"
    assert not core.can_take_order(job, 79.9)
    assert core.snapshot(79.9).running[0].malleable_ready is False
    with pytest.raises(PolicyError):
        decide(core, policy, 79.9, Shrink(job.job_id, 1))
    with pytest.raises(ResizeRejected):
        core.handle(ResizeRequested(79.9, job.job_id, 3))
    assert core.can_take_order(job, 80.0)
    assert core.snapshot(80.0).running[0].malleable_ready is True
    assert only_order(decide(core, policy, 80.0, Shrink(job.job_id, 1))).order_id == 2


def test_deferred_grow_gives_the_new_hosts_back_and_blocks_orders_until_then() -> None:
    core, policy = cluster()
    job = run(core, policy, malleable(1, 6), 2)
    order = only_order(decide(core, policy, 10.0, Grow(job.job_id, 2)))
    assert core.handle(OrderDeferred(11.0, job.job_id, order.order_id, 5.0)) == [
        Reclaim(job.job_id, ("n3", "n4"), 0.0)
    ]
    core.handle(HostsGone(12.0, job.job_id, ("n3", "n4")))
    assert job.state is JobState.RUNNING and job.hosts == ["n1", "n2"]
    assert not core.can_take_order(job, 15.9) and core.can_take_order(job, 16.0)


# ---- missed deadlines ------------------------------------------------------------------


def test_missed_shrink_deadline_makes_the_daemon_end_the_job_on_its_last_hosts() -> None:
    core, policy = cluster()
    job = run(core, policy, malleable(1, 6), 5)
    order = only_order(decide(core, policy, 10.0, Shrink(job.job_id, 2)))
    assert core.handle(OrderDeadline(40.0, job.job_id, order.order_id)) == [
        Reclaim(job.job_id, ("n4", "n5"), 0.0)
    ]
    assert job.state is JobState.RESIZING and job.leaving == {"n4", "n5"}
    assert job.order is not None and job.order.settled == "deadline_missed"
    assert events(job)[-1] == "deadline_missed"
    # A late answer is refused; a second deadline report does nothing.
    with pytest.raises(OrderRejected) as exc:
        core.handle(ShrinkAnswered(41.0, job.job_id, order.order_id, ("n1", "n2")))
    assert exc.value.code == "unknown_order"
    assert core.handle(OrderDeadline(41.0, job.job_id, order.order_id)) == []
    core.handle(HostsGone(42.0, job.job_id, ("n4", "n5")))
    assert job.state is JobState.RUNNING and job.order is None
    assert job.hosts == ["n1", "n2", "n3"] and job.last_resize == 42.0
    assert job.events[-1].event == "shrunk" and "deadline missed" in (job.events[-1].detail or "")
    assert core.nodes.free_hosts() == ["n4", "n5", "n6"]


def test_a_shrink_settled_at_its_deadline_is_the_daemons_doing_in_the_jobs_history() -> None:
    """README: the cause of a size change is who decided it, `daemon` for a missed deadline's
    choice of hosts (it was `user`, the order's asker, whose hosts were never chosen)."""
    core, policy = cluster()
    job = run(core, policy, malleable(1, 6), 4)
    order = only_order(core.handle(ResizeRequested(1.0, job.job_id, 2)))
    core.handle(OrderDeadline(31.0, job.job_id, order.order_id))
    core.handle(HostsGone(32.0, job.job_id, ("n3", "n4")))
    assert [(e.event, e.cause) for e in job.events[-3:]] == [
        ("shrink_ordered", "user"), ("deadline_missed", "daemon"), ("shrunk", "daemon")]
    assert job.events[-1].hosts == ("n1", "n2")


def test_missed_shrink_deadline_picks_the_last_hosts_in_the_jobs_list_not_by_name() -> None:
    core, policy = cluster()
    job = run(core, policy, malleable(1, 6), 2)  # n1 n2
    run(core, policy, spec("r", 2), 2)  # n3 n4
    g = only_order(decide(core, policy, 1.0, Grow(job.job_id, 2)))
    core.handle(GrowAnswered(2.0, job.job_id, g.order_id, tuple(job.hosts)))
    assert job.hosts == ["n1", "n2", "n5", "n6"]
    s = only_order(decide(core, policy, 3.0, Shrink(job.job_id, 3)))
    assert core.handle(OrderDeadline(33.0, job.job_id, s.order_id)) == [
        Reclaim(job.job_id, ("n2", "n5", "n6"), 0.0)
    ]


def test_missed_grow_deadline_reclaims_the_new_hosts() -> None:
    core, policy = cluster()
    job = run(core, policy, malleable(1, 6), 2)
    order = only_order(decide(core, policy, 10.0, Grow(job.job_id, 2)))
    assert core.handle(OrderDeadline(40.0, job.job_id, order.order_id)) == [
        Reclaim(job.job_id, ("n3", "n4"), 0.0)
    ]
    assert job.state is JobState.RESIZING and events(job)[-1] == "deadline_missed"
    with pytest.raises(OrderRejected):
        core.handle(GrowAnswered(41.0, job.job_id, order.order_id, tuple(job.hosts)))
    core.handle(HostsGone(42.0, job.job_id, ("n3", "n4")))
    assert job.state is JobState.RUNNING and job.hosts == ["n1", "n2"]
    assert core.nodes.free_count == 4 and job.last_resize is None


def test_deadline_of_a_stale_order_or_unknown_job_does_nothing() -> None:
    core, policy = cluster()
    job = run(core, policy, malleable(1, 6), 2)
    assert core.handle(OrderDeadline(40.0, job.job_id, 1)) == []  # no order at all
    assert core.handle(OrderDeadline(40.0, 77, 1)) == []
    order = only_order(decide(core, policy, 10.0, Shrink(job.job_id, 1)))
    assert core.handle(OrderDeadline(40.0, job.job_id, order.order_id + 5)) == []
    assert job.order is not None and job.order.settled is None


# ---- undeliverable orders --------------------------------------------------------------


def test_undeliverable_shrink_is_dropped_and_the_job_runs_on() -> None:
    core, policy = cluster()
    job = run(core, policy, malleable(1, 6), 4)
    order = only_order(decide(core, policy, 10.0, Shrink(job.job_id, 2)))
    assert core.handle(OrderUndeliverable(10.5, job.job_id, order.order_id)) == []
    assert job.state is JobState.RUNNING and job.order is None and job.size == 4
    assert events(job)[-1] == "order_failed"
    assert core.handle(OrderUndeliverable(11.0, job.job_id, order.order_id)) == []  # stale


def test_undeliverable_grow_reclaims_the_hosts_started_for_it() -> None:
    core, policy = cluster()
    job = run(core, policy, malleable(1, 6), 2)
    order = only_order(decide(core, policy, 10.0, Grow(job.job_id, 1)))
    assert core.handle(OrderUndeliverable(10.5, job.job_id, order.order_id)) == [Reclaim(job.job_id, ("n3",), 0.0)]
    core.handle(HostsGone(11.0, job.job_id, ("n3",)))
    assert job.state is JobState.RUNNING and job.hosts == ["n1", "n2"] and core.nodes.free_count == 4


# ---- a grow whose processes could not be started ------------------------------------------


def test_a_grow_whose_processes_fail_to_start_while_it_is_open_fails_and_its_hosts_come_back() -> None:
    core, policy = cluster()
    job = run(core, policy, malleable(1, 6), 2)
    order = only_order(decide(core, policy, 10.0, Grow(job.job_id, 1)))
    assert core.handle(JoinLaunchFailed(10.5, job.job_id, ("n3",), "command not found: x")) == [
        Reclaim(job.job_id, ("n3",), 0.0)
    ]
    assert events(job)[-1] == "order_failed"
    assert job.events[-1].detail == f"order {order.order_id}: the processes for the grow could not be started on n3: " \
                                    "command not found: x"
    with pytest.raises(OrderRejected):  # its answer comes too late
        core.handle(GrowAnswered(10.6, job.job_id, order.order_id, ("n1", "n2", "n3")))
    core.handle(HostsGone(11.0, job.job_id, ("n3",)))
    assert job.state is JobState.RUNNING and job.hosts == ["n1", "n2"] and core.nodes.free_count == 4
    assert "grown" not in events(job) and job.last_resize is None


def test_a_grow_the_application_took_before_its_processes_failed_to_start_gives_the_hosts_back() -> None:
    """`grown` may come before the launcher says the start failed: the job then holds hosts
    where nothing of it runs. It goes on at its old size; its limit moves back with it."""
    core, policy = cluster()
    s = JobSpec(name="m", command=["true"], nodes={"min": 1, "max": 6, "preferred": 4}, kind=JobKind.MALLEABLE,
                time_limit="10", model={"speedup": "linear"})
    job = submit(core, s, 0.0)
    assert decide(core, policy, 0.0, Start(job.job_id, 2)) == [  # 600 s at half the preferred speed
        Launch(job.job_id, ("n1", "n2")), ArmLimit(job.job_id, 1200.0)
    ]
    core.handle(Registered(0.0, job.job_id))
    order = only_order(decide(core, policy, 10.0, Grow(job.job_id, 2)))
    assert core.handle(GrowAnswered(12.0, job.job_id, order.order_id, ("n1", "n2", "n3", "n4"))) == [
        ArmLimit(job.job_id, 606.0)
    ]
    actions = core.handle(JoinLaunchFailed(15.0, job.job_id, ("n3", "n4"), "working_dir /w is not a directory"))
    assert actions == [Reclaim(job.job_id, ("n3", "n4"), 0.0)]
    last = job.events[-1]
    assert (last.event, last.cause) == ("grow_failed", Cause.FAULT)
    assert last.detail == ("the processes for the grow could not be started on n3 n4: working_dir /w is not a "
                           "directory; the job goes on without them")
    # Not free until the launcher says nothing of the job is left there; the policy sees the
    # job at its old size meanwhile, and orders it nothing.
    assert job.leaving == {"n3", "n4"} and core.nodes.free_count == 2
    view = core.snapshot(15.0).running[0]
    assert (view.size, view.resizing, view.malleable_ready) == (2, True, False)
    assert core.handle(HostsGone(20.0, job.job_id, ("n3", "n4"))) == [ArmLimit(job.job_id, 1192.0)]
    assert job.state is JobState.RUNNING and job.order is None and job.hosts == ["n1", "n2"]
    assert core.nodes.free_hosts() == ["n3", "n4", "n5", "n6"] and core.can_take_order(job, 20.0)
    last = job.events[-1]
    assert (last.event, last.cause, last.nodes, last.detail) == ("released", Cause.FAULT, 2, "n3 n4")
    assert [n for _t, n in job.size_history()] == [2, 4, 2]
    assert job.node_seconds == 2 * 10 + 4 * 10  # the hosts count until they are free
    # Reported again (a launcher's second word on the same start): nothing left to do.
    assert core.handle(JoinLaunchFailed(21.0, job.job_id, ("n3", "n4"), "again")) == []


@pytest.mark.parametrize("since", ["ended", "ending", "shrunk", "shrinking"])
def test_a_late_start_failure_after_the_job_gave_the_hosts_back_or_ended_changes_nothing(since: str) -> None:
    core, policy = cluster()
    job = run(core, policy, malleable(1, 6), 2)
    order = only_order(decide(core, policy, 10.0, Grow(job.job_id, 2)))
    core.handle(GrowAnswered(11.0, job.job_id, order.order_id, ("n1", "n2", "n3", "n4")))
    if since == "ended":
        core.handle(Exited(12.0, job.job_id, 0, 0))
    elif since == "ending":
        core.handle(CancelRequested(12.0, job.job_id))
    else:
        shrink = only_order(decide(core, policy, 12.0, Shrink(job.job_id, 2)))
        core.handle(ShrinkAnswered(13.0, job.job_id, shrink.order_id, ("n3", "n4")))
        if since == "shrunk":
            core.handle(HostsGone(14.0, job.job_id, ("n3", "n4")))
    before, free = state_of(job), core.nodes.free_count
    assert core.handle(JoinLaunchFailed(15.0, job.job_id, ("n3", "n4"), "gone")) == []
    assert state_of(job) == before and core.nodes.free_count == free


@pytest.mark.parametrize("kind", ["shrink", "grow"])
def test_a_late_start_failure_voids_an_order_opened_since_and_takes_the_hosts_back(kind: str) -> None:
    """The order was made for hosts the job no longer has (a shrink's count could take it
    below its minimum): void, as the application is told; a second grow's hosts go too."""
    core, policy = cluster()
    job = run(core, policy, malleable(1, 6), 2)
    order = only_order(decide(core, policy, 10.0, Grow(job.job_id, 2)))
    core.handle(GrowAnswered(11.0, job.job_id, order.order_id, ("n1", "n2", "n3", "n4")))
    later = only_order(decide(core, policy, 12.0, Shrink(job.job_id, 3) if kind == "shrink" else Grow(job.job_id, 1)))
    actions = core.handle(JoinLaunchFailed(13.0, job.job_id, ("n3", "n4"), "gone"))
    taken = ("n3", "n4") if kind == "shrink" else ("n3", "n4", "n5")
    assert actions == [Reclaim(job.job_id, taken, 0.0)]
    assert events(job)[-2:] == ["order_failed", "grow_failed"]
    assert (job.events[-2].detail or "").startswith(f"order {later.order_id}: void: ")
    assert job.order is None and job.state is JobState.RUNNING
    with pytest.raises(OrderRejected) as exc:
        core.handle(ShrinkAnswered(13.5, job.job_id, later.order_id, ("n2", "n3", "n4")) if kind == "shrink"
                    else GrowAnswered(13.5, job.job_id, later.order_id, ("n1", "n2", "n3", "n4", "n5")))
    assert exc.value.code == "unknown_order"
    core.handle(HostsGone(14.0, job.job_id, taken))
    assert job.hosts == ["n1", "n2"] and core.nodes.free_count == 4 and events(job)[-1] == "released"


def test_a_late_start_failure_ends_a_job_that_cannot_go_on_without_the_hosts() -> None:
    """Its other hosts were given back meanwhile: without the new ones it is below its minimum."""
    core, policy = cluster()
    job = run(core, policy, malleable(2, 6), 2)
    order = only_order(decide(core, policy, 10.0, Grow(job.job_id, 2)))
    core.handle(GrowAnswered(11.0, job.job_id, order.order_id, ("n1", "n2", "n3", "n4")))
    shrink = only_order(decide(core, policy, 12.0, Shrink(job.job_id, 2)))
    core.handle(ShrinkAnswered(13.0, job.job_id, shrink.order_id, ("n1", "n2")))
    core.handle(HostsGone(14.0, job.job_id, ("n1", "n2")))
    assert core.handle(JoinLaunchFailed(15.0, job.job_id, ("n3", "n4"), "gone")) == [
        Terminate(job.job_id, ("n3", "n4"), JobState.FAILED)
    ]
    core.handle(Exited(16.0, job.job_id, None, 15))
    assert job.state is JobState.FAILED and core.nodes.free_count == 6
    assert job.reason == "the processes for the grow could not be started on n3 n4: gone; without them it is below " \
                         "its minimum of 2"


# ---- the job ends while an order is open ----------------------------------------------


@pytest.mark.parametrize("stage", ["ordered", "answered", "grow_ordered", "grow_refused"])
def test_job_exiting_during_an_order_drops_it_and_frees_all_its_nodes(stage: str) -> None:
    core, policy = cluster()
    job = run(core, policy, malleable(1, 6), 3)
    if stage.startswith("grow"):
        order = only_order(decide(core, policy, 10.0, Grow(job.job_id, 2)))
        if stage == "grow_refused":
            core.handle(OrderRefused(11.0, job.job_id, order.order_id))
    else:
        order = only_order(decide(core, policy, 10.0, Shrink(job.job_id, 2)))
        if stage == "answered":
            core.handle(ShrinkAnswered(11.0, job.job_id, order.order_id, ("n1", "n2")))
    core.handle(Exited(12.0, job.job_id, 0, 0))
    assert job.state is JobState.COMPLETED and job.order is None and job.leaving == set()
    assert job.hosts == [] and core.nodes.free_count == 6 and core.active_ids == []
    assert "order_dropped" in events(job)
    # Whatever arrives late for the order is harmless.
    with pytest.raises(OrderRejected):
        core.handle(ShrinkAnswered(13.0, job.job_id, order.order_id, ("n1", "n2")))
    with pytest.raises(OrderRejected):
        core.handle(OrderRefused(13.0, job.job_id, order.order_id))
    assert core.handle(OrderDeadline(40.0, job.job_id, order.order_id)) == []
    assert core.handle(OrderUndeliverable(40.0, job.job_id, order.order_id)) == []
    core.handle(HostsGone(14.0, job.job_id, ("n1", "n2", "n4")))
    assert core.nodes.free_count == 6 and job.node_seconds == job.node_seconds_at(100.0)


def test_cancel_during_a_grow_terminates_the_job_on_all_its_hosts_new_ones_included() -> None:
    core, policy = cluster()
    job = run(core, policy, malleable(1, 6), 2)
    decide(core, policy, 10.0, Grow(job.job_id, 2))
    assert core.handle(CancelRequested(11.0, job.job_id)) == [
        Terminate(job.job_id, ("n1", "n2", "n3", "n4"), JobState.CANCELLED)
    ]
    assert not core.can_take_order(job, 11.0)
    snap = core.snapshot(11.0)
    assert snap.incoming_nodes == 4 and snap.running[0].ending
    core.handle(Exited(12.0, job.job_id, None, 15))
    assert job.state is JobState.CANCELLED and core.nodes.free_count == 6


# ---- registration ----------------------------------------------------------------------


def test_unregistering_pauses_orders_and_registering_again_resumes_them() -> None:
    core, policy = cluster()
    job = run(core, policy, malleable(1, 6), 2)
    core.handle(Unregistered(1.0, job.job_id))
    assert not core.can_take_order(job, 1.0) and events(job)[-1] == "unregistered"
    core.handle(Registered(2.0, job.job_id))
    assert core.can_take_order(job, 2.0)


def test_final_deregistration_blocks_every_later_registration() -> None:
    core, policy = cluster()
    job = run(core, policy, malleable(1, 6), 2)
    core.handle(Unregistered(1.0, job.job_id, final=True))
    assert events(job)[-1] == "deregistered"
    core.handle(Registered(2.0, job.job_id))
    assert job.deregistered and not job.malleable_ready
    assert not core.can_take_order(job, 2.0)
    assert core.snapshot(2.0).running[0].malleable_ready is False
    with pytest.raises(ResizeRejected, match="it deregistered for good"):
        core.handle(ResizeRequested(3.0, job.job_id, 3))


# ---- evolving jobs: request and release ----------------------------------------------


def test_only_evolving_jobs_may_request_or_release_nodes() -> None:
    core, policy = cluster()
    job = run(core, policy, malleable(1, 6), 2)
    with pytest.raises(OrderRejected, match="only evolving jobs request nodes") as exc:
        core.handle(NodesRequested(1.0, job.job_id, 1))
    assert exc.value.code == "bad_request"
    with pytest.raises(OrderRejected, match="only evolving jobs release nodes") as exc:
        core.handle(HostsReleased(1.0, job.job_id, ("n1",)))
    assert exc.value.code == "bad_request"
    assert job.requested == 0 and job.leaving == set()


def test_evolving_request_is_bounded_by_the_jobs_maximum() -> None:
    core, policy = cluster()
    job = run(core, policy, evolving(1, 4), 2)
    with pytest.raises(OrderRejected, match="may grow by at most 2") as exc:
        core.handle(NodesRequested(1.0, job.job_id, 3))
    assert exc.value.code == "bad_request" and job.requested == 0
    core.handle(NodesRequested(2.0, job.job_id, 2))
    assert (job.requested, job.requested_at) == (2, 2.0)
    view = core.snapshot(2.0).running[0]
    assert (view.requested, view.requested_at) == (2, 2.0)
    assert events(job)[-1] == "requested"


def test_an_evolving_job_that_deregistered_is_refused_a_request_no_order_could_grant() -> None:
    """An outside user's report: `request 1` after `deregister` was `ok`, and `requested: 1`
    stayed in the queue for ever, though no order is ever sent after a deregister."""
    core, policy = cluster()
    job = run(core, policy, evolving(1, 4), 2)
    core.handle(Unregistered(1.0, job.job_id, final=True))
    with pytest.raises(OrderRejected, match="deregistered") as exc:
        core.handle(NodesRequested(2.0, job.job_id, 1))
    assert exc.value.code == "deregistered"
    assert job.requested == 0 and job.requested_at is None and "requested" not in events(job)
    assert core.snapshot(2.0).running[0].requested == 0


def test_evolving_request_room_does_not_count_hosts_being_released() -> None:
    core, policy = cluster()
    job = run(core, policy, evolving(1, 4), 4)
    core.handle(HostsReleased(1.0, job.job_id, ("n4", "n3")))
    core.handle(NodesRequested(1.5, job.job_id, 2))  # 4 held, 2 of them leaving: room for 2
    assert job.requested == 2


def test_evolving_request_is_granted_by_the_policy_whole_when_enough_nodes_are_free() -> None:
    core = Core(NODES, make_policy("fcfs"), order_deadline=DEADLINE)
    job = submit(core, evolving(1, 6), 0.0)
    blocker = submit(core, spec("r", 3), 0.0)
    assert core.handle(PassDue(0.0)) == [Launch(job.job_id, ("n1",)), Launch(blocker.job_id, ("n2", "n3", "n4"))]
    core.handle(Registered(1.0, job.job_id))
    core.handle(NodesRequested(2.0, job.job_id, 3))
    assert core.handle(PassDue(2.0)) == []  # 2 free: a request is granted whole or not at all
    core.handle(Exited(5.0, blocker.job_id, 0, 0))
    actions = core.handle(PassDue(5.0))
    assert actions == [
        LaunchJoining(job.job_id, ("n2", "n3", "n4"), ("n1", "n2", "n3", "n4")),
        SendOrder(job.job_id, 1, "grow", 3, ("n2", "n3", "n4"), DEADLINE),
    ]
    assert job.requested == 0
    core.handle(GrowAnswered(6.0, job.job_id, 1, tuple(job.hosts)))
    assert job.state is JobState.RUNNING and job.size == 4
    assert core.handle(PassDue(7.0)) == []  # granted once


def test_evolving_release_reclaims_named_hosts_and_frees_them_once_gone() -> None:
    core, policy = cluster()
    job = run(core, policy, evolving(2, 6), 4)
    assert core.handle(HostsReleased(5.0, job.job_id, ("n2", "n4"))) == [Reclaim(job.job_id, ("n2", "n4"), 0.0)]
    assert job.state is JobState.RUNNING and job.leaving == {"n2", "n4"}
    assert not core.can_take_order(job, 5.0)
    assert core.snapshot(5.0).incoming_nodes == 2
    core.handle(HostsGone(6.0, job.job_id, ("n2", "n4")))
    assert job.hosts == ["n1", "n3"] and job.leaving == set() and job.last_resize == 6.0
    assert events(job)[-1] == "released"
    assert core.nodes.free_hosts() == ["n2", "n4", "n5", "n6"]


@pytest.mark.parametrize(
    ("hosts", "match"),
    [
        (["n1", "n2", "n3"], "may not go below 2 nodes"),
        (["n5"], "not hosts of job"),
        (["n1", "n1"], "name distinct hosts"),
        ([], "name distinct hosts"),
    ],
)
def test_evolving_release_that_is_invalid_is_rejected_and_changes_nothing(hosts: list[str], match: str) -> None:
    core, policy = cluster()
    job = run(core, policy, evolving(2, 6), 4)
    before = state_of(job)
    with pytest.raises(OrderRejected, match=match) as exc:
        core.handle(HostsReleased(5.0, job.job_id, tuple(hosts)))
    assert exc.value.code == "bad_hosts"
    assert state_of(job) == before


def test_evolving_release_counts_hosts_already_leaving_against_the_minimum() -> None:
    core, policy = cluster()
    job = run(core, policy, evolving(2, 6), 4)
    core.handle(HostsReleased(5.0, job.job_id, ("n4",)))
    with pytest.raises(OrderRejected, match="not hosts of job"):
        core.handle(HostsReleased(5.5, job.job_id, ("n4",)))  # already leaving
    with pytest.raises(OrderRejected, match="may not go below 2 nodes"):
        core.handle(HostsReleased(5.5, job.job_id, ("n2", "n3")))
    assert core.handle(HostsReleased(5.5, job.job_id, ("n3",))) == [Reclaim(job.job_id, ("n3",), 0.0)]


def test_evolving_release_while_an_order_is_open_is_refused_as_busy() -> None:
    core, policy = cluster()
    job = run(core, policy, evolving(1, 6), 3)
    decide(core, policy, 1.0, Shrink(job.job_id, 1))
    with pytest.raises(OrderRejected, match="answer it first") as exc:
        core.handle(HostsReleased(2.0, job.job_id, ("n3",)))
    assert exc.value.code == "busy" and job.leaving == set()


# ---- a user's resize -----------------------------------------------------------------


def test_resize_of_a_rigid_or_moldable_job_is_rejected_naming_its_kind() -> None:
    core, policy = cluster()
    rigid = run(core, policy, spec("r", 2), 2)
    moldable = run(core, policy, spec("m", (1, 4)), 2)
    with pytest.raises(ResizeRejected) as exc:
        core.handle(ResizeRequested(1.0, rigid.job_id, 3))
    assert str(exc.value) == "job 1 is rigid; only malleable and evolving jobs resize"
    assert exc.value.code == "resize_rejected"
    with pytest.raises(ResizeRejected, match="^job 2 is moldable; only malleable and evolving jobs resize$"):
        core.handle(ResizeRequested(1.0, moldable.job_id, 3))


def test_resize_of_a_job_that_is_not_running_is_rejected_naming_its_state() -> None:
    core, policy = cluster()
    pending = submit(core, malleable(1, 4), 0.0)
    with pytest.raises(ResizeRejected, match="^job 1 is PENDING, not running$"):
        core.handle(ResizeRequested(1.0, pending.job_id, 2))
    done = run(core, policy, malleable(1, 4), 2)
    core.handle(Exited(2.0, done.job_id, 0, 0))
    with pytest.raises(ResizeRejected, match="^job 2 is COMPLETED, not running$"):
        core.handle(ResizeRequested(3.0, done.job_id, 3))


def test_resize_of_an_unregistered_or_busy_job_says_why_it_cannot_take_an_order() -> None:
    core, policy = cluster()
    job = run(core, policy, malleable(1, 4), 2, register=False)
    with pytest.raises(ResizeRejected, match="^job 1 cannot take an order now: it has not registered a handler$"):
        core.handle(ResizeRequested(1.0, job.job_id, 3))
    core.handle(Registered(1.0, job.job_id))
    core.handle(ResizeRequested(2.0, job.job_id, 3))
    with pytest.raises(ResizeRejected, match="^job 1 cannot take an order now: it is busy with order 1$"):
        core.handle(ResizeRequested(3.0, job.job_id, 4))


@pytest.mark.parametrize("why", ["deferred", "being_ended"])
def test_resize_refused_for_a_job_without_an_order_does_not_blame_another_order(why: str) -> None:
    """`Core.resize` once said "it is busy with another order" whenever a registered job
    could not take an order, also when it had none (it deferred orders, or it is being
    ended): the user was told to wait for an order that did not exist."""
    core, policy = cluster()
    job = run(core, policy, malleable(1, 6), 2)
    if why == "deferred":
        decide(core, policy, 1.0, Shrink(job.job_id, 1))
        core.handle(OrderDeferred(2.0, job.job_id, 1, 60.0))
    else:
        core.handle(CancelRequested(2.0, job.job_id))
    assert job.order is None and job.malleable_ready
    with pytest.raises(ResizeRejected) as exc:
        core.handle(ResizeRequested(3.0, job.job_id, 3))
    assert "another order" not in str(exc.value), str(exc.value)


@pytest.mark.parametrize("nodes", [0, 1, 5, 7])
def test_resize_outside_the_jobs_range_is_rejected_naming_the_range(nodes: int) -> None:
    core, policy = cluster()
    job = run(core, policy, malleable(2, 4), 3)
    with pytest.raises(ResizeRejected, match=f"^job 1 runs on 2 to 4 nodes, not {nodes}$"):
        core.handle(ResizeRequested(1.0, job.job_id, nodes))
    assert job.order is None


def test_resize_beyond_the_free_nodes_is_rejected_naming_how_many_are_free() -> None:
    core, policy = cluster()
    job = run(core, policy, malleable(1, 6), 2)
    run(core, policy, spec("r", 3), 3)
    with pytest.raises(ResizeRejected, match="^only 1 nodes are free$"):
        core.handle(ResizeRequested(1.0, job.job_id, 4))
    assert job.order is None and core.nodes.free_count == 1


def test_resize_sends_a_shrink_or_grow_order_and_to_the_current_size_does_nothing() -> None:
    core, policy = cluster()
    job = run(core, policy, malleable(1, 6), 3)
    assert core.handle(ResizeRequested(1.0, job.job_id, 3)) == []
    assert job.order is None
    assert core.handle(ResizeRequested(2.0, job.job_id, 1)) == [SendOrder(job.job_id, 1, "shrink", 2, (), DEADLINE)]
    core.handle(OrderRefused(3.0, job.job_id, 1))
    assert core.handle(ResizeRequested(4.0, job.job_id, 5)) == [
        LaunchJoining(job.job_id, ("n4", "n5"), ("n1", "n2", "n3", "n4", "n5")),
        SendOrder(job.job_id, 2, "grow", 2, ("n4", "n5"), DEADLINE),
    ]


def test_resize_of_an_evolving_job_is_allowed_and_a_grow_consumes_its_request() -> None:
    core, policy = cluster()
    job = run(core, policy, evolving(1, 6), 2)
    core.handle(NodesRequested(1.0, job.job_id, 3))
    core.handle(ResizeRequested(2.0, job.job_id, 4))
    assert job.requested == 1


# ---- accounting ----------------------------------------------------------------------


def test_node_seconds_count_each_size_for_exactly_as_long_as_the_nodes_are_held() -> None:
    core, policy = cluster()
    job = run(core, policy, malleable(1, 6), 2, now=10.0)
    decide(core, policy, 20.0, Grow(job.job_id, 2))  # held from the order on
    core.handle(GrowAnswered(25.0, job.job_id, 1, tuple(job.hosts)))
    assert job.node_seconds_at(30.0) == 2 * 10 + 4 * 10
    decide(core, policy, 40.0, Shrink(job.job_id, 3))
    core.handle(ShrinkAnswered(45.0, job.job_id, 2, ("n1", "n2", "n3")))  # still held until gone
    core.handle(HostsGone(50.0, job.job_id, ("n1", "n3")))
    core.handle(HostsGone(55.0, job.job_id, ("n2",)))
    assert job.size == 1
    core.handle(Exited(100.0, job.job_id, 0, 0))
    assert job.node_seconds == 2 * (20 - 10) + 4 * (50 - 20) + 2 * (55 - 50) + 1 * (100 - 55)
    assert job.node_seconds_at(500.0) == job.node_seconds


def test_node_seconds_charge_the_hosts_of_a_refused_grow_until_they_are_gone() -> None:
    core, policy = cluster()
    job = run(core, policy, malleable(1, 6), 2, now=10.0)
    decide(core, policy, 20.0, Grow(job.job_id, 2))
    core.handle(OrderRefused(30.0, job.job_id, 1))
    core.handle(HostsGone(35.0, job.job_id, ("n3", "n4")))
    core.handle(Exited(50.0, job.job_id, 0, 0))
    assert job.node_seconds == 2 * 10 + 4 * 15 + 2 * 15


def test_node_seconds_of_a_job_that_exits_while_hosts_are_leaving_count_them_until_the_exit() -> None:
    core, policy = cluster()
    job = run(core, policy, malleable(1, 6), 4, now=0.0)
    decide(core, policy, 10.0, Shrink(job.job_id, 2))
    core.handle(ShrinkAnswered(11.0, job.job_id, 1, ("n1", "n2")))
    core.handle(Exited(20.0, job.job_id, 0, 0))
    core.handle(HostsGone(25.0, job.job_id, ("n1", "n2")))  # late: the job's nodes are all free
    assert job.node_seconds == 4 * 20
