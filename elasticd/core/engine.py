"""The state machine that both the daemon and the simulator drive.

Events come in through one entry point, `Core.handle`, each with the time it happened; what
comes out is the list of actions the driver must carry out. Nothing here waits, sleeps or
does I/O. An event the core cannot accept (an application naming hosts it does not hold, a
user resizing a rigid job) raises before anything changed, so a driver can answer it with an
error and carry on. Nodes are handed back only when the driver reports that a job's processes
on them are gone (Exited, HostsGone), never when an end is merely asked for.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from elastic_protocol.jobspec import JobKind, JobSpec
from elasticd import defaults
from elasticd.core.actions import Action, ArmLimit, Launch, LaunchJoining, Reclaim, SendOrder, Terminate
from elasticd.core.events import (
    CancelRequested,
    Cause,
    Event,
    Exited,
    GrowAnswered,
    HoldReleased,
    HostsGone,
    HostsReleased,
    JobEventKind,
    JobLost,
    JoinLaunchFailed,
    Launched,
    LaunchFailed,
    LimitReached,
    NeverLaunched,
    NodeDown,
    NodesAdded,
    NodesRemoved,
    NodesRequested,
    NodeUp,
    OrderDeadline,
    OrderDeferred,
    OrderKind,
    OrderRefused,
    OrderUndeliverable,
    OutputLimitReached,
    PassDue,
    Registered,
    ResizeRequested,
    ShrinkAnswered,
    StopRequested,
    Submitted,
    Unregistered,
)
from elasticd.core.job import Job, exit_text, new_job
from elasticd.core.limits import resize_limit, start_limit
from elasticd.core.nodes import NodeTable
from elasticd.core.orders import Order, Settlement
from elasticd.core.record import job_state, restore_job
from elasticd.core.sizes import fit_bounds, refit_bounds
from elasticd.core.states import HOLDING_STATES, JobState
from elasticd.errors import (
    InvalidTransition,
    OrderRejected,
    PolicyError,
    ResizeRejected,
    UnknownJob,
)
from elasticd.policies.base import (
    Decision,
    Grow,
    PendingView,
    Policy,
    RunningView,
    Shrink,
    Snapshot,
    Start,
)

RESIZABLE = (JobKind.MALLEABLE, JobKind.EVOLVING)
K = JobEventKind
_NO_FLOOR = sys.maxsize
SHRINK, GROW = OrderKind.SHRINK, OrderKind.GROW


def _policy_may_order(job: Job, now: float) -> bool:
    """Core.can_take_order, and neither backing off after a refusal nor held by a user: one
    call, not two, as it is asked for every job's view after each of its changes and for
    every resize a policy decides."""
    return (
        job.order is None
        and not job.leaving
        and job.ending_as is None
        and job.malleable_ready
        and job.state is JobState.RUNNING
        and not job.deregistered
        and now >= job.no_orders_until
        and now >= job.refused_until
        and not job.held
    )


@lru_cache(maxsize=1024)
def _ended_text(state: JobState, exit_code: int | None, signal: int | None) -> str:
    """The `ended` entry's text: the state and Job.exit_text ('COMPLETED 0:0'). One per job
    (every job of a trace, in a simulation), of a few kinds: made once each."""
    return f"{state.value} {exit_text(exit_code, signal) or ''}".strip()


@dataclass
class _Transaction:
    """What `Core.rollback` restores: counters, the order of running jobs, node states, and
    each job as it was before the transaction first changed it."""

    next_id: int
    next_order: int
    active: list[int]
    down: set[str]
    gone: set[str]
    names: list[str]
    changed: set[int]
    before: dict[int, Job] = field(default_factory=dict)
    created: set[int] = field(default_factory=set)


class Core:
    def __init__(
        self,
        node_names: Iterable[str],
        policy: Policy,
        first_job_id: int = 1,
        order_deadline: float = defaults.ORDER_DEADLINE,
        refuse_backoff: float = 10.0,
    ) -> None:
        self.nodes = NodeTable(list(node_names))
        # The most nodes the cluster may come to hold (an allocation that grows on demand):
        # jobs up to that size are accepted and wait for the nodes.
        self.grow_to = 0
        # Jobs' history entries keep their hosts (see Job.record_hosts).
        self.record_hosts = True
        self.policy = policy
        self.order_deadline = order_deadline
        # After a refusal the policy leaves the job alone this long (a user's resize does
        # not wait): an application that always refuses is not asked on every pass.
        self.refuse_backoff = refuse_backoff
        self.jobs: dict[int, Job] = {}
        self._next_id = first_job_id
        self._next_order = 1
        # Pending jobs in queue order with their policy view, built once at submit: a
        # snapshot is then one C-level copy, not a loop over a queue thousands deep.
        self._pending: dict[int, PendingView] = {}
        self._pending_tuple: tuple[PendingView, ...] | None = None  # what snapshots share until it changes
        # The fewest nodes any pending job can start on (None: to be worked out again, from
        # how many pending jobs have each minimum), and the jobs holding nodes that orders
        # can resize: while fewer nodes are free than the first and there are none of the
        # second, no decision can be valid (_pass).
        self._floor: int | None = None
        self._minima: dict[int, int] = {}
        self._resizable: set[int] = set()
        # Pending jobs the cluster became too small for since they were taken, with why:
        # queued, in no snapshot (elasticd.core.sizes.refit_bounds).
        self._cannot_start: dict[int, str] = {}
        # Jobs holding nodes, in the order they started, with their policy view (None: to be
        # built at the next snapshot). A view is rebuilt only after its job changed (every
        # change goes through _mut) or its deferral expired, and the snapshot's tuple of them
        # only after one of them did: a pass per event on a 4,000-node trace must not rebuild
        # every running job's view, nor the tuple, each time.
        self._active: dict[int, RunningView | None] = {}
        self._stale: set[int] = set()  # active jobs whose view is to be built
        self._running_tuple: tuple[RunningView, ...] | None = None
        self._expiring: dict[int, float] = {}  # views valid only until then (a deferral, a back-off)
        self._incoming_of: dict[int, int] = {}  # nodes promised back, per job that has any
        # Jobs changed since the driver last took them (take_changed): what a journal writes.
        self._changed: set[int] = set()
        self._tx: _Transaction | None = None
        self._handlers: dict[type, Callable[[Any], list[Action]]] = {
            Submitted: self._submitted,
            CancelRequested: self._cancel,
            ResizeRequested: self._resize,
            HoldReleased: self._hold_released,
            StopRequested: self._stop_all,
            PassDue: self._pass,
            Launched: self._launched,
            LaunchFailed: self._launch_failed,
            JoinLaunchFailed: self._join_launch_failed,
            Exited: self._exited,
            HostsGone: self._hosts_gone,
            JobLost: self._lost,
            NeverLaunched: self._never_launched,
            LimitReached: self._limit_reached,
            OutputLimitReached: self._output_limit,
            Registered: self._registered,
            Unregistered: self._unregistered,
            ShrinkAnswered: self._shrink_answered,
            GrowAnswered: self._grow_answered,
            OrderRefused: self._refused,
            OrderDeferred: self._deferred,
            OrderDeadline: self._deadline,
            OrderUndeliverable: self._undeliverable,
            NodesRequested: self._nodes_requested,
            HostsReleased: self._hosts_released,
            NodeDown: self._node_down,
            NodeUp: self._node_up,
            NodesAdded: self._nodes_added,
            NodesRemoved: self._nodes_removed,
        }

    # ---- the one entry point -----------------------------------------------------------
    def handle(self, event: Event) -> list[Action]:
        """Apply one event; the actions the driver must carry out, in order.

        Raises (JobRejected, ResizeRejected, OrderRejected, UnknownJob) when the event cannot
        be accepted; nothing has changed then. InvalidTransition and PolicyError are bugs in
        a driver or a policy."""
        try:
            handler = self._handlers[type(event)]
        except KeyError:
            raise TypeError(f"not a core event: {event!r}") from None
        return handler(event)

    # ---- reading ---------------------------------------------------------------------------
    def job(self, job_id: int) -> Job:
        """The job, for reading: reading never marks it changed."""
        try:
            return self.jobs[job_id]
        except KeyError:
            raise UnknownJob(f"no job {job_id}") from None

    def _mut(self, job_id: int) -> Job:
        """The job, about to be changed: its cached view is dropped, the journal told, and
        inside a transaction its state before the change kept (for rollback)."""
        job = self.jobs.get(job_id)
        if job is None:
            raise UnknownJob(f"no job {job_id}")
        active = self._active
        if job_id in active:
            active[job_id] = None
            self._stale.add(job_id)
        self._changed.add(job_id)
        tx = self._tx
        if tx is not None and job_id not in tx.before and job_id not in tx.created:
            tx.before[job_id] = restore_job(job_id, job.spec, job_state(job))
        return job

    # ---- transactions (the daemon's durability contract) -------------------------------------
    def begin(self) -> None:
        """Make what the next events change undoable: the daemon applies an event, commits it
        to its journal and only then answers; if the commit fails, `rollback` leaves the core
        exactly as it was, so nothing half-applied stays in memory."""
        self._tx = _Transaction(self._next_id, self._next_order, list(self._active), set(self.nodes.down),
                                set(self.nodes.gone), list(self.nodes.names), set(self._changed))

    def commit(self) -> None:
        self._tx = None

    def rollback(self) -> None:
        tx = self._tx
        if tx is None:
            return
        self._tx = None
        for jid in tx.created:
            self.jobs.pop(jid, None)
        for jid, before in tx.before.items():
            # Into the same object: drivers hold references to their jobs.
            job = self.jobs[jid]
            bounds = job.bounds
            vars(job).update(vars(before))
            job.bounds = bounds
        self._next_id, self._next_order = tx.next_id, tx.next_order
        self._pending = {j.job_id: self._pending_view(j) for j in sorted(self.jobs.values(), key=lambda j: j.job_id)
                         if j.state is JobState.PENDING}
        self._pending_tuple = None
        self._floor = None
        self._minima = {}
        for view in self._pending.values():
            self._minimum_in(view.min_nodes)
        self._active = {jid: None for jid in tx.active if self.jobs[jid].state.holds_nodes}
        self._resizable = {jid for jid in self._active if self.jobs[jid].kind in RESIZABLE}
        nodes = NodeTable(tx.names)
        nodes.remove(sorted(tx.gone, key=nodes.index.__getitem__))
        for n in tx.down:
            nodes.mark_down(n)
        for jid in self._active:
            nodes.claim(jid, self.jobs[jid].hosts)
        self.nodes = nodes
        self._cannot_start = {}
        for jid in self._pending:
            self._refit(self.jobs[jid])
        self._stale = set(self._active)
        self._running_tuple = None
        self._expiring.clear()
        self._incoming_of.clear()
        self._changed = tx.changed

    def requeue_changed(self, jobs: Iterable[Job]) -> None:
        """Jobs taken with take_changed that the driver could not save: taken again next time."""
        self._changed.update(j.job_id for j in jobs)

    def take_changed(self) -> list[Job]:
        """The jobs changed since the last call (in id order), for the driver to save."""
        if not self._changed:
            return []
        ids = sorted(self._changed)
        self._changed.clear()
        return [self.jobs[j] for j in ids if j in self.jobs]

    @property
    def next_job_id(self) -> int:
        """The id the next Submitted event must carry."""
        return self._next_id

    @property
    def next_order_id(self) -> int:
        return self._next_order

    @property
    def pending_ids(self) -> list[int]:
        return list(self._pending)

    @property
    def pending_count(self) -> int:
        return len(self._pending)

    @property
    def cannot_start(self) -> Mapping[int, str]:
        """Pending jobs the cluster is too small for, and why: no policy sees them until it
        can hold them again (elasticd.core.sizes.refit_bounds)."""
        return self._cannot_start

    @property
    def active_ids(self) -> list[int]:
        """Jobs holding nodes (RUNNING or RESIZING, including those being ended)."""
        return list(self._active)

    def can_take_order(self, job: Job, now: float) -> bool:
        return (
            job.state is JobState.RUNNING
            and job.malleable_ready
            and not job.deregistered
            and job.order is None
            and not job.leaving
            and job.ending_as is None
            and now >= job.no_orders_until
        )

    def policy_may_order(self, job: Job, now: float) -> bool:
        return _policy_may_order(job, now)

    def resize_guard_end(self, job: Job) -> float | None:
        """When the policy may resize the job again: its last resize plus the policy's
        min_resize_interval (None: never resized, or a policy without that guard).

        No event happens at that instant, yet a pass then can decide what the one before
        could not (grow the job into idle nodes, shrink it for a waiting job): each driver
        asks for a pass at this time itself, the simulator on its virtual clock and the
        daemon on the real one, so both resize the job at the same instant."""
        last = job.last_resize
        interval = getattr(self.policy, "min_resize_interval", None)
        if last is None or not interval:
            return None
        return float(last + interval)

    def orders_wait_until(self, job: Job) -> float:
        """The instant from which time no longer keeps the policy from ordering the job: the
        last of its resize guard's end, its deferral's end and its refusal back-off's end
        (0 or before: none of them). A pass at that instant can order what the one before could
        not, though no event happens then: the daemon arms one (the simulator's ideal
        application never defers or refuses, and wakes at the guard's end)."""
        guard = self.resize_guard_end(job)
        return max(-math.inf if guard is None else guard, job.no_orders_until, job.refused_until)

    def why_no_order(self, job: Job, now: float) -> str:
        if not job.malleable_ready:
            if job.deregistered:
                return "it deregistered for good"
            if job.connection_lost():
                return "its application's connection closed; it runs as rigid until it registers again"
            return "it has not registered a handler"
        if job.ending_as is not None:
            return "it is being ended"
        if job.order is not None:
            return f"it is busy with order {job.order.order_id}"
        if job.leaving:
            return "hosts it gave back are still being reclaimed"
        if now < job.no_orders_until:
            return f"it deferred orders for another {job.no_orders_until - now:.0f} s"
        return f"it is {job.state.value}"

    def snapshot(self, now: float) -> Snapshot:
        pending = self._pending_tuple
        if pending is None:
            cannot = self._cannot_start
            pending = self._pending_tuple = (tuple(self._pending.values()) if not cannot else
                                             tuple(v for v in self._pending.values() if v.job_id not in cannot))
        active = self._active
        stale = self._stale
        if self._expiring:
            for jid, until in self._expiring.items():
                if now >= until:
                    stale.add(jid)
        if stale:
            incoming_of = self._incoming_of
            expiring = self._expiring
            jobs = self.jobs
            running_view = self._running_view
            for jid in stale:
                if jid not in active:
                    continue
                j = jobs[jid]
                view = running_view(j, now)
                active[jid] = view
                # Until a deferral or back-off ends, when the view's malleable_ready flips.
                if j.no_orders_until > now or j.refused_until > now:
                    valid_until = math.inf
                    if j.no_orders_until > now:
                        valid_until = j.no_orders_until
                    if now < j.refused_until < valid_until:
                        valid_until = j.refused_until
                    expiring[jid] = valid_until
                elif expiring:
                    expiring.pop(jid, None)
                back = view.size + view.leaving if view.ending else view.leaving + view.shrinking
                if back:
                    incoming_of[jid] = back
                elif incoming_of:
                    incoming_of.pop(jid, None)
            stale.clear()
            self._running_tuple = None
        running = self._running_tuple
        if running is None:
            # Every view is built now (stale ones just were).
            views: tuple[RunningView, ...] = tuple(active.values())  # type: ignore[arg-type]
            running = self._running_tuple = views
        incoming = sum(self._incoming_of.values()) if self._incoming_of else 0
        return Snapshot(now, self.nodes.total, self.nodes.free_count, pending, running, incoming)

    @staticmethod
    def _running_view(j: Job, now: float) -> RunningView:
        """Positional, in RunningView's field order, and with policy_may_order spelled out:
        one is built after every change of a job, hundreds of thousands in a long run."""
        lo, hi, pref = j.bounds
        start = j.start_time
        assert start is not None
        o = j.order
        leaving = len(j.leaving)
        ending = j.ending_as is not None
        # _policy_may_order(j, now), spelled out here (a call less per view).
        ready = (
            o is None
            and not leaving
            and not ending
            and j.malleable_ready
            and j.state is JobState.RUNNING
            and not j.deregistered
            and now >= j.no_orders_until
            and now >= j.refused_until
            and not j.held
        )
        return RunningView(
            j.job_id, j.kind, len(j.hosts) - leaving, lo, hi, pref, start, j.time_limit, ready, j.last_resize,
            ending, o is not None or leaving > 0, j.requested, j.requested_at, leaving,
            o.count if o is not None and o.kind is OrderKind.SHRINK and o.settled is None else 0,
            j.submit_time, j.spec.model, j.evolution_steps, j.size_history(), j.limit_due,
        )

    @staticmethod
    def _pending_view(j: Job) -> PendingView:
        lo, hi, pref = j.bounds
        return PendingView(
            j.job_id, j.submit_time, j.kind, lo, hi, pref, j.time_limit, j.spec.model, j.evolution_steps
        )

    # ---- recovery --------------------------------------------------------------------------
    def restore(self, jobs: list[Job], next_order: int, now: float, next_job_id: int = 1) -> list[Action]:
        """Take back the jobs a previous daemon saved, before any event is handled.

        Not an event: it rebuilds the state the events had made. Pending jobs keep their
        queue order (job id order, as submitted); new ids continue after the highest one and
        after `next_job_id` (ids are never reused, even for jobs no longer saved). Jobs that
        held nodes hold the same ones again but are not ready for orders until their
        application reconnects and registers; one whose nodes are not part of this cluster
        any more ends NODE_FAIL. A pending job whose minimum the cluster cannot give any more
        stays queued, held out of the policies' sight (elasticd.core.sizes.refit_bounds).
        Returns the time limits to arm again.
        """
        actions: list[Action] = []
        self._next_id = max(self._next_id, next_job_id)
        for job in sorted(jobs, key=lambda j: j.job_id):
            self.jobs[job.job_id] = job
            self._changed.add(job.job_id)
            self._next_id = max(self._next_id, job.job_id + 1)
            if job.state is JobState.PENDING:
                view = self._pending[job.job_id] = self._pending_view(job)
                self._pending_tuple = None
                self._minimum_in(view.min_nodes)
                self._refit(job)
                continue
            job.bounds = refit_bounds(job.bounds, self._capacity)[0]  # a job holding nodes fits them
            if job.state.holds_nodes:
                self._active[job.job_id] = None
                if job.kind in RESIZABLE:
                    self._resizable.add(job.job_id)
                self._stale.add(job.job_id)
                job.malleable_ready = False
                job.record(now, K.RECOVERED, Cause.DAEMON, "daemon restarted")
                try:
                    self.nodes.claim(job.job_id, job.hosts)
                except (KeyError, InvalidTransition):
                    job.hosts = []
                    self._finish(job, now, JobState.NODE_FAIL, None, None,
                                 "its nodes are not part of the restarted daemon's cluster", Cause.DAEMON)
                    continue
                actions.extend(self._limit_of(job))
        self._next_order = max(self._next_order, next_order)
        return actions

    def _lost(self, ev: JobLost) -> list[Action]:
        job = self._mut(ev.job_id)
        if not job.state.holds_nodes:
            raise InvalidTransition(f"job {ev.job_id}: lost while {job.state.value}")
        self._finish(job, ev.time, JobState.NODE_FAIL, None, None, ev.why, ev.cause)
        return []

    def _never_launched(self, ev: NeverLaunched) -> list[Action]:
        """Back to the queue: the job keeps its id, its submit time and so its place (the
        queue is in id order), and its nodes are free for the next pass, which starts it
        again like any pending job. A job that was being ended (cancelled while its launch
        was on its way) ends as asked instead: nothing of it ran, nothing is left to end."""
        job = self._mut(ev.job_id)
        if not job.state.holds_nodes or job.launched:
            raise InvalidTransition(f"job {ev.job_id}: reported never launched while "
                                    f"{'launched' if job.launched else job.state.value}")
        now = ev.time
        if job.ending_as is not None:
            cause = next((e.cause for e in reversed(job.events) if e.event is K.ENDING and e.cause), ev.cause)
            self._finish(job, now, job.ending_as, None, None, job.reason, cause)
            return []
        # No order can be open before a launch; one would be dropped all the same.
        self._let_go(job, now, ev.cause, "job requeued")
        job.requested_at = None
        job.state = JobState.PENDING
        job.hosts = []
        job.start_time = None
        job.limit_used, job.limit_since, job.limit_due = 0.0, None, None
        job.account(now)
        job.record(now, K.REQUEUED, ev.cause, ev.why)
        view = self._pending[job.job_id] = self._pending_view(job)
        self._pending = dict(sorted(self._pending.items()))
        self._pending_tuple = None
        self._minimum_in(view.min_nodes)
        self._refit(job)
        return []

    # ---- submission and scheduling ---------------------------------------------------
    def fit(self, spec: JobSpec) -> tuple[int, int, int]:
        """The job's (min, max, preferred) on this cluster (elasticd.core.sizes), or
        JobRejected when it could never start here."""
        return fit_bounds(spec.node_bounds, self._capacity, "nodes" if isinstance(spec.nodes, int) else "nodes.min")

    @property
    def _capacity(self) -> int:
        """The most nodes the cluster holds or may come to hold (an allocation that grows)."""
        return max(self.nodes.total, self.grow_to)

    def _refit(self, job: Job) -> None:
        """A pending job's range on the cluster as it is now; one whose minimum it cannot
        give stays queued but out of every policy's sight (an FCFS head waiting for nodes
        that do not exist would hold up the whole queue for ever), its reason saying what it
        lacks, until the cluster can hold it again."""
        bounds, lacking = refit_bounds(job.spec.node_bounds, self._capacity)
        jid = job.job_id
        if bounds == job.bounds and lacking == job.reason and (jid in self._cannot_start) == (lacking is not None):
            return
        self._mut(jid)
        job.bounds, job.reason = bounds, lacking
        if lacking is None:
            self._cannot_start.pop(jid, None)
        else:
            self._cannot_start[jid] = lacking
        self._minimum_out(self._pending[jid].min_nodes)
        view = self._pending[jid] = self._pending_view(job)
        self._pending_tuple = None
        self._minimum_in(view.min_nodes)

    def _submitted(self, ev: Submitted) -> list[Action]:
        if ev.job_id < self._next_id or ev.job_id in self.jobs:
            raise InvalidTransition(f"submitted as job {ev.job_id}; the next id is {self._next_id}")
        bounds = self.fit(ev.spec)
        job = new_job(ev.job_id, ev.spec, ev.time, self.record_hosts)
        job.bounds = bounds
        self._next_id = ev.job_id + 1
        self.jobs[job.job_id] = job
        if self._tx is not None:
            self._tx.created.add(job.job_id)
        self._pending[job.job_id] = self._pending_view(job)
        self._pending_tuple = None
        self._minimum_in(bounds[0])
        self._changed.add(job.job_id)
        job.record(ev.time, K.SUBMITTED, ev.cause)
        return []

    def _pass(self, ev: PassDue) -> list[Action]:
        """Ask the policy, check its decisions as a whole, then carry them out."""
        if not self._pending and not self._active:
            return []
        if not self._resizable:
            floor = self._floor
            if floor is None:
                floor = self._pending_floor()
            if self.nodes.free_count < floor and self._skippable():
                return []  # no start, grow or shrink could pass _check_pass: nothing to ask
        now = ev.time
        decisions = self.policy.decide(self.snapshot(now))
        if not decisions:
            return []
        self._check_pass(decisions, now)
        actions: list[Action] = []
        extend = actions.extend
        policy = Cause.POLICY
        for d in decisions:
            if type(d) is Start:  # the most frequent (checked to be one: _check_pass)
                extend(self._start(d, now))
            elif isinstance(d, Grow):
                extend(self._order_grow(d.job_id, d.by, now, policy))
            elif isinstance(d, Shrink):
                extend(self._order_shrink(d.job_id, d.by, now, policy))
            else:
                extend(self._start(d, now))
        return actions

    def _pending_floor(self) -> int:
        """The fewest nodes any pending job can start on (the minimum _check_pass holds a
        start to), or more than any cluster has when none waits."""
        floor = self._floor
        if floor is None:
            floor = self._floor = min(self._minima) if self._minima else _NO_FLOOR
        return floor

    def _minimum_in(self, lo: int) -> None:
        """A pending job of this minimum is queued (or its view made again)."""
        minima = self._minima
        minima[lo] = minima.get(lo, 0) + 1
        floor = self._floor
        if floor is not None and lo < floor:
            self._floor = lo

    def _minimum_out(self, lo: int) -> None:
        """A pending job of this minimum left the queue (or its view is being made again)."""
        minima = self._minima
        left = minima[lo] - 1
        if left:
            minima[lo] = left
        else:
            del minima[lo]
            if lo == self._floor:
                self._floor = None  # the next larger one, worked out when asked for

    def _skippable(self) -> bool:
        """Whether the policy may go unasked when no decision could be valid: it says its
        decisions depend on the snapshot alone (Policy.stateless). A policy that keeps what
        a pass saw (SD-Policy's promises) is asked on every pass."""
        return getattr(self.policy, "stateless", False) is True

    def _check_pass(self, decisions: list[Decision], now: float) -> None:
        """Raise PolicyError, before anything is applied, if any decision of the pass cannot
        be carried out after the ones before it: a pass is applied whole or not at all."""
        name = self.policy.name
        free = self.nodes.free_count
        decided: set[int] = set()
        jobs, active = self.jobs, self._active
        for d in decisions:
            jid = d.job_id
            if jid in decided:
                raise PolicyError(f"{name}: two decisions for job {jid} in one pass")
            decided.add(jid)
            job = jobs.get(jid)
            if type(d) is Start or isinstance(d, Start):  # the exact type first: without a call
                if job is None or jid not in self._pending:
                    raise PolicyError(f"{name}: start of job {jid}, which is not pending")
                lo, hi, _ = job.bounds
                if not lo <= d.nodes <= hi:
                    raise PolicyError(f"{name}: job {jid} started on {d.nodes} nodes, outside {lo}..{hi}")
                if d.nodes > free:
                    raise PolicyError(f"{name}: job {jid} started on {d.nodes} nodes, {free} free")
                free -= d.nodes
            elif isinstance(d, (Shrink, Grow)):
                shrink = isinstance(d, Shrink)
                if job is None or jid not in active:
                    raise PolicyError(f"{name}: {'shrink' if shrink else 'grow'} of job {jid}, which is not running")
                if job.kind not in RESIZABLE or not _policy_may_order(job, now):
                    raise PolicyError(
                        f"{name}: {'shrink' if shrink else 'grow'} of job {jid}, which cannot take an order now")
                lo, hi, _ = job.bounds
                size = len(job.hosts)
                by = d.by
                if shrink:
                    if not 1 <= by <= size - lo:
                        raise PolicyError(f"{name}: shrink of job {jid} by {by} from {size} (min {lo})")
                else:
                    if not 1 <= by <= min(hi - size, free):
                        raise PolicyError(f"{name}: grow of job {jid} by {by} from {size} (max {hi}, {free} free)")
                    free -= by
            else:
                raise PolicyError(f"{name}: unknown decision {d!r}")

    @staticmethod
    def _limit_of(job: Job) -> list[Action]:
        return [] if job.limit_due is None else [ArmLimit(job.job_id, job.limit_due)]

    @staticmethod
    def _rearm(job: Job, old: int, new: int, now: float) -> list[Action]:
        """The job changed size: its limit moves with its model (elasticd.core.limits)."""
        due = resize_limit(job, old, new, now)
        return [] if due is None else [ArmLimit(job.job_id, due)]

    def _start(self, d: Start, now: float) -> list[Action]:
        job = self._mut(d.job_id)
        job.hosts = self.nodes.allocate(job.job_id, d.nodes)
        job.state = JobState.RUNNING
        job.start_time = now
        start_limit(job, now)
        job.account(now)
        self._minimum_out(self._pending.pop(job.job_id).min_nodes)
        self._pending_tuple = None
        self._active[job.job_id] = None
        if job.kind in RESIZABLE:
            self._resizable.add(job.job_id)
        self._stale.add(job.job_id)
        job.record(now, K.STARTED, Cause.POLICY)
        launch = Launch(job.job_id, tuple(job.hosts))
        due = job.limit_due  # _limit_of, without its call and list: once per job
        return [launch] if due is None else [launch, ArmLimit(job.job_id, due)]

    def _launched(self, ev: Launched) -> list[Action]:
        job = self._mut(ev.job_id)
        if job.state.holds_nodes and not job.launched:
            job.launched = True
            job.record(ev.time, K.LAUNCHED, ev.cause)
        return []

    def _order_shrink(self, job_id: int, by: int, now: float, cause: Cause) -> list[Action]:
        job = self._mut(job_id)
        oid = self._new_order(job, OrderKind.SHRINK, by, (), now, cause)
        job.record(now, K.SHRINK_ORDERED, cause, f"order {oid}: shrink by {by}")
        return [SendOrder(job_id, oid, OrderKind.SHRINK, by, (), self.order_deadline)]

    def _order_grow(self, job_id: int, by: int, now: float, cause: Cause) -> list[Action]:
        job = self._mut(job_id)
        job.account(now)
        new = tuple(self.nodes.allocate(job_id, by))
        hosts = job.hosts
        hosts.extend(new)
        if job.requested:
            job.requested = max(0, job.requested - by)
        oid = self._new_order(job, OrderKind.GROW, by, new, now, cause)
        job.record(now, K.GROW_ORDERED, cause, f"order {oid}: grow by {by}")
        return [
            LaunchJoining(job_id, new, tuple(hosts)),
            SendOrder(job_id, oid, OrderKind.GROW, by, new, self.order_deadline),
        ]

    def _new_order(self, job: Job, kind: OrderKind, count: int, new: tuple[str, ...], now: float,
                   cause: Cause) -> int:
        """The job's new order (and it is RESIZING): the order's id."""
        oid = self._next_order
        job.order = Order(oid, job.job_id, kind, count, new, now, now + self.order_deadline, None, cause)
        self._next_order = oid + 1
        job.state = JobState.RESIZING
        return oid

    def _resize(self, ev: ResizeRequested) -> list[Action]:
        """A user's order (not a policy's): same checks, the problem said in words."""
        job_id, nodes, now = ev.job_id, ev.nodes, ev.time
        job = self.job(job_id)
        lo, hi, _ = job.bounds
        if job.kind not in RESIZABLE:
            raise ResizeRejected(f"job {job_id} is {job.kind.value}; only malleable and evolving jobs resize")
        if job_id not in self._active:
            raise ResizeRejected(f"job {job_id} is {job.state.value}, not running")
        if not self.can_take_order(job, now):
            raise ResizeRejected(f"job {job_id} cannot take an order now: {self.why_no_order(job, now)}")
        if not lo <= nodes <= hi:
            raise ResizeRejected(f"job {job_id} runs on {lo} to {hi} nodes, not {nodes}")
        if nodes > job.size and nodes - job.size > self.nodes.free_count:
            raise ResizeRejected(f"only {self.nodes.free_count} nodes are free")
        if ev.hold:
            self._mut(job_id)
            job.held = True
            job.record(now, K.HELD, ev.cause, f"at {nodes} nodes until `elasticd release {job_id}`")
        if nodes < job.size:
            return self._order_shrink(job_id, job.size - nodes, now, ev.cause)
        if nodes > job.size:
            return self._order_grow(job_id, nodes - job.size, now, ev.cause)
        return []

    def _hold_released(self, ev: HoldReleased) -> list[Action]:
        job = self.job(ev.job_id)
        if not job.held:
            raise ResizeRejected(f"job {ev.job_id} is not held")
        self._mut(ev.job_id)
        job.held = False
        job.record(ev.time, K.HOLD_RELEASED, ev.cause)
        return []

    # ---- the application's side of an order -----------------------------------------
    def _current_order(self, job: Job, order_id: int, kind: OrderKind | None = None) -> Order:
        order = job.order
        if order is None or order.order_id != order_id or order.settled is not None:
            raise OrderRejected("unknown_order", f"order {order_id} is not open for job {job.job_id}")
        if kind is not None and order.kind is not kind:
            raise OrderRejected("unknown_order", f"order {order_id} is a {order.kind.value}, not a {kind.value}")
        return order

    def _shrink_answered(self, ev: ShrinkAnswered) -> list[Action]:
        """The application released these hosts: end what is left of the job there."""
        job = self.job(ev.job_id)
        order = job.order
        if order is None or order.order_id != ev.order_id or order.settled is not None or order.kind is not SHRINK:
            order = self._current_order(job, ev.order_id, OrderKind.SHRINK)  # raises
        hosts = list(ev.hosts)
        if len(set(hosts)) != len(hosts) or len(hosts) != order.count:
            raise OrderRejected("bad_hosts", f"shrink {order.count}: name exactly {order.count} distinct hosts")
        self._check_own_hosts(job, hosts)
        self._mut(ev.job_id)
        order.settled = Settlement.SHRUNK
        job.leaving.update(hosts)
        return [Reclaim(ev.job_id, tuple(hosts), 0.0)]

    def _check_own_hosts(self, job: Job, hosts: list[str]) -> None:
        """Reject naming a host the job does not hold, or is already giving back."""
        if not job.leaving:
            # The hosts it got last (every shrink's answer): its own, as its host list is
            # what the node table says it holds; told without a lookup per host.
            k = len(hosts)
            if k and job.hosts[-k:] == hosts:
                return
        if not self.nodes.not_held(job.job_id, hosts) and job.leaving.isdisjoint(hosts):
            return
        holds = self.nodes.holds
        foreign = [h for h in hosts if not holds(job.job_id, h) or h in job.leaving]
        if foreign:
            raise OrderRejected("bad_hosts", f"not hosts of job {job.job_id}: {' '.join(foreign)}")

    def _grow_answered(self, ev: GrowAnswered) -> list[Action]:
        """The application runs on every host of the job, the new ones included."""
        job = self.job(ev.job_id)
        order = job.order
        if order is None or order.order_id != ev.order_id or order.settled is not None or order.kind is not GROW:
            order = self._current_order(job, ev.order_id, OrderKind.GROW)  # raises
        hosts = list(ev.hosts)
        if hosts != job.hosts and sorted(hosts) != sorted(job.hosts):
            raise OrderRejected(
                "bad_hosts", f"grow: name every host the job now uses: {' '.join(job.hosts)}"
            )
        self._mut(ev.job_id)
        job.order = None
        job.state = JobState.RUNNING
        job.last_resize = ev.time
        job.record(ev.time, K.GROWN, order.cause, f"order {order.order_id}: +{order.count}")
        size = len(job.hosts)
        return self._rearm(job, size - order.count, size, ev.time)

    def _refused(self, ev: OrderRefused) -> list[Action]:
        job = self.job(ev.job_id)
        order = self._current_order(job, ev.order_id)
        self._mut(ev.job_id)
        job.record(ev.time, K.REFUSED, ev.cause, f"order {ev.order_id}: {ev.reason}".strip())
        job.refused_until = ev.time + self.refuse_backoff
        return self._drop_order(job, order, Settlement.REFUSED)

    def _deferred(self, ev: OrderDeferred) -> list[Action]:
        job = self.job(ev.job_id)
        order = self._current_order(job, ev.order_id)
        if not 0 < ev.seconds <= 86400:
            raise OrderRejected("malformed", "defer: seconds must be in (0, 86400]")
        self._mut(ev.job_id)
        job.no_orders_until = ev.time + ev.seconds
        job.record(ev.time, K.DEFERRED, ev.cause, f"order {ev.order_id}: {ev.seconds:g} s")
        return self._drop_order(job, order, Settlement.DEFERRED)

    def _open_order(self, job_id: int, order_id: int) -> tuple[Job, Order] | None:
        """The job and its order, if that order is still open (timers may fire late)."""
        job = self.jobs.get(job_id)
        if job is None or job.order is None or job.order.order_id != order_id or job.order.settled:
            return None
        self._mut(job_id)
        return job, job.order

    def _deadline(self, ev: OrderDeadline) -> list[Action]:
        """No answer in time: the daemon decides for the application."""
        found = self._open_order(ev.job_id, ev.order_id)
        if found is None:
            return []
        job, order = found
        now = ev.time
        if order.kind is OrderKind.SHRINK:
            keep = [h for h in job.hosts if h not in job.leaving]
            chosen = keep[-order.count :]
            order.settled = Settlement.DEADLINE_MISSED
            job.leaving.update(chosen)
            job.record(now, K.DEADLINE_MISSED, ev.cause,
                       f"order {ev.order_id}: ending the job on {' '.join(chosen)}")
            return [Reclaim(ev.job_id, tuple(chosen), 0.0)]
        job.record(now, K.DEADLINE_MISSED, ev.cause, f"order {ev.order_id}: taking back {' '.join(order.new_hosts)}")
        return self._drop_order(job, order, Settlement.DEADLINE_MISSED)

    def _undeliverable(self, ev: OrderUndeliverable) -> list[Action]:
        found = self._open_order(ev.job_id, ev.order_id)
        if found is None:
            return []
        job, order = found
        job.record(ev.time, K.ORDER_FAILED, ev.cause, f"order {ev.order_id}: {ev.why or 'the application never had it (not connected, or it reconnected without it)'}")
        return self._drop_order(job, order, Settlement.ORDER_FAILED)

    def _join_launch_failed(self, ev: JoinLaunchFailed) -> list[Action]:
        """A grow's processes could not be started. While the grow is open, it fails like
        any grow that does not happen (_drop_order). Once the application took it, the job
        holds hosts where nothing of it runs: it goes on without them, as without a lost
        node, and they are reclaimed (whatever a partial start left) and then freed, the
        `released` entry and the limit following (_hosts_gone). An order opened since then
        was made for hosts the job no longer has: it is void (a shrink's count could take
        the job below its minimum). A job that cannot go on without them (its other hosts
        given back meanwhile) is ended. A job that ended, is being ended, or gave those hosts
        back already is left as it is."""
        job = self.jobs.get(ev.job_id)
        if job is None or ev.job_id not in self._active or job.ending_as is not None:
            return []
        now, order, failed = ev.time, job.order, set(ev.hosts)
        what = f"the processes for the grow could not be started on {' '.join(ev.hosts)}: {ev.why}"
        if (order is not None and order.settled is None and order.kind is OrderKind.GROW
                and not failed.isdisjoint(order.new_hosts)):
            self._mut(ev.job_id)
            job.record(now, K.ORDER_FAILED, ev.cause, f"order {order.order_id}: {what}")
            return self._drop_order(job, order, Settlement.ORDER_FAILED)
        take = [h for h in job.hosts if h in failed and h not in job.leaving]
        if not take:
            return []
        self._mut(ev.job_id)
        if order is not None and (order.settled is None or order.kind is OrderKind.GROW):
            if order.settled is None:
                job.record(now, K.ORDER_FAILED, ev.cause, f"order {order.order_id}: void: {what}")
                take.extend(order.new_hosts)  # a grow's, never started for the job now
            # A dropped grow whose hosts are still being reclaimed goes on as a release.
            job.order = None
            job.state = JobState.RUNNING
        lo = job.bounds[0]
        if job.size - len(job.leaving) - len(take) < lo:
            job.record(now, K.GROW_FAILED, ev.cause, what)
            return self._end(job, now, JobState.FAILED, f"{what}; without them it is below its minimum of {lo}",
                             ev.cause)
        job.leaving.update(take)
        job.release_cause = ev.cause
        job.record(now, K.GROW_FAILED, ev.cause, f"{what}; the job goes on without them")
        return [Reclaim(job.job_id, tuple(take), 0.0)]

    def _drop_order(self, job: Job, order: Order, why: Settlement) -> list[Action]:
        if order.kind is OrderKind.GROW and order.new_hosts:
            order.settled = why
            job.leaving.update(order.new_hosts)
            return [Reclaim(job.job_id, order.new_hosts, 0.0)]
        job.order = None
        if job.state is JobState.RESIZING:
            job.state = JobState.RUNNING
        return []

    def _hosts_gone(self, ev: HostsGone) -> list[Action]:
        """The driver verified that no process of the job is left on these hosts."""
        job = self._mut(ev.job_id)
        if job.job_id not in self._active:
            return []  # the whole job ended meanwhile; its nodes are already free
        now = ev.time
        leaving = job.leaving
        mine = list(ev.hosts) if leaving.issuperset(ev.hosts) else [h for h in ev.hosts if h in leaving]
        hosts = job.hosts
        before = len(hosts)
        job.account(now)
        self.nodes.release(job.job_id, mine)
        k = len(mine)
        if k and hosts[-k:] == mine:  # a shrink gives back the hosts it got last
            del hosts[-k:]
        else:
            gone = set(mine)
            job.hosts = [h for h in hosts if h not in gone]
        leaving.difference_update(mine)
        job.account(now)
        order = job.order
        if order is not None and order.settled and not job.leaving:
            if order.settled is Settlement.SHRUNK:
                job.record(now, K.SHRUNK, order.cause, f"order {order.order_id}: -{order.count}")
                job.last_resize = now
            elif order.settled is Settlement.DEADLINE_MISSED and order.kind is OrderKind.SHRINK:
                # The hosts were the daemon's choice, whoever asked for the shrink (README).
                job.record(now, K.SHRUNK, Cause.DAEMON, f"order {order.order_id}: -{order.count} (deadline missed)")
                job.last_resize = now
            job.order = None
            if job.state is JobState.RESIZING:
                job.state = JobState.RUNNING
        elif order is None and mine:
            job.record(now, K.RELEASED, job.release_cause or ev.cause, " ".join(mine))
            job.last_resize = now
        if not leaving:
            job.release_cause = None
        return self._rearm(job, before, len(job.hosts), now)

    # ---- registration and evolving requests ---------------------------------------------
    def _registered(self, ev: Registered) -> list[Action]:
        job = self._mut(ev.job_id)
        job.malleable_ready = not job.deregistered
        job.record(ev.time, K.REGISTERED, ev.cause)
        return []

    def _unregistered(self, ev: Unregistered) -> list[Action]:
        job = self._mut(ev.job_id)
        if ev.final:
            job.deregistered = True
        job.malleable_ready = False
        job.record(ev.time, K.DEREGISTERED if ev.final else K.UNREGISTERED, ev.cause)
        return []

    def _nodes_requested(self, ev: NodesRequested) -> list[Action]:
        job = self.job(ev.job_id)
        if job.kind is not JobKind.EVOLVING:
            raise OrderRejected("bad_request", f"job {ev.job_id} is {job.kind.value}; only evolving jobs request nodes")
        if job.deregistered:  # no order is sent after a deregister: nothing could grant it
            raise OrderRejected("deregistered", f"job {ev.job_id} deregistered for good; it is sent no grow")
        _lo, hi, _ = job.bounds
        room = hi - (job.size - len(job.leaving))
        if ev.count > room:
            raise OrderRejected("bad_request", f"request {ev.count}: job {ev.job_id} may grow by at most {room}")
        self._mut(ev.job_id)
        job.requested = ev.count
        job.requested_at = ev.time
        job.record(ev.time, K.REQUESTED, ev.cause, f"{ev.count} nodes")
        return []

    def _hosts_released(self, ev: HostsReleased) -> list[Action]:
        job = self.job(ev.job_id)
        hosts = list(ev.hosts)
        if job.kind is not JobKind.EVOLVING:
            raise OrderRejected("bad_request", f"job {ev.job_id} is {job.kind.value}; only evolving jobs release nodes")
        if job.order is not None:
            raise OrderRejected("busy", f"job {ev.job_id} has order {job.order.order_id} open; answer it first")
        if len(set(hosts)) != len(hosts) or not hosts:
            raise OrderRejected("bad_hosts", "release: name distinct hosts")
        self._check_own_hosts(job, hosts)
        lo, _hi, _ = job.bounds
        if job.size - len(job.leaving) - len(hosts) < lo:
            raise OrderRejected("bad_hosts", f"release: job {ev.job_id} may not go below {lo} nodes")
        self._mut(ev.job_id)
        job.leaving.update(hosts)
        job.release_cause = ev.cause
        return [Reclaim(ev.job_id, tuple(hosts), 0.0)]

    # ---- ending ----------------------------------------------------------------------------
    def _cancel(self, ev: CancelRequested) -> list[Action]:
        return self._cancel_job(self._mut(ev.job_id), ev.time, ev.cause, "cancelled by user")

    def _cancel_job(self, job: Job, now: float, cause: Cause, why: str) -> list[Action]:
        if job.state is JobState.PENDING:
            self._minimum_out(self._pending.pop(job.job_id).min_nodes)
            self._pending_tuple = None
            self._cannot_start.pop(job.job_id, None)
            job.state = JobState.CANCELLED
            job.end_time = now
            job.reason = why
            job.record(now, K.CANCELLED, cause, why)
            return []
        if job.state.holds_nodes:
            return self._end(job, now, JobState.CANCELLED, why, cause)
        return []  # already finished: cancelling is a no-op, as scancel on a done job

    def _limit_reached(self, ev: LimitReached) -> list[Action]:
        job = self._mut(ev.job_id)
        if not job.state.holds_nodes:
            return []
        return self._end(job, ev.time, JobState.TIMEOUT, "time limit reached", ev.cause)

    def _output_limit(self, ev: OutputLimitReached) -> list[Action]:
        job = self._mut(ev.job_id)
        if not job.state.holds_nodes:
            return []
        return self._end(job, ev.time, JobState.FAILED, ev.why, ev.cause)

    def _end(self, job: Job, now: float, as_state: JobState, why: str, cause: Cause) -> list[Action]:
        if job.ending_as is not None:
            return []  # already being ended; the first reason stands
        job.ending_as = as_state
        job.reason = why
        job.record(now, K.ENDING, cause, why)
        return [Terminate(job.job_id, tuple(job.hosts), as_state)]

    def _launch_failed(self, ev: LaunchFailed) -> list[Action]:
        """A job cancelled (or timed out) while it was being launched keeps that end state;
        the launch failure stays visible in its reason."""
        job = self._mut(ev.job_id)
        if not job.state.holds_nodes:
            raise InvalidTransition(f"job {ev.job_id}: launch failure reported while {job.state.value}")
        state = job.ending_as or JobState.FAILED
        self._finish(job, ev.time, state, ev.exit_code, None, f"launch failed: {ev.why}", ev.cause)
        return []

    def _exited(self, ev: Exited) -> list[Action]:
        """All of the job's processes are gone (verified by the driver): free its nodes."""
        job = self._mut(ev.job_id)
        if job.state not in HOLDING_STATES:  # not holds_nodes, without the property's call
            raise InvalidTransition(f"job {ev.job_id} exited while {job.state.value}")
        # Who ended it: whoever asked for the end (a user, a limit, a fault, the daemon's
        # stop), else the application itself, whatever its exit status.
        cause = Cause.APP
        if job.ending_as is not None:
            state = job.ending_as
            cause = next((e.cause for e in reversed(job.events) if e.event is K.ENDING and e.cause), ev.cause)
        elif ev.exit_code == 0 and not ev.signal:
            state = JobState.COMPLETED
        else:
            state = JobState.FAILED
        self._finish(job, ev.time, state, ev.exit_code, ev.signal, job.reason, cause)
        return []

    def _let_go(self, job: Job, now: float, cause: Cause, why: str) -> None:
        """The job holds nothing any more (it ended, or goes back to the queue): its nodes
        are free, an open order is dropped, and what it was doing with them is forgotten."""
        job.account(now)
        held = self.nodes.release_all(job.job_id)
        if held != len(job.hosts):
            raise InvalidTransition(f"job {job.job_id} held {held} nodes, its record says {len(job.hosts)}")
        self._forget_active(job.job_id)
        if job.order is not None:
            job.record(now, K.ORDER_DROPPED, cause, f"order {job.order.order_id}: {why}")
            job.order = None
        if job.leaving:
            job.leaving.clear()
        job.release_cause = None
        job.requested = 0
        job.malleable_ready = False

    def _finish(
        self,
        job: Job,
        now: float,
        state: JobState,
        exit_code: int | None,
        signal: int | None,
        reason: str | None,
        cause: Cause,
    ) -> None:
        self._let_go(job, now, cause, "job ended")
        job.state = state
        job.end_time = now
        job.exit_code = exit_code
        job.exit_signal = signal
        job.reason = reason
        job.account(now)
        job.record(now, K.ENDED, cause, _ended_text(state, exit_code, signal))
        job.hosts = []

    def _forget_active(self, job_id: int) -> None:
        if job_id in self._active:
            del self._active[job_id]
            self._running_tuple = None
            self._resizable.discard(job_id)
        self._stale.discard(job_id)
        if self._expiring:  # (both empty while no job defers, backs off or gives nodes back)
            self._expiring.pop(job_id, None)
        if self._incoming_of:
            self._incoming_of.pop(job_id, None)

    def _stop_all(self, ev: StopRequested) -> list[Action]:
        """Daemon shutdown: cancel the queue and end every running job."""
        actions: list[Action] = []
        for jid in [*self._pending, *self._active]:
            actions.extend(self._cancel_job(self._mut(jid), ev.time, ev.cause, "daemon stopped"))
        return actions

    # ---- nodes that stop answering (cluster mode) -----------------------------------------
    def _node_down(self, ev: NodeDown) -> list[Action]:
        """A node can no longer be reached: keep it out of allocations and settle its job.

        A malleable or evolving job that has registered, stays at or above its minimum
        without the node, and does not lose its first host (where its leader, the process
        that talks to the daemon, runs) goes on without it: the daemon reclaims the node as
        if the job had released it. Any other job ends as NODE_FAIL, as Slurm ends jobs on
        a failed node. The node is handed out again only after NodeUp.
        """
        name, now = ev.host, ev.time
        if name not in self.nodes.index:
            raise InvalidTransition(f"node_down: no node {name}")
        if name in self.nodes.down or name in self.nodes.gone:
            return []
        owner = self.nodes.owner_of(name)
        self.nodes.mark_down(name)
        if owner is None:
            return []
        job = self._mut(owner)
        if job.ending_as is not None or name in job.leaving:
            job.record(now, K.NODE_FAILED, ev.cause, name)
            return []  # already being ended or given back; the driver reports it gone
        order = job.order
        if order is not None and order.kind is OrderKind.GROW and not order.settled and name in order.new_hosts:
            job.record(now, K.NODE_FAILED, ev.cause, f"{name}: grow order {order.order_id} dropped")
            return self._drop_order(job, order, Settlement.NODE_FAILED)
        lo, _hi, _ = job.bounds
        if (
            job.kind in RESIZABLE
            and job.malleable_ready
            and not job.deregistered
            and name != job.hosts[0]
            and job.size - len(job.leaving) - 1 >= lo
        ):
            job.leaving.add(name)
            job.release_cause = ev.cause
            job.record(now, K.NODE_FAILED, ev.cause, f"{name}: the job goes on without it")
            return [Reclaim(job.job_id, (name,), 0.0)]
        job.record(now, K.NODE_FAILED, ev.cause, name)
        return self._end(job, now, JobState.NODE_FAIL, f"node {name} failed", ev.cause)

    def _node_up(self, ev: NodeUp) -> list[Action]:
        """The node answers again (and no process of a lost job is left there)."""
        if ev.host not in self.nodes.index:
            raise InvalidTransition(f"node_up: no node {ev.host}")
        if ev.host not in self.nodes.gone:
            self.nodes.mark_up(ev.host)
        return []

    # ---- the allocation itself grows and shrinks ----------------------------------------------
    def _nodes_added(self, ev: NodesAdded) -> list[Action]:
        before = self._capacity
        self.nodes.add(list(ev.hosts))
        self._refit_pending(before)
        return []

    def _nodes_removed(self, ev: NodesRemoved) -> list[Action]:
        """Only idle nodes leave, and never the cluster's first node (where the daemon runs):
        a job on a node to give back is the driver's business to move or wait for first."""
        members = self.nodes.members
        if members and members[0] in ev.hosts:
            raise InvalidTransition(f"{members[0]} is the cluster's first node; it is never given back")
        before = self._capacity
        self.nodes.remove(list(ev.hosts))
        self._refit_pending(before)
        return []

    def _refit_pending(self, capacity_before: int) -> None:
        """Pending jobs' ranges follow the cluster's size, both ways (_refit)."""
        if self._capacity != capacity_before:
            for jid in self._pending:
                self._refit(self.jobs[jid])
