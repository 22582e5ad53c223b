"""Property tests for resize orders: random job streams through the real core and policies,
with a simulated application that answers orders at random.

A discrete-event driver plays both the daemon and the applications: it submits jobs, starts
what the core launches, registers handlers, answers orders (shrunk with random valid hosts,
grown, refuse, defer, a lost connection, or silence until the deadline), reclaims hosts
after random delays, asks for and releases nodes for evolving jobs, sends user resizes,
and reports exits and cancels, in time order, scheduling after every event. After every
step the books must balance; at the end every job has ended, every node is free, and each
job's node-seconds equal the integral of the nodes it held over time.
"""

from __future__ import annotations

import heapq
import random
from dataclasses import dataclass, field, replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from core_support import check_invariants, promised_back, submit
from elastic_protocol.jobspec import JobKind, JobSpec
from elasticd.core.actions import (
    Action,
    Launch,
    LaunchJoining,
    Reclaim,
    SendOrder,
    Terminate,
)
from elasticd.core.engine import RESIZABLE, Core
from elasticd.core.events import (
    CancelRequested,
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
from elasticd.core.states import JobState
from elasticd.errors import OrderRejected, ResizeRejected
from elasticd.policies import make_policy

# Pure CPU (hypothesis): on a loaded 2-core machine (4 busy loops and the suite on -n 2) two of
# these took 115 s against the default 120; 13-31 s otherwise. 300 s is still a hang guard.
pytestmark = pytest.mark.timeout(300)

MAX_NODES = 8
ORDER_DEADLINE = 10
TICK = 2
ANSWERS = ("shrunk_or_grown",) * 6 + ("refuse", "defer", "silent", "lost")


@dataclass(frozen=True)
class Plan:
    submit: int
    kind: JobKind
    lo: int
    hi: int
    runtime: int
    cancel_after: int | None  # seconds after submit
    register_after: int | None  # seconds after start; None: never registers a handler
    deregister_after: int | None  # seconds after registering, final

    def spec(self, name: str) -> JobSpec:
        nodes: int | dict[str, int] = self.lo if self.kind is JobKind.RIGID else {"min": self.lo, "max": self.hi}
        return JobSpec(name=name, command=["true"], nodes=nodes, kind=self.kind)


@dataclass(frozen=True)
class Workload:
    nodes: int
    jobs: tuple[Plan, ...]


@st.composite
def plans(draw: st.DrawFn, n_nodes: int) -> Plan:
    kind = draw(st.sampled_from([JobKind.MALLEABLE, JobKind.MALLEABLE, JobKind.MALLEABLE, JobKind.EVOLVING,
                                 JobKind.EVOLVING, JobKind.RIGID, JobKind.MOLDABLE]))
    if kind is JobKind.RIGID:
        lo = hi = draw(st.integers(1, n_nodes))
    else:
        # Mostly narrow minimums (room to shrink) and wide maximums (room to grow); a
        # maximum may exceed the cluster.
        lo = draw(st.one_of(st.integers(1, min(2, n_nodes)), st.integers(1, n_nodes)))
        hi = draw(st.one_of(st.integers(max(lo, n_nodes - 1), n_nodes + 2), st.integers(lo, n_nodes + 2)))
    return Plan(
        # Two waves, so that malleable jobs grow into an idle cluster and are shrunk later.
        submit=draw(st.one_of(st.integers(0, 20), st.integers(50, 120))),
        kind=kind,
        lo=lo,
        hi=hi,
        runtime=draw(st.one_of(st.integers(20, 150), st.integers(1, 150))),
        cancel_after=draw(st.one_of(st.none(), st.none(), st.none(), st.integers(0, 120))),
        register_after=draw(st.one_of(st.integers(0, 3), st.integers(0, 3), st.integers(0, 10), st.none())),
        deregister_after=draw(st.one_of(st.none(), st.none(), st.none(), st.none(), st.none(), st.integers(0, 80))),
    )


@st.composite
def workloads(draw: st.DrawFn) -> Workload:
    n = draw(st.one_of(st.integers(2, MAX_NODES), st.integers(4, MAX_NODES)))
    jobs = draw(st.lists(plans(n), min_size=2, max_size=10))
    return Workload(n, tuple(sorted(jobs, key=lambda p: p.submit)))


@st.composite
def contested_workloads(draw: st.DrawFn) -> Workload:
    """Several registered malleable jobs that share the cluster at first, then later
    arrivals that need some of their nodes: the situation shrinks are made for."""
    n = draw(st.integers(4, MAX_NODES))
    first = draw(st.lists(
        st.builds(
            Plan,
            submit=st.integers(0, 5),
            kind=st.just(JobKind.MALLEABLE),
            lo=st.just(1),
            hi=st.integers(2, max(2, n // 2)),
            runtime=st.integers(60, 150),
            cancel_after=st.none(),
            register_after=st.integers(0, 2),
            deregister_after=st.none(),
        ),
        min_size=2, max_size=4,
    ))
    later = draw(st.lists(plans(n), min_size=1, max_size=4))
    later = [p if p.submit >= 30 else replace(p, submit=p.submit + 30) for p in later]
    return Workload(n, tuple(sorted(first + later, key=lambda p: p.submit)))


# ---- invariants ------------------------------------------------------------------------


# ---- the driver ------------------------------------------------------------------------


@dataclass
class OrderSim:
    workload: Workload
    policy: str
    rnd: random.Random
    user_resizes: bool = False
    check_shrink_bound: bool = False
    join_failures: bool = False  # some grows' processes fail to start, before or after `grown`
    core: Core = field(init=False)
    plans: dict[int, Plan] = field(default_factory=dict)
    integral: dict[int, float] = field(default_factory=dict)  # job id -> node-seconds seen
    sizes: dict[int, int] = field(default_factory=dict)  # job id -> hosts held after the last step
    orders_sent: int = 0
    order_kinds: dict[int, str] = field(default_factory=dict)
    rejections: int = 0
    _last_t: float = 0.0
    _events: list[tuple[float, int, str, tuple[object, ...]]] = field(default_factory=list)
    _seq: int = 0
    _tick_at: float | None = None
    # Join failures on their way, per job: (when reported, hosts). A launcher reports a grow's
    # failed start before it reports those hosts gone (a reclaim waits for the launch in
    # flight: base.StartsInFlight), so no host comes back, and goes to another grow, first.
    _joins_failing: dict[int, list[tuple[float, frozenset[str]]]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.core = Core(
            [f"n{i:02d}" for i in range(self.workload.nodes)],
            make_policy(self.policy, min_resize_interval=float(self.rnd.choice([0, 3, 10]))),
            order_deadline=float(ORDER_DEADLINE),
        )

    def push(self, t: float, kind: str, *args: object) -> None:
        heapq.heappush(self._events, (t, self._seq, kind, args))
        self._seq += 1

    # ---- main loop ---------------------------------------------------------------------
    def run(self) -> None:
        for i, plan in enumerate(self.workload.jobs):
            self.push(plan.submit, "submit", i)
        steps = 0
        while self._events:
            steps += 1
            assert steps < 20_000, "the simulation does not terminate"
            t, _, kind, args = heapq.heappop(self._events)
            self.advance(t)
            getattr(self, f"on_{kind}")(t, *args)
            check_invariants(self.core, t)
            self.schedule(t)
            check_invariants(self.core, t)
            self.record_sizes(t)
            if self._tick_at is None and (self.core.pending_ids or self.core.active_ids):
                # The daemon's periodic pass: resize intervals and deferrals run out.
                self._tick_at = t + TICK
                self.push(t + TICK, "tick")
        self.check_all_ended()

    def schedule(self, t: float) -> None:
        core = self.core
        free, promised = core.nodes.free_count, promised_back(core)
        actions = core.handle(PassDue(t))
        if self.check_shrink_bound:
            started = sum(len(a.hosts) for a in actions if isinstance(a, Launch))
            shrunk = sum(a.count for a in actions if isinstance(a, SendOrder) and a.kind == "shrink")
            lacking = sum(core.jobs[j].bounds[0] for j in core.pending_ids) - (free - started) - promised
            assert shrunk <= max(0, lacking), (
                f"at {t}: shrinks of {shrunk} nodes ordered, but the waiting jobs lack only {max(0, lacking)} "
                f"({free - started} idle, {promised} already promised back)"
            )
        self.execute(t, actions)

    def advance(self, t: float) -> None:
        for jid, size in self.sizes.items():
            self.integral[jid] = self.integral.get(jid, 0.0) + size * (t - self._last_t)
        self._last_t = t

    def record_sizes(self, t: float) -> None:
        self.sizes = {jid: job.size for jid, job in self.core.jobs.items() if job.size}
        for jid in self.core.active_ids:
            assert self.core.jobs[jid].node_seconds_at(t) == self.integral.get(jid, 0.0)

    # ---- carrying out the core's actions ------------------------------------------------------
    def execute(self, t: float, actions: list[Action]) -> None:
        core = self.core
        for a in actions:
            job = core.jobs[a.job_id]
            plan = self.plans[a.job_id]
            if isinstance(a, Launch):
                assert a.hosts == tuple(job.hosts) and job.start_time == t
                if self.policy == "malleable" and plan.kind is JobKind.MALLEABLE:
                    assert len(a.hosts) == plan.lo, "malleable jobs start at their minimum"
                self.push(t + plan.runtime, "exit", a.job_id)
                if plan.register_after is not None:
                    self.push(t + plan.register_after, "register", a.job_id, True)
                if plan.kind is JobKind.EVOLVING:
                    for _ in range(self.rnd.randint(1, 6)):
                        self.push(t + self.rnd.randint(0, plan.runtime), "evolve", a.job_id)
                if self.user_resizes:
                    for _ in range(self.rnd.randint(1, 5)):
                        # Mostly a size within the job's range and the cluster, sometimes not.
                        nodes = self.rnd.choice([self.rnd.randint(plan.lo, min(plan.hi, self.workload.nodes))] * 3
                                                + [self.rnd.randint(0, plan.hi + 1)])
                        self.push(t + self.rnd.randint(0, plan.runtime), "resize", a.job_id, nodes)
            elif isinstance(a, Terminate):
                assert a.hosts == tuple(job.hosts) and job.ending_as is a.ending_as
                self.push(t + self.rnd.randint(0, 5), "terminated", a.job_id)
            elif isinstance(a, LaunchJoining):
                assert set(a.hosts) <= set(job.hosts) and a.all_hosts == tuple(job.hosts)
                if self.join_failures and self.rnd.random() < 0.4:
                    when = t + self.rnd.randint(0, ORDER_DEADLINE + 5)
                    self._joins_failing.setdefault(a.job_id, []).append((when, frozenset(a.hosts)))
                    self.push(when, "join_failed", a.job_id, a.hosts)
            elif isinstance(a, SendOrder):
                order = job.order
                assert order is not None and order.order_id == a.order_id and order.kind == a.kind
                assert (order.count, order.new_hosts, a.deadline_s) == (a.count, a.hosts, ORDER_DEADLINE)
                lo, hi, _ = job.bounds
                if a.kind == "shrink":
                    assert 1 <= a.count <= job.size - lo and a.hosts == ()
                else:
                    assert len(a.hosts) == a.count and job.size <= hi
                self.orders_sent += 1
                self.order_kinds[a.order_id] = a.kind
                self.push(t + ORDER_DEADLINE, "deadline", a.job_id, a.order_id)
                answer = self.rnd.choice(ANSWERS)
                if answer != "silent":
                    # Mostly at once, sometimes late, now and then after the deadline.
                    late = self.rnd.random() < 0.4
                    delay = self.rnd.randint(1, ORDER_DEADLINE + 3) if late else self.rnd.randint(1, 2)
                    self.push(t + delay, "answer", a.job_id, a.order_id, answer)
            elif isinstance(a, Reclaim):
                assert a.hosts and set(a.hosts) <= job.leaving
                hosts = list(a.hosts)
                self.rnd.shuffle(hosts)
                cut = self.rnd.randint(0, len(hosts))  # sometimes reported gone in two parts
                for part in (hosts[:cut], hosts[cut:]):
                    if part:
                        after = max((w for w, failing in self._joins_failing.get(a.job_id, ())
                                     if not failing.isdisjoint(part)), default=t)
                        self.push(max(t, after) + self.rnd.randint(0, 8), "gone", a.job_id, tuple(part))
            else:  # pragma: no cover
                raise TypeError(f"unexpected action {a!r}")

    # ---- events ---------------------------------------------------------------------------
    def on_submit(self, t: float, i: int) -> None:
        plan = self.workload.jobs[i]
        jid = submit(self.core, plan.spec(f"j{i}"), t).job_id
        self.plans[jid] = plan
        if plan.cancel_after is not None:
            self.push(t + plan.cancel_after, "cancel", jid)

    def on_tick(self, t: float) -> None:
        self._tick_at = None

    def on_cancel(self, t: float, jid: int) -> None:
        self.execute(t, self.core.handle(CancelRequested(t, jid)))

    def on_exit(self, t: float, jid: int) -> None:
        job = self.core.jobs[jid]
        if job.state.holds_nodes:  # else stale: it already ended
            self.exited(t, jid, 0, None)

    def on_terminated(self, t: float, jid: int) -> None:
        if self.core.jobs[jid].state.holds_nodes:
            self.exited(t, jid, None, 15)

    def exited(self, t: float, jid: int, code: int | None, sig: int | None) -> None:
        core = self.core
        free_before, size = core.nodes.free_count, core.jobs[jid].size
        core.handle(Exited(t, jid, code, sig))
        assert core.nodes.free_count == free_before + size

    def on_register(self, t: float, jid: int, registered: bool) -> None:
        job = self.core.jobs[jid]
        if not job.state.holds_nodes:
            return
        self.core.handle(Registered(t, jid) if registered else Unregistered(t, jid))
        assert job.malleable_ready == (registered and not job.deregistered)
        plan = self.plans[jid]
        if registered and plan.deregister_after is not None and not job.deregistered:
            self.push(t + plan.deregister_after, "deregister", jid)

    def on_deregister(self, t: float, jid: int) -> None:
        if self.core.jobs[jid].state.holds_nodes:
            self.core.handle(Unregistered(t, jid, final=True))
            assert not self.core.jobs[jid].malleable_ready

    def on_gone(self, t: float, jid: int, hosts: tuple[str, ...]) -> None:
        core = self.core
        job = core.jobs[jid]
        if not job.state.holds_nodes:
            free = core.nodes.free_count
            core.handle(HostsGone(t, jid, tuple(hosts)))
            assert core.nodes.free_count == free, "a late report frees nothing"
            return
        mine = [h for h in hosts if h in job.leaving]
        size, free = job.size, core.nodes.free_count
        core.handle(HostsGone(t, jid, tuple(hosts)))
        assert job.size == size - len(mine) and core.nodes.free_count == free + len(mine)
        assert all(core.nodes.owner[h] is None for h in mine)

    def on_join_failed(self, t: float, jid: int, hosts: tuple[str, ...]) -> None:
        """The launcher could not start a grow's processes: the hosts the job still holds for
        it (not given back, not being reclaimed) are taken back, whether the grow is still
        open or was answered; a job that ended or is being ended is left alone."""
        failing = self._joins_failing[jid]
        failing.remove(next(f for f in failing if f[0] == t and f[1] == frozenset(hosts)))
        core = self.core
        job = core.jobs[jid]
        held = [h for h in job.hosts if h in hosts and h not in job.leaving]
        ending = not job.state.holds_nodes or job.ending_as is not None
        actions = core.handle(JoinLaunchFailed(t, jid, hosts, "cannot start"))
        if ending or not held:
            assert actions == []
        else:
            assert len(actions) == 1 and isinstance(actions[0], (Reclaim, Terminate)), actions
            if isinstance(actions[0], Reclaim):
                assert set(held) <= set(actions[0].hosts), (held, actions)
        self.execute(t, actions)

    def on_deadline(self, t: float, jid: int, order_id: int) -> None:
        job = self.core.jobs[jid]
        was_open = job.order is not None and job.order.order_id == order_id and job.order.settled is None
        kind = job.order.kind if was_open and job.order is not None else None
        keep = [h for h in job.hosts if h not in job.leaving]
        new_hosts = job.order.new_hosts if was_open and job.order is not None else ()
        actions = self.core.handle(OrderDeadline(t, jid, order_id))
        if not was_open:
            assert actions == []
        elif kind == "shrink":
            assert job.order is not None and job.order.settled == "deadline_missed"
            assert actions == [Reclaim(jid, tuple(keep[-job.order.count :]), 0.0)]
        else:
            assert actions == [Reclaim(jid, new_hosts, 0.0)]
        self.execute(t, actions)

    def on_answer(self, t: float, jid: int, order_id: int, answer: str) -> None:
        core = self.core
        job = core.jobs[jid]
        order = job.order
        is_open = order is not None and order.order_id == order_id and order.settled is None
        if not is_open or order is None:
            # Too late (deadline passed, connection lost, job ended): refused, harmless.
            before = (list(job.hosts), set(job.leaving), job.state, core.nodes.free_count)
            with pytest.raises(OrderRejected) as exc:
                if answer != "shrunk_or_grown":
                    core.handle(OrderRefused(t, jid, order_id, "late"))
                elif self.order_kinds[order_id] == "shrink":
                    core.handle(ShrinkAnswered(t, jid, order_id, tuple(job.hosts[:1])))
                else:
                    core.handle(GrowAnswered(t, jid, order_id, tuple(job.hosts)))
            assert exc.value.code == "unknown_order"
            assert (list(job.hosts), set(job.leaving), job.state, core.nodes.free_count) == before
            return
        if answer == "shrunk_or_grown":
            if order.kind == "shrink":
                self.try_bad_answer(t, jid, order_id, "shrink")
                hosts = self.rnd.sample(sorted(set(job.hosts) - job.leaving), order.count)
                actions = core.handle(ShrinkAnswered(t, jid, order_id, tuple(hosts)))
                assert actions == [Reclaim(jid, tuple(hosts), 0.0)] and job.leaving == set(hosts)
            else:
                self.try_bad_answer(t, jid, order_id, "grow")
                hosts = list(job.hosts)
                self.rnd.shuffle(hosts)
                core.handle(GrowAnswered(t, jid, order_id, tuple(hosts)))
                assert job.order is None and job.state is JobState.RUNNING and job.last_resize == t
                actions = []
        elif answer == "refuse":
            actions = core.handle(OrderRefused(t, jid, order_id, "no"))
        elif answer == "defer":
            seconds = self.rnd.randint(1, 20)
            actions = core.handle(OrderDeferred(t, jid, order_id, float(seconds)))
            assert job.no_orders_until == t + seconds
        else:  # the application's connection is lost: the order cannot be delivered
            assert answer == "lost"
            actions = core.handle(OrderUndeliverable(t, jid, order_id))
            core.handle(Unregistered(t, jid))
            if self.rnd.random() < 0.5:
                self.push(t + self.rnd.randint(1, 10), "register", jid, True)
        if answer in ("refuse", "defer", "lost"):
            if order.kind == "grow":
                assert actions == [Reclaim(jid, order.new_hosts, 0.0)]
            else:
                assert actions == [] and job.order is None and job.state is JobState.RUNNING
        self.execute(t, actions)

    def try_bad_answer(self, t: float, jid: int, order_id: int, kind: str) -> None:
        """Sometimes the application gets its answer wrong first: rejected, nothing changes."""
        if self.rnd.random() < 0.75:
            return
        core = self.core
        job = core.jobs[jid]
        assert job.order is not None
        before = (list(job.hosts), set(job.leaving), job.state, job.order.settled, core.nodes.free_count)
        others = [n for n in core.nodes.names if n not in job.hosts] + ["nowhere"]
        if kind == "shrink":
            own = sorted(set(job.hosts) - job.leaving)
            count = job.order.count
            bad = self.rnd.choice([
                own[: count - 1] + [self.rnd.choice(others)],
                own[: count + 1] if count < len(own) else own[:count] + ["nowhere"],
                own[: count - 1],
                [own[0]] * count if count > 1 else [own[0], own[0]],
            ])
            with pytest.raises(OrderRejected) as exc:
                core.handle(ShrinkAnswered(t, jid, order_id, tuple(bad)))
        else:
            bad = self.rnd.choice([list(job.hosts[:-1]), list(job.hosts) + [self.rnd.choice(others)]])
            with pytest.raises(OrderRejected) as exc:
                core.handle(GrowAnswered(t, jid, order_id, tuple(bad)))
        assert exc.value.code == "bad_hosts"
        assert (list(job.hosts), set(job.leaving), job.state, job.order.settled, core.nodes.free_count) == before
        self.rejections += 1

    def on_evolve(self, t: float, jid: int) -> None:
        """An evolving job asks for more nodes or gives some back."""
        core = self.core
        job = core.jobs[jid]
        if not job.state.holds_nodes:
            return
        lo, hi, _ = job.bounds
        staying = job.size - len(job.leaving)
        if staying <= lo or self.rnd.random() < 0.5:
            room = hi - staying
            if room == 0:
                return
            count = self.rnd.randint(1, room + 1)
            if count <= room and not job.deregistered:
                core.handle(NodesRequested(t, jid, count))
                assert job.requested == count
            else:  # past its maximum, or after a deregister (no grow could grant it)
                before = (job.requested, job.requested_at)
                with pytest.raises(OrderRejected) as exc:
                    core.handle(NodesRequested(t, jid, count))
                assert exc.value.code == ("deregistered" if job.deregistered else "bad_request")
                assert (job.requested, job.requested_at) == before
            return
        hosts = self.rnd.sample(sorted(set(job.hosts) - job.leaving), self.rnd.randint(1, staying - lo))
        if job.order is not None:
            with pytest.raises(OrderRejected) as exc:
                core.handle(HostsReleased(t, jid, tuple(hosts)))
            assert exc.value.code == "busy"
            return
        actions = core.handle(HostsReleased(t, jid, tuple(hosts)))
        assert actions == [Reclaim(jid, tuple(hosts), 0.0)]
        self.execute(t, actions)

    def on_resize(self, t: float, jid: int, nodes: int) -> None:
        """A user's resize: accepted exactly when the job can take it now."""
        core = self.core
        job = core.jobs[jid]
        lo, hi, _ = job.bounds
        ok = (
            job.kind in RESIZABLE
            and jid in core.active_ids
            and core.can_take_order(job, t)
            and lo <= nodes <= hi
            and nodes - job.size <= core.nodes.free_count
        )
        if not ok:
            with pytest.raises(ResizeRejected):
                core.handle(ResizeRequested(t, jid, nodes))
            return
        size = job.size
        actions = core.handle(ResizeRequested(t, jid, nodes))
        if nodes == size:
            assert actions == [] and job.order is None
        else:
            assert job.order is not None and job.order.count == abs(nodes - size)
            assert job.order.kind == ("grow" if nodes > size else "shrink")
        self.execute(t, actions)

    # ---- the end -------------------------------------------------------------------------
    def check_all_ended(self) -> None:
        core = self.core
        assert core.pending_ids == [] and core.active_ids == []
        assert core.nodes.free_count == core.nodes.total
        assert len(core.jobs) == len(self.workload.jobs)
        for jid, job in core.jobs.items():
            assert job.state.is_final, f"job {jid} is {job.state}"
            assert job.hosts == [] and job.order is None and not job.leaving
            # Integer times: the accounting must be exact.
            assert job.node_seconds == self.integral.get(jid, 0.0), (
                f"job {jid}: node_seconds {job.node_seconds}, held {self.integral.get(jid, 0.0)}"
            )


# ---- properties --------------------------------------------------------------------------


@settings(max_examples=120, deadline=None)
@given(w=st.one_of(workloads(), contested_workloads()), rnd=st.randoms(use_true_random=False))
def test_malleable_policy_orders_keep_the_books_balanced_and_every_job_ends(w: Workload, rnd: random.Random) -> None:
    """Under the malleable policy, whatever the applications answer and however long
    reclaiming takes: no node is held twice or beyond the cluster, every job stays within
    its bounds, RESIZING means an order or hosts leaving, every job ends with all nodes
    free, and node-seconds are exact."""
    OrderSim(w, "malleable", rnd).run()


@settings(max_examples=120, deadline=None)
@given(w=workloads(), rnd=st.randoms(use_true_random=False))
def test_user_resizes_under_easy_keep_the_books_balanced_and_are_refused_exactly_when_invalid(
    w: Workload, rnd: random.Random
) -> None:
    OrderSim(w, "easy", rnd, user_resizes=True).run()


@settings(max_examples=60, deadline=None)
@given(w=workloads(), rnd=st.randoms(use_true_random=False))
def test_user_resizes_on_top_of_the_malleable_policy_keep_the_books_balanced(
    w: Workload, rnd: random.Random
) -> None:
    OrderSim(w, "malleable", rnd, user_resizes=True).run()


@settings(max_examples=80, deadline=None)
@given(w=st.one_of(workloads(), contested_workloads()), rnd=st.randoms(use_true_random=False))
def test_grows_whose_processes_fail_to_start_before_or_after_grown_keep_the_books_balanced(
    w: Workload, rnd: random.Random
) -> None:
    """The launcher reports a grow's start failed at any time: while the grow is open, after
    `grown`, after the job shrank or gave the hosts back, during another order, after the
    job ended. The hosts it still holds for the grow come back, every invariant holds after
    every event, every job ends and node-seconds stay exact."""
    OrderSim(w, "malleable", rnd, user_resizes=True, join_failures=True).run()


@settings(max_examples=150, deadline=None)
@given(w=st.one_of(workloads(), contested_workloads()), rnd=st.randoms(use_true_random=False))
def test_malleable_policy_never_orders_more_shrinks_than_the_waiting_jobs_lack(
    w: Workload, rnd: random.Random
) -> None:
    """In every pass, the nodes the policy orders back are at most what the jobs still
    waiting need beyond idle nodes and nodes already promised back (jobs being ended,
    hosts being reclaimed, shrink orders not answered yet). The property form of
    test_through_the_core_no_second_shrink_is_ordered_while_the_first_is_unanswered in
    test_policy_malleable.py; `contested_workloads` makes that situation common.
    """
    OrderSim(w, "malleable", rnd, check_shrink_bound=True).run()
