"""Every registered policy driven through the real core by hypothesis state machines.

A machine plays the daemon and the applications at once: jobs of every kind are
submitted (some with a performance model, some evolving with a declared evolution), time
passes, handlers register, orders are answered (shrunk with hosts the application picks,
grown, refused, deferred, or left until the deadline), hosts are reclaimed, evolving jobs
ask for and release nodes, jobs end, are cancelled or reach their limits -- in any order.
The core schedules after every step.

What must hold throughout:
- the core never rejects a decision (a PolicyError fails the run): no start of a job that
  is not pending, no order to a job that cannot take one, no size outside min..max, no
  more nodes than are free;
- no node belongs to two jobs, no more nodes are allocated than exist, every running job
  holds between its minimum and maximum, hosts match the node table;
- FCFS-based policies: the jobs a pass starts past a blocked head never push back the
  head's earliest start (running jobs ending at their limits, nodes promised back counted
  as back now, as the policies count them). Grows are not starts: a malleable job grown
  into idle nodes is shrunk back when a waiting job needs them;
- conservative backfilling starts exactly the jobs a plain re-implementation (a list of
  changes, every queued job reserved in order) says it must (while no evolving request
  holds a place in the queue, which the plain version does not model).
"""

from __future__ import annotations

import math
import re

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

from core_support import check_invariants, submit
from elastic_protocol.jobspec import JobKind, JobSpec, PerfModel
from elasticd.core.actions import Launch, LaunchJoining, Reclaim, SendOrder, Terminate
from elasticd.core.engine import Core
from elasticd.core.events import (
    CancelRequested,
    Exited,
    GrowAnswered,
    HostsGone,
    HostsReleased,
    LimitReached,
    NodesRequested,
    OrderDeadline,
    OrderDeferred,
    OrderRefused,
    PassDue,
    Registered,
    ShrinkAnswered,
)
from elasticd.core.states import JobState
from elasticd.errors import OrderRejected
from elasticd.policies import POLICIES, make_policy
from elasticd.policies.base import Decision, PendingView, Snapshot, Start, limit_at

# Policies that promise not to start a job ahead of the queue head if that delays it.
FCFS_BASED = {name for name in POLICIES if name not in ("backfill",)}

SPEEDUPS = ["linear", "amdahl:0.1", "rho:0.2", "amdahl:0.5"]

# Parameter sets the machines also run with, beyond the defaults.
VARIANTS: dict[str, list[dict[str, object]]] = {
    "fit": [{}, {"expand_limit": 2}, {"expand_limit": 2, "compact": True}, {"expand_limit": "inf", "compact": True}],
    "sd": [{}, {"max_job_test": 1}, {"dynamic_max_slowdown": True, "max_mates": 3}, {"max_slowdown": "inf"}],
    "mebf-basic-spare": [{}, {"theta": 0.0, "gamma": 10}],
}


class Recorder:
    """Wraps the policy: checks every pass's decisions against its snapshot."""

    def __init__(self, policy: object, name: str) -> None:
        self.policy = policy
        self.name = name
        self.passes = 0

    def decide(self, snap: Snapshot) -> list[Decision]:
        decisions = self.policy.decide(snap)  # type: ignore[attr-defined]
        self.passes += 1
        if self.name in FCFS_BASED:
            check_head_not_delayed(self.name, snap, decisions)
        if self.name == "conservative" and not any(r.requested and r.malleable_ready for r in snap.running):
            expected = naive_conservative(snap)
            got = {d.job_id: d.nodes for d in decisions if isinstance(d, Start)}
            assert got == expected, f"conservative started {got}, a plain implementation {expected}"
        return decisions


# ---- oracles -----------------------------------------------------------------------------


def earliest(now: float, available: int, need: int, releases: list[tuple[float, int]]) -> float:
    """First time at or after now when `need` nodes are free, nodes only coming back."""
    if available >= need:
        return now
    for t, n in sorted(releases):
        available += n
        if available >= need:
            return t
    return math.inf


def head_need(policy: str, job: PendingView) -> int:
    if job.kind is JobKind.MALLEABLE and policy in ("keeppref", "sd"):
        return job.preferred
    return job.start_nodes


def check_head_not_delayed(policy: str, snap: Snapshot, decisions: list[Decision]) -> None:
    if any(r.requested and r.malleable_ready for r in snap.running):
        return  # open requests hold places in the queue of the reservation policies
    if policy == "fit" and any(r.evolution for r in snap.running):
        return  # declared evolutions can take more nodes later: not a release-only map
    size = {d.job_id: d.nodes for d in decisions if isinstance(d, Start)}
    pending = snap.pending
    k = next((i for i, p in enumerate(pending) if p.job_id not in size), None)
    if k is None:
        return
    head = pending[k]
    if policy == "sd" and head.kind is JobKind.MALLEABLE:
        return  # it may start reduced, with mates: its reservation is not one fixed size
    if policy == "fit" and any(p.evolution for p in pending if p.job_id in size or p is head):
        return  # a declared evolution is planned step by step, not as nodes held to a limit
    now = snap.now
    available = snap.free_nodes + snap.incoming_nodes
    releases = [(max(now, r.estimated_end), r.size - r.shrinking) for r in snap.running if not r.ending]

    def occupy(j: PendingView) -> None:
        nonlocal available
        available -= size[j.job_id]
        limit = limit_at(j, size[j.job_id])
        if limit is not None:
            releases.append((now + limit, size[j.job_id]))

    for j in pending[:k]:
        occupy(j)
    need = head_need(policy, head)
    before = earliest(now, available, need, releases)
    for j in pending[k + 1 :]:
        if j.job_id in size:
            occupy(j)
    after = earliest(now, available, need, releases)
    assert after <= before, (
        f"{policy} at {now}: starting {sorted(size)} moved head job {head.job_id}'s earliest start "
        f"from {before} to {after}"
    )


def naive_conservative(snap: Snapshot) -> dict[int, int]:
    """Conservative backfilling on a plain list of changes: every queued job in order."""
    now = snap.now
    changes: list[tuple[float, float, int]] = [(now, math.inf, snap.free_nodes + snap.incoming_nodes)]
    for r in snap.running:
        if not r.ending and r.estimated_end != math.inf:
            changes.append((max(now, r.estimated_end), math.inf, r.size - r.shrinking))

    def free_at(t: float) -> int:
        return sum(n for s, e, n in changes if s <= t < e)

    def window_min(a: float, b: float) -> int:
        pts = {a} | {s for s, _, _ in changes if a < s < b} | {e for _, e, _ in changes if a < e < b}
        return min(free_at(p) for p in pts)

    def first_fit(need: int, dur: float) -> float:
        cands = sorted({now} | {s for s, _, _ in changes if s > now} | {e for _, e, _ in changes if now < e < math.inf})
        for c in cands:
            if window_min(c, c + dur) >= need:
                return c
        return math.inf

    free = snap.free_nodes
    started: dict[int, int] = {}
    for job in snap.pending:
        need = job.start_nodes
        limit = limit_at(job, need)  # on its fewest nodes, its limit scaled by its model
        dur = math.inf if limit is None else float(limit)
        ts = first_fit(need, dur)
        if ts == now and free >= need:
            n = need
            if job.kind in (JobKind.MOLDABLE, JobKind.MALLEABLE):
                n = min(job.max_nodes, free, window_min(now, now + dur))
            started[job.job_id] = n
            free -= n
            held = limit_at(job, n)  # wider, it ends sooner
            changes.append((now, now + (math.inf if held is None else float(held)), -n))
        elif ts != math.inf:
            changes.append((ts, ts + dur, -need))
    return started


# ---- the machine -------------------------------------------------------------------------


class PolicyMachine(RuleBasedStateMachine):
    policy_name = "easy"

    @initialize(nodes=st.integers(2, 8), interval=st.sampled_from([0.0, 5.0]), variant=st.integers(0, 3))
    def setup(self, nodes: int, interval: float, variant: int) -> None:
        params: dict[str, object] = {}
        if any(p.name == "min_resize_interval" for p in POLICIES[self.policy_name].params):
            params["min_resize_interval"] = interval
        params.update(VARIANTS.get(self.policy_name, [{}])[variant % len(VARIANTS.get(self.policy_name, [{}]))])
        self.recorder = Recorder(make_policy(self.policy_name, params), self.policy_name)
        self.core = Core([f"n{i}" for i in range(nodes)], self.recorder, order_deadline=20.0)  # type: ignore[arg-type]
        self.n = nodes
        self.now = 0.0
        self.ending: set[int] = set()  # told to end, processes not reported gone yet
        self.registers: set[int] = set()  # jobs whose application registers when started
        self.autopilot: set[int] = set()  # jobs whose application answers orders at once
        self.runtime: dict[int, float] = {}  # how long a job runs before it exits by itself

    # ---- helpers ----
    def schedule(self) -> None:
        for a in self.core.handle(PassDue(self.now)):
            if isinstance(a, Launch):
                assert self.core.job(a.job_id).state is JobState.RUNNING
                if a.job_id in self.registers:
                    self.core.handle(Registered(self.now, a.job_id))
            elif isinstance(a, (SendOrder, LaunchJoining)):
                assert self.core.job(a.job_id).order is not None

    def jobs_in(self, *states: JobState) -> list[int]:
        return sorted(j for j, job in self.core.jobs.items() if job.state in states)

    def live(self) -> list[int]:
        return [j for j in self.jobs_in(JobState.RUNNING, JobState.RESIZING) if j not in self.ending]

    # ---- rules ----
    @rule(jobs=st.lists(
        st.tuples(
            st.sampled_from([JobKind.RIGID, JobKind.MOLDABLE, JobKind.MALLEABLE, JobKind.MALLEABLE, JobKind.EVOLVING]),
            st.integers(1, 4),  # min
            st.integers(0, 4),  # max - min
            st.integers(0, 4),  # preferred - min
            st.one_of(st.none(), st.integers(1, 30)),  # limit, minutes
            st.one_of(st.none(), st.tuples(st.sampled_from(SPEEDUPS), st.one_of(st.none(), st.integers(10, 3000)))),
            st.lists(st.tuples(st.integers(1, 10), st.integers(0, 12)), min_size=1, max_size=4),  # evolution
            st.booleans(),  # declares its evolution
            st.sampled_from([True, True, True, False]),  # its application registers when started
            st.sampled_from([True, True, False]),  # ... and answers every order promptly
            st.integers(1, 40),  # minutes it runs before exiting on its own
        ),
        min_size=1, max_size=3,
    ))
    def submit(self, jobs: list[tuple]) -> None:  # type: ignore[type-arg]
        for kind, lo, extra, pref, limit, model, steps, declare, registers, prompt, runtime in jobs:
            lo = min(lo, self.n)
            hi = lo if kind is JobKind.RIGID else min(lo + extra, max(lo, self.n))
            nodes: int | dict[str, int] = (
                lo if kind is JobKind.RIGID else {"min": lo, "max": hi, "preferred": min(lo + pref, hi)}
            )
            evolution = None
            if kind is JobKind.EVOLVING and declare:
                evolution = [{"duration": f"{d * 6 // 60}:{d * 6 % 60:02d}", "nodes": lo + n % (hi - lo + 1)}
                             for d, n in steps]
                total_min = sum(d * 6 for d, _ in steps) / 60
                if limit is not None and limit < total_min:
                    limit = math.ceil(total_min)
            perf = None if model is None else PerfModel(speedup=model[0], work=model[1], alpha=0.5, beta=1.0, b=0.2)
            spec = JobSpec(
                name="j", command=["true"], nodes=nodes, kind=kind, time_limit=limit, model=perf, evolution=evolution
            )
            jid = submit(self.core, spec, self.now).job_id
            if registers and kind in (JobKind.MALLEABLE, JobKind.EVOLVING):
                self.registers.add(jid)
            if prompt:
                self.autopilot.add(jid)
            self.runtime[jid] = runtime * 60.0
        self.schedule()

    @rule(dt=st.sampled_from([0.0, 1.0, 7.0, 30.0, 200.0, 600.0]))
    def tick(self, dt: float) -> None:
        """Time passes: prompt applications answer their orders and give hosts back, jobs
        whose run time is over exit, ended jobs' processes are gone."""
        self.now += dt
        core = self.core
        for jid in self.live():
            job = core.job(jid)
            order = job.order
            if jid in self.autopilot and order is not None and order.settled is None:
                if order.kind == "shrink":
                    keep = [h for h in job.hosts if h not in job.leaving]
                    core.handle(ShrinkAnswered(self.now, jid, order.order_id, tuple(keep[-order.count :])))
                else:
                    core.handle(GrowAnswered(self.now, jid, order.order_id, tuple(job.hosts)))
            if jid in self.autopilot and job.leaving:
                core.handle(HostsGone(self.now, jid, tuple(sorted(job.leaving))))
            assert job.start_time is not None
            if self.now >= job.start_time + self.runtime[jid]:
                core.handle(Exited(self.now, jid, 0, None))
        for jid in sorted(self.ending):
            core.handle(Exited(self.now, jid, None, 15))
        self.ending.clear()
        self.schedule()

    @rule(data=st.data(), how=st.sampled_from(["answer", "answer", "answer", "refuse", "defer", "deadline", "gone"]))
    def answer_order(self, data: st.DataObject, how: str) -> None:
        """A slow application: answers (or not) an order, or its hosts are found gone."""
        if how == "gone":
            cands = [j for j in self.live() if self.core.job(j).leaving]
            if cands:
                jid = data.draw(st.sampled_from(cands))
                self.core.handle(HostsGone(self.now, jid, tuple(sorted(self.core.job(jid).leaving))))
                self.schedule()
            return
        open_ = [j for j in self.live() if (o := self.core.job(j).order) is not None and o.settled is None]
        if not open_:
            return
        jid = data.draw(st.sampled_from(open_))
        job = self.core.job(jid)
        order = job.order
        assert order is not None
        if how == "refuse":
            self.core.handle(OrderRefused(self.now, jid, order.order_id, "no"))
        elif how == "defer":
            self.core.handle(OrderDeferred(self.now, jid, order.order_id, data.draw(st.sampled_from([1.0, 15.0]))))
        elif how == "deadline":
            self.core.handle(OrderDeadline(self.now, jid, order.order_id))
        elif order.kind == "shrink":
            keep = [h for h in job.hosts if h not in job.leaving]
            hosts = data.draw(st.permutations(keep))[: order.count]
            actions = self.core.handle(ShrinkAnswered(self.now, jid, order.order_id, tuple(hosts)))
            assert [type(a) for a in actions] == [Reclaim]
        else:
            self.core.handle(GrowAnswered(self.now, jid, order.order_id, tuple(job.hosts)))
        self.schedule()

    @rule(data=st.data(), count=st.integers(-2, 4))
    def evolve(self, data: st.DataObject, count: int) -> None:
        """An evolving job asks for `count` more nodes, or gives some back (count <= 0)."""
        cands = [j for j in self.live() if self.core.job(j).kind is JobKind.EVOLVING]
        if not cands:
            return
        jid = data.draw(st.sampled_from(cands))
        job = self.core.job(jid)
        if count > 0:
            if not job.malleable_ready:
                self.core.handle(Registered(self.now, jid))
            try:
                self.core.handle(NodesRequested(self.now, jid, count))
            except OrderRejected as exc:
                assert exc.code == "bad_request"
        else:
            room = job.size - len(job.leaving) - job.bounds[0]
            if room < 1 or job.order is not None:
                return
            keep = [h for h in job.hosts if h not in job.leaving]
            self.core.handle(HostsReleased(self.now, jid, tuple(keep[: min(room, 1 - count)])))
        self.schedule()

    @rule(data=st.data(), how=st.sampled_from(["exit", "cancel", "limit", "pending", "none", "none"]))
    def end(self, data: st.DataObject, how: str) -> None:
        if how == "pending" and self.core.pending_ids:
            self.core.handle(CancelRequested(self.now, data.draw(st.sampled_from(self.core.pending_ids))))
            self.schedule()
            return
        cands = self.live()
        if not cands or how in ("none", "pending"):
            return
        jid = data.draw(st.sampled_from(cands))
        if how == "exit":
            self.core.handle(Exited(self.now, jid, 0, None))
        else:
            actions = self.core.handle(CancelRequested(self.now, jid)) if how == "cancel" else self.core.handle(LimitReached(self.now, jid))
            assert [type(a) for a in actions] == [Terminate]
            self.ending.add(jid)
        self.schedule()

    @precondition(lambda self: bool(self.ending))
    @rule(data=st.data())
    def ended(self, data: st.DataObject) -> None:
        jid = data.draw(st.sampled_from(sorted(self.ending)))
        self.ending.discard(jid)
        self.core.handle(Exited(self.now, jid, None, 15))
        self.schedule()

    # ---- invariants ----
    @invariant()
    def books_balance(self) -> None:
        if hasattr(self, "core"):
            check_invariants(self.core, self.now)


def _machine_for(name: str) -> type:
    return type(f"Machine_{re.sub(r'[^A-Za-z0-9]', '_', name)}", (PolicyMachine,), {"policy_name": name})


_SETTINGS = settings(
    max_examples=30,
    stateful_step_count=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)

for _name in POLICIES:
    _cls = _machine_for(_name)
    _cls.TestCase.settings = _SETTINGS
    globals()[f"Test_{re.sub(r'[^A-Za-z0-9]', '_', _name)}"] = _cls.TestCase


def test_every_registered_policy_has_a_machine() -> None:
    names = {n for n in globals() if n.startswith("Test_")}
    assert len(names) == len(POLICIES)


@pytest.mark.parametrize("name", list(POLICIES))
def test_every_policy_decides_nothing_on_an_empty_cluster(name: str) -> None:
    policy = make_policy(name)
    assert policy.decide(Snapshot(0.0, 4, 4, (), ())) == []
