"""The state machine that both the daemon and the simulator drive.

Every method takes `now` from its caller and returns the actions to carry out; nothing here
waits, sleeps or does I/O. Nodes are handed back only when the driver reports that a job's
processes on them are gone (`exited`, `hosts_gone`), never when an end is merely asked for.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from elastic_protocol.jobspec import JobKind, JobSpec

from elasticd.core.actions import Action, Launch, LaunchJoining, Reclaim, SendOrder, Terminate
from elasticd.core.job import Job
from elasticd.core.nodes import NodeTable
from elasticd.core.orders import Order
from elasticd.core.states import JobState
from elasticd.errors import (
    InvalidTransition,
    JobRejected,
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
_SIZE_EVENTS = frozenset({"started", "grown", "shrunk", "released"})


def _size_history(job: Job) -> tuple[tuple[float, int], ...]:
    """(time, nodes) of every size the job has had since it started, for the policies that
    replay a job's progress under its performance model. Events are only appended, so the
    history is extended from the ones not read yet: a job's view is rebuilt after every
    change, and a long-running malleable job has hundreds of events."""
    events = job.events
    seen = job._history_seen
    if seen != len(events):
        new = tuple((e.time, e.nodes) for e in events[seen:] if e.event in _SIZE_EVENTS)
        if new:
            job._history += new
        job._history_seen = len(events)
    return job._history


class Core:
    def __init__(
        self,
        node_names: Iterable[str],
        policy: Policy,
        first_job_id: int = 1,
        order_deadline: float = 30.0,
        refuse_backoff: float = 10.0,
    ) -> None:
        self.nodes = NodeTable(list(node_names))
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
        self._active: dict[int, None] = {}
        # Policy views of running jobs, rebuilt only after the job changed (any mutating
        # call goes through job() or _touch()) or its deferral expired: a pass per event
        # on a 4,000-node trace must not rebuild every running job's view each time.
        self._views: dict[int, tuple[RunningView, float]] = {}
        # Jobs that may have changed since the driver last took them (take_changed): what a
        # journal writes. Every mutation goes through job(), _touch() or submit().
        self._changed: set[int] = set()

    # ---- queries -------------------------------------------------------------------
    def job(self, job_id: int) -> Job:
        """The job, for reading or changing it (its cached policy view is dropped)."""
        self._views.pop(job_id, None)
        self._changed.add(job_id)
        try:
            return self.jobs[job_id]
        except KeyError:
            raise UnknownJob(f"no job {job_id}") from None

    def _touch(self, job_id: int) -> Job | None:
        self._views.pop(job_id, None)
        self._changed.add(job_id)
        return self.jobs.get(job_id)

    def take_changed(self) -> list[Job]:
        """The jobs changed since the last call (in id order), for the driver to save."""
        if not self._changed:
            return []
        ids = sorted(self._changed)
        self._changed.clear()
        return [self.jobs[j] for j in ids if j in self.jobs]

    @property
    def next_order_id(self) -> int:
        return self._next_order

    def restore(self, jobs: list[Job], next_order: int, now: float) -> list[int]:
        """Take back the jobs a previous daemon saved, before anything else happens.

        Pending jobs keep their queue order (job id order, as submitted) and new ids
        continue after the highest one. Jobs that held nodes hold the same ones again but
        are not ready for orders until their application reconnects and registers. Returns
        the ids of such jobs whose nodes are not part of this cluster any more: the driver
        ends them (`lost`).
        """
        misplaced: list[int] = []
        for job in sorted(jobs, key=lambda j: j.job_id):
            self.jobs[job.job_id] = job
            self._next_id = max(self._next_id, job.job_id + 1)
            if job.state is JobState.PENDING:
                self._pending[job.job_id] = self._pending_view(job)
            elif job.state.holds_nodes:
                self._active[job.job_id] = None
                job.malleable_ready = False
                job.record(now, "recovered", "daemon restarted")
                try:
                    self.nodes.claim(job.job_id, job.hosts)
                except (KeyError, InvalidTransition):
                    job.hosts = []
                    misplaced.append(job.job_id)
        self._next_order = max(self._next_order, next_order)
        return misplaced

    def lost(self, job_id: int, now: float, why: str) -> None:
        """None of the job's processes is left and how they ended is unknown (NODE_FAIL)."""
        job = self.job(job_id)
        if not job.state.holds_nodes:
            raise InvalidTransition(f"job {job_id}: lost while {job.state.value}")
        self._finish(job, now, JobState.NODE_FAIL, None, None, why)

    @property
    def pending_ids(self) -> list[int]:
        return list(self._pending)

    @property
    def pending_count(self) -> int:
        return len(self._pending)

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
        return self.can_take_order(job, now) and now >= job.refused_until

    def why_no_order(self, job: Job, now: float) -> str:
        if not job.malleable_ready:
            return "it has not registered a handler" if not job.deregistered else "it deregistered for good"
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
        pending = tuple(self._pending.values())
        running = []
        incoming = 0
        views = self._views
        for jid in self._active:
            cached = views.get(jid)
            if cached is not None and now < cached[1]:
                view = cached[0]
            else:
                j = self.jobs[jid]
                view = self._running_view(j, now)
                # Until a deferral or back-off ends, when the view's malleable_ready flips.
                valid_until = math.inf
                if j.no_orders_until > now:
                    valid_until = j.no_orders_until
                if now < j.refused_until < valid_until:
                    valid_until = j.refused_until
                views[jid] = (view, valid_until)
            running.append(view)
            if view.ending:
                incoming += view.size + view.leaving
            else:
                incoming += view.leaving + view.shrinking
        return Snapshot(now, self.nodes.total, self.nodes.free_count, pending, tuple(running), incoming)

    def _running_view(self, j: Job, now: float) -> RunningView:
        lo, hi, pref = j.bounds
        assert j.start_time is not None
        return RunningView(
            job_id=j.job_id,
            kind=j.kind,
            size=j.size - len(j.leaving),
            min_nodes=lo,
            max_nodes=hi,
            preferred=pref,
            start_time=j.start_time,
            time_limit=j.time_limit,
            malleable_ready=self.policy_may_order(j, now),
            last_resize=j.last_resize,
            ending=j.ending_as is not None,
            resizing=j.order is not None or bool(j.leaving),
            requested=j.requested,
            requested_at=j.requested_at,
            leaving=len(j.leaving),
            shrinking=j.order.count if j.order and j.order.kind == "shrink" and not j.order.settled else 0,
            submit_time=j.submit_time,
            model=j.spec.model,
            evolution=j.spec.evolution_steps,
            history=_size_history(j),
        )

    @staticmethod
    def _pending_view(j: Job) -> PendingView:
        lo, hi, pref = j.bounds
        return PendingView(
            j.job_id, j.submit_time, j.kind, lo, hi, pref, j.time_limit, j.spec.model, j.spec.evolution_steps
        )

    # ---- submission and scheduling ---------------------------------------------------
    def check_fits(self, spec: JobSpec) -> None:
        """Reject at submit time what could never start here, one problem per line."""
        lo, _hi, _pref = spec.node_bounds
        if lo > self.nodes.total:
            field = "nodes" if isinstance(spec.nodes, int) else "nodes.min"
            raise JobRejected(
                [f"{field}: {lo} nodes requested but the cluster has {self.nodes.total}"]
            )

    def submit(self, spec: JobSpec, now: float) -> Job:
        self.check_fits(spec)
        job = Job(job_id=self._next_id, spec=spec, submit_time=now)
        self._next_id += 1
        self.jobs[job.job_id] = job
        self._pending[job.job_id] = self._pending_view(job)
        self._changed.add(job.job_id)
        job.record(now, "submitted")
        return job

    def schedule(self, now: float) -> list[Action]:
        """Ask the policy, then carry its decisions out; call after any event."""
        if not self._pending and not self._active:
            return []
        decisions = self.policy.decide(self.snapshot(now))
        actions: list[Action] = []
        for d in decisions:
            actions.extend(self._apply(d, now))
        return actions

    def _apply(self, d: Decision, now: float) -> list[Action]:
        if isinstance(d, Start):
            return self._start(d, now)
        if isinstance(d, Shrink):
            return self._order_shrink(d, now)
        if isinstance(d, Grow):
            return self._order_grow(d, now)
        raise PolicyError(f"{self.policy.name}: unknown decision {d!r}")

    def _start(self, d: Start, now: float) -> list[Action]:
        job = self._touch(d.job_id)
        if job is None or job.state is not JobState.PENDING:
            raise PolicyError(f"{self.policy.name}: start of job {d.job_id}, which is not pending")
        lo, hi, _ = job.bounds
        if not lo <= d.nodes <= hi:
            raise PolicyError(
                f"{self.policy.name}: job {d.job_id} started on {d.nodes} nodes, outside {lo}..{hi}"
            )
        if d.nodes > self.nodes.free_count:
            raise PolicyError(
                f"{self.policy.name}: job {d.job_id} started on {d.nodes} nodes, "
                f"{self.nodes.free_count} free"
            )
        job.hosts = self.nodes.allocate(job.job_id, d.nodes)
        job.state = JobState.RUNNING
        job.start_time = now
        job.account(now)
        del self._pending[job.job_id]
        self._active[job.job_id] = None
        job.record(now, "started")
        return [Launch(job.job_id, tuple(job.hosts))]

    def _resizable(self, job_id: int, what: str, now: float, by_user: bool = False) -> Job:
        job = self._touch(job_id)
        if job is None or job_id not in self._active:
            raise PolicyError(f"{self.policy.name}: {what} of job {job_id}, which is not running")
        may = self.can_take_order if by_user else self.policy_may_order
        if job.kind not in RESIZABLE or not may(job, now):
            raise PolicyError(f"{self.policy.name}: {what} of job {job_id}, which cannot take an order now")
        return job

    def _order_shrink(self, d: Shrink, now: float, by_user: bool = False) -> list[Action]:
        job = self._resizable(d.job_id, "shrink", now, by_user)
        lo, _hi, _ = job.bounds
        if not 1 <= d.by <= job.size - lo:
            raise PolicyError(
                f"{self.policy.name}: shrink of job {d.job_id} by {d.by} from {job.size} (min {lo})"
            )
        order = self._new_order(job, "shrink", d.by, (), now)
        job.record(now, "shrink_ordered", f"order {order.order_id}: shrink by {d.by}")
        return [SendOrder(job.job_id, order.order_id, "shrink", d.by, (), self.order_deadline)]

    def _order_grow(self, d: Grow, now: float, by_user: bool = False) -> list[Action]:
        job = self._resizable(d.job_id, "grow", now, by_user)
        _lo, hi, _ = job.bounds
        if not 1 <= d.by <= min(hi - job.size, self.nodes.free_count):
            raise PolicyError(
                f"{self.policy.name}: grow of job {d.job_id} by {d.by} from {job.size} "
                f"(max {hi}, {self.nodes.free_count} free)"
            )
        job.account(now)
        new = tuple(self.nodes.allocate(job.job_id, d.by))
        job.hosts.extend(new)
        if job.requested:
            job.requested = max(0, job.requested - d.by)
        order = self._new_order(job, "grow", d.by, new, now)
        job.record(now, "grow_ordered", f"order {order.order_id}: grow by {d.by}")
        return [
            LaunchJoining(job.job_id, new, tuple(job.hosts)),
            SendOrder(job.job_id, order.order_id, "grow", d.by, new, self.order_deadline),
        ]

    def _new_order(self, job: Job, kind: str, count: int, new: tuple[str, ...], now: float) -> Order:
        order = Order(self._next_order, job.job_id, kind, count, new, now, now + self.order_deadline)
        self._next_order += 1
        job.order = order
        job.state = JobState.RESIZING
        return order

    def resize(self, job_id: int, nodes: int, now: float) -> list[Action]:
        """A user's order (not a policy's): same checks, the problem said in words."""
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
        if nodes < job.size:
            return self._order_shrink(Shrink(job_id, job.size - nodes), now, by_user=True)
        if nodes > job.size:
            if nodes - job.size > self.nodes.free_count:
                raise ResizeRejected(f"only {self.nodes.free_count} nodes are free")
            return self._order_grow(Grow(job_id, nodes - job.size), now, by_user=True)
        return []

    # ---- the application's side of an order -----------------------------------------
    def _current_order(self, job: Job, order_id: int, kind: str | None = None) -> Order:
        order = job.order
        if order is None or order.order_id != order_id or order.settled is not None:
            raise OrderRejected("unknown_order", f"order {order_id} is not open for job {job.job_id}")
        if kind is not None and order.kind != kind:
            raise OrderRejected("unknown_order", f"order {order_id} is a {order.kind}, not a {kind}")
        return order

    def answer_shrink(self, job_id: int, order_id: int, hosts: list[str], now: float) -> list[Action]:
        """The application released these hosts: end what is left of the job there."""
        job = self.job(job_id)
        order = self._current_order(job, order_id, "shrink")
        if len(set(hosts)) != len(hosts) or len(hosts) != order.count:
            raise OrderRejected("bad_hosts", f"shrink {order.count}: name exactly {order.count} distinct hosts")
        self._check_own_hosts(job, hosts)
        order.settled = "shrunk"
        job.leaving.update(hosts)
        return [Reclaim(job_id, tuple(hosts), 0.0)]

    def _check_own_hosts(self, job: Job, hosts: list[str]) -> None:
        """Reject naming a host the job does not hold, or is already giving back."""
        holds = self.nodes.holds
        foreign = [h for h in hosts if not holds(job.job_id, h) or h in job.leaving]
        if foreign:
            raise OrderRejected("bad_hosts", f"not hosts of job {job.job_id}: {' '.join(foreign)}")

    def answer_grow(self, job_id: int, order_id: int, hosts: list[str], now: float) -> None:
        """The application runs on every host of the job, the new ones included."""
        job = self.job(job_id)
        order = self._current_order(job, order_id, "grow")
        if hosts != job.hosts and sorted(hosts) != sorted(job.hosts):
            raise OrderRejected(
                "bad_hosts", f"grow: name every host the job now uses: {' '.join(job.hosts)}"
            )
        job.order = None
        job.state = JobState.RUNNING
        job.last_resize = now
        job.record(now, "grown", f"order {order.order_id}: +{order.count}")

    def refuse_order(
        self, job_id: int, order_id: int, now: float, reason: str = "", defer: float | None = None
    ) -> list[Action]:
        job = self.job(job_id)
        order = self._current_order(job, order_id)
        if defer is not None:
            job.no_orders_until = now + defer
            job.record(now, "deferred", f"order {order_id}: {defer:g} s")
            return self._drop_order(job, order, "deferred", now)
        job.record(now, "refused", f"order {order_id}: {reason}".strip())
        job.refused_until = now + self.refuse_backoff
        return self._drop_order(job, order, "refused", now)

    def order_deadline_passed(self, job_id: int, order_id: int, now: float) -> list[Action]:
        """No answer in time: the daemon decides for the application."""
        job = self._touch(job_id)
        if job is None or job.order is None or job.order.order_id != order_id or job.order.settled:
            return []
        order = job.order
        if order.kind == "shrink":
            keep = [h for h in job.hosts if h not in job.leaving]
            chosen = keep[-order.count :]
            order.settled = "deadline_missed"
            job.leaving.update(chosen)
            job.record(now, "deadline_missed", f"order {order_id}: ending the job on {' '.join(chosen)}")
            return [Reclaim(job_id, tuple(chosen), 0.0)]
        job.record(now, "deadline_missed", f"order {order_id}: taking back {' '.join(order.new_hosts)}")
        return self._drop_order(job, order, "deadline_missed", now)

    def order_undeliverable(self, job_id: int, order_id: int, now: float) -> list[Action]:
        """The application's connection was gone when the order was to be sent or answered."""
        job = self._touch(job_id)
        if job is None or job.order is None or job.order.order_id != order_id or job.order.settled:
            return []
        job.record(now, "order_failed", f"order {order_id}: application not connected")
        return self._drop_order(job, job.order, "order_failed", now)

    def _drop_order(self, job: Job, order: Order, why: str, now: float) -> list[Action]:
        if order.kind == "grow" and order.new_hosts:
            order.settled = why
            job.leaving.update(order.new_hosts)
            return [Reclaim(job.job_id, order.new_hosts, 0.0)]
        job.order = None
        if job.state is JobState.RESIZING:
            job.state = JobState.RUNNING
        return []

    def hosts_gone(self, job_id: int, hosts: list[str], now: float) -> None:
        """The driver verified that no process of the job is left on these hosts."""
        job = self.job(job_id)
        if job.job_id not in self._active:
            return  # the whole job ended meanwhile; its nodes are already free
        mine = [h for h in hosts if h in job.leaving]
        job.account(now)
        self.nodes.release(job_id, mine)
        gone = set(mine)
        k = len(mine)
        if k and job.hosts[-k:] == mine:  # a shrink gives back the hosts it got last
            del job.hosts[-k:]
        else:
            job.hosts = [h for h in job.hosts if h not in gone]
        job.leaving -= gone
        job.account(now)
        order = job.order
        if order is not None and order.settled and not job.leaving:
            if order.settled == "shrunk":
                job.record(now, "shrunk", f"order {order.order_id}: -{order.count}")
                job.last_resize = now
            elif order.settled == "deadline_missed" and order.kind == "shrink":
                job.record(now, "shrunk", f"order {order.order_id}: -{order.count} (deadline missed)")
                job.last_resize = now
            job.order = None
            if job.state is JobState.RESIZING:
                job.state = JobState.RUNNING
        elif order is None and mine:
            job.record(now, "released", " ".join(mine))
            job.last_resize = now

    # ---- registration and evolving requests ---------------------------------------------
    def set_registered(self, job_id: int, registered: bool, now: float, final: bool = False) -> None:
        job = self.job(job_id)
        if final:
            job.deregistered = True
        job.malleable_ready = registered and not job.deregistered
        job.record(now, "registered" if registered else ("deregistered" if final else "unregistered"))

    def request_nodes(self, job_id: int, count: int, now: float) -> None:
        job = self.job(job_id)
        if job.kind is not JobKind.EVOLVING:
            raise OrderRejected("bad_request", f"job {job_id} is {job.kind.value}; only evolving jobs request nodes")
        _lo, hi, _ = job.bounds
        room = hi - (job.size - len(job.leaving))
        if count > room:
            raise OrderRejected("bad_request", f"request {count}: job {job_id} may grow by at most {room}")
        job.requested = count
        job.requested_at = now
        job.record(now, "requested", f"{count} nodes")

    def release_hosts(self, job_id: int, hosts: list[str], now: float) -> list[Action]:
        job = self.job(job_id)
        if job.kind is not JobKind.EVOLVING:
            raise OrderRejected("bad_request", f"job {job_id} is {job.kind.value}; only evolving jobs release nodes")
        if job.order is not None:
            raise OrderRejected("busy", f"job {job_id} has order {job.order.order_id} open; answer it first")
        if len(set(hosts)) != len(hosts) or not hosts:
            raise OrderRejected("bad_hosts", "release: name distinct hosts")
        self._check_own_hosts(job, hosts)
        lo, _hi, _ = job.bounds
        if job.size - len(job.leaving) - len(hosts) < lo:
            raise OrderRejected("bad_hosts", f"release: job {job_id} may not go below {lo} nodes")
        job.leaving.update(hosts)
        return [Reclaim(job_id, tuple(hosts), 0.0)]

    # ---- ending ----------------------------------------------------------------------------
    def cancel(self, job_id: int, now: float) -> list[Action]:
        job = self.job(job_id)
        if job.state is JobState.PENDING:
            del self._pending[job_id]
            job.state = JobState.CANCELLED
            job.end_time = now
            job.reason = "cancelled by user"
            job.record(now, "cancelled")
            return []
        if job.state.holds_nodes:
            return self._end(job, now, JobState.CANCELLED, "cancelled by user")
        return []  # already finished: cancelling is a no-op, as scancel on a done job

    def time_limit_reached(self, job_id: int, now: float) -> list[Action]:
        job = self.job(job_id)
        if not job.state.holds_nodes:
            return []
        return self._end(job, now, JobState.TIMEOUT, "time limit reached")

    def _end(self, job: Job, now: float, as_state: JobState, why: str) -> list[Action]:
        if job.ending_as is not None:
            return []  # already being ended; the first reason stands
        job.ending_as = as_state
        job.reason = why
        job.record(now, "ending", why)
        return [Terminate(job.job_id, tuple(job.hosts), as_state)]

    def launch_failed(self, job_id: int, now: float, why: str) -> None:
        """The driver could not start the job's processes; none of them is left.

        A job cancelled (or timed out) while it was being launched keeps that end state;
        the launch failure stays visible in its reason.
        """
        job = self.job(job_id)
        if not job.state.holds_nodes:
            raise InvalidTransition(f"job {job_id}: launch failure reported while {job.state.value}")
        state = job.ending_as or JobState.FAILED
        self._finish(job, now, state, None, None, f"launch failed: {why}")

    def exited(self, job_id: int, now: float, exit_code: int | None, signal: int | None) -> None:
        """All of the job's processes are gone (verified by the driver): free its nodes."""
        job = self.job(job_id)
        if not job.state.holds_nodes:
            raise InvalidTransition(f"job {job_id} exited while {job.state.value}")
        if job.ending_as is not None:
            state = job.ending_as
        elif exit_code == 0 and not signal:
            state = JobState.COMPLETED
        else:
            state = JobState.FAILED
        self._finish(job, now, state, exit_code, signal, job.reason)

    def _finish(
        self,
        job: Job,
        now: float,
        state: JobState,
        exit_code: int | None,
        signal: int | None,
        reason: str | None,
    ) -> None:
        job.account(now)
        held = self.nodes.release_all(job.job_id)
        if held != len(job.hosts):
            raise InvalidTransition(f"job {job.job_id} held {held} nodes, its record says {len(job.hosts)}")
        self._active.pop(job.job_id, None)
        if job.order is not None:
            job.record(now, "order_dropped", f"order {job.order.order_id}: job ended")
            job.order = None
        job.leaving.clear()
        job.requested = 0
        job.malleable_ready = False
        job.state = state
        job.end_time = now
        job.exit_code = exit_code
        job.exit_signal = signal
        job.reason = reason
        job.account(now)
        job.record(now, "ended", f"{state.value} {job.exit_text or ''}".strip())
        job.hosts = []
        self._views.pop(job.job_id, None)

    def stop_all(self, now: float) -> list[Action]:
        """Daemon shutdown: cancel the queue and end every running job."""
        for jid in list(self._pending):
            self.cancel(jid, now)
            self.jobs[jid].reason = "daemon stopped"
        actions: list[Action] = []
        for jid in list(self._active):
            actions.extend(self._end(self.job(jid), now, JobState.CANCELLED, "daemon stopped"))
        return actions

    # ---- nodes that stop answering (cluster mode) -----------------------------------------
    def node_down(self, name: str, now: float) -> list[Action]:
        """A node can no longer be reached: keep it out of allocations and settle its job.

        A malleable or evolving job that has registered, stays at or above its minimum
        without the node, and does not lose its first host (where its leader, the process
        that talks to the daemon, runs) goes on without it: the daemon reclaims the node as
        if the job had released it. Any other job ends as NODE_FAIL, as Slurm ends jobs on
        a failed node. The node is handed out again only after node_up.
        """
        if name not in self.nodes.index:
            raise InvalidTransition(f"node_down: no node {name}")
        if name in self.nodes.down:
            return []
        owner = self.nodes.owner_of(name)
        self.nodes.mark_down(name)
        if owner is None:
            return []
        job = self.job(owner)
        if job.ending_as is not None or name in job.leaving:
            job.record(now, "node_failed", name)
            return []  # already being ended or given back; the driver reports it gone
        order = job.order
        if order is not None and order.kind == "grow" and not order.settled and name in order.new_hosts:
            job.record(now, "node_failed", f"{name}: grow order {order.order_id} dropped")
            return self._drop_order(job, order, "node_failed", now)
        lo, _hi, _ = job.bounds
        if (
            job.kind in RESIZABLE
            and job.malleable_ready
            and not job.deregistered
            and name != job.hosts[0]
            and job.size - len(job.leaving) - 1 >= lo
        ):
            job.leaving.add(name)
            job.record(now, "node_failed", f"{name}: the job goes on without it")
            return [Reclaim(job.job_id, (name,), 0.0)]
        job.record(now, "node_failed", name)
        return self._end(job, now, JobState.NODE_FAIL, f"node {name} failed")

    def node_up(self, name: str, now: float) -> None:
        """The node answers again (and no process of a lost job is left there)."""
        if name not in self.nodes.index:
            raise InvalidTransition(f"node_up: no node {name}")
        self.nodes.mark_up(name)
