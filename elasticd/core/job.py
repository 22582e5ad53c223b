"""A job's record: its spec, where it runs, and the history the metrics are computed from."""

from __future__ import annotations

from dataclasses import MISSING, dataclass, field, fields
from functools import cached_property
from typing import NamedTuple

from elastic_protocol.jobspec import JobKind, JobSpec
from elastic_protocol.models import ReconfigCost, SpeedupModel
from elasticd.core.events import SIZE_CHANGES, Cause, JobEventKind
from elasticd.core.orders import Order
from elasticd.core.states import HOLDING_STATES, JobState

_new_event = tuple.__new__
REQUEUED = JobEventKind.REQUEUED
_REGISTRATION = frozenset({JobEventKind.REGISTERED, JobEventKind.UNREGISTERED, JobEventKind.DEREGISTERED})


class JobEvent(NamedTuple):
    """One entry of a job's history. A named tuple, not a frozen dataclass: a job gets one
    per state change and per resize (700K in a long simulation), and a tuple is made in
    half the time."""

    time: float
    event: JobEventKind
    nodes: int
    hosts: tuple[str, ...]
    detail: str | None = None
    cause: Cause | None = None  # who decided it; None in records older than causes


@dataclass
class Job:
    job_id: int
    spec: JobSpec
    submit_time: float
    state: JobState = JobState.PENDING
    hosts: list[str] = field(default_factory=list)
    start_time: float | None = None
    end_time: float | None = None
    exit_code: int | None = None
    exit_signal: int | None = None
    reason: str | None = None
    # Set when the daemon has been told to end the job (cancel, time limit): the state it
    # ends in once its processes are verified gone, whatever their exit status.
    ending_as: JobState | None = None
    malleable_ready: bool = False
    # The driver confirmed that the job's processes exist (Launched); until then a RUNNING
    # job holds its nodes but nothing runs on them yet.
    launched: bool = False
    # Deregistered before a final phase: never another order, even after a new register.
    deregistered: bool = False
    held: bool = False  # a user's resize holds its size: the policy does not change it
    last_resize: float | None = None
    order: Order | None = None
    # Hosts whose processes are being reclaimed (shrink, release, refused grow); they stay
    # owned by the job until the driver reports them gone.
    leaving: set[str] = field(default_factory=set)
    # Who made the job give hosts back outside an order (the application releasing them, a
    # node failing): the cause of the `released` entry once they are gone.
    release_cause: Cause | None = None
    # An evolving job's outstanding request for more nodes.
    requested: int = 0
    requested_at: float | None = None
    no_orders_until: float = 0.0
    refused_until: float = 0.0  # policies leave the job alone until then
    events: list[JobEvent] = field(default_factory=list)
    # Whether history entries keep the hosts (accounting, the journal, Gantt charts) or only
    # their number (a simulation that draws no chart: a resizing job's host lists were most
    # of a long simulation's memory).
    record_hosts: bool = True
    # The time limit as it stands (elasticd.core.limits): reference seconds used up to
    # limit_since, and when the limit falls at the current size.
    limit_used: float = 0.0
    limit_since: float | None = None
    limit_due: float | None = None
    node_seconds: float = 0.0
    _size_since: float | None = None
    # The (time, nodes) history read from `events[:_history_seen]` (size_history).
    _history: tuple[tuple[float, int], ...] = ()
    _history_seen: int = 0

    def __post_init__(self) -> None:
        # Derived once: the scheduler reads them for every job on every pass.
        self.kind: JobKind = self.spec.resolved_kind
        self.bounds: tuple[int, int, int] = self.spec.node_bounds
        self.time_limit: int | None = self.spec.limit_seconds
        self.evolution_steps: tuple[tuple[float, int], ...] = self.spec.evolution_steps
        # The size its time_limit holds at (elasticd.core.limits): the preferred size the job
        # file declares, not the fitted bounds' (cut to the machine), which would move the
        # limit's reference and end in TIMEOUT a job whose work fits its limit.
        self.limit_pref: int = self.bounds[2]

    # What its time limit is scaled by (elasticd.core.limits), parsed once, when first asked
    # for: the limit moves on every resize, a dozen per job under some policies, and a job
    # that only ever runs at its preferred size (every rigid one) never asks (parsing them
    # was half of making a job, and a simulation makes one per job of its trace).
    @cached_property
    def limit_speedup(self) -> SpeedupModel | None:
        model = self.spec.model
        return None if model is None else model.speedup_model

    @cached_property
    def limit_pref_speedup(self) -> float:
        """The speedup at limit_pref, which the limit's rate at every resize divides by."""
        s = self.limit_speedup
        return 1.0 if s is None else s.speedup(self.limit_pref)

    @cached_property
    def limit_cost(self) -> ReconfigCost | None:
        model = self.spec.model
        return None if model is None else model.reconfig_cost

    @property
    def size(self) -> int:
        return len(self.hosts)

    def record(self, now: float, event: JobEventKind, cause: Cause, detail: str | None = None) -> None:
        # tuple.__new__ is what JobEvent(...) calls, less a Python frame: several per resize.
        if not self.record_hosts:
            self.events.append(_new_event(JobEvent, (now, event, len(self.hosts), (), detail, cause)))
            return
        hosts = tuple(self.hosts)
        if self.events and self.events[-1].hosts == hosts:
            hosts = self.events[-1].hosts  # shared: half of a resizing job's events change no host
        self.events.append(_new_event(JobEvent, (now, event, len(hosts), hosts, detail, cause)))

    def connection_lost(self) -> bool:
        """Whether its application registered and its connection then closed (not a
        deregistration): it runs as rigid, no order reaching it, until it registers again."""
        for e in reversed(self.events):
            if e.event in _REGISTRATION:
                return e.event == JobEventKind.UNREGISTERED
        return False

    def size_history(self) -> tuple[tuple[float, int], ...]:
        """(time, nodes) of every size the job has had since its last start: what the
        policies replay its progress from, and what a recorded run is measured by. Events are
        only appended, so the history is extended from the ones not read yet: a job's view is
        rebuilt after every change, and a long-running malleable job has hundreds of events."""
        events = self.events
        seen = self._history_seen
        n = len(events)
        if seen != n:
            history = self._history
            new: list[tuple[float, int]] = []
            for e in events[seen:]:
                kind = e[1]
                if kind in SIZE_CHANGES:
                    if kind is REQUEUED:
                        # A start that went back to the queue was never launched: nothing ran
                        # then, and the job's history begins at its next start.
                        history, new = (), []
                    else:
                        new.append((e[0], e[2]))
            if new:
                history += tuple(new)
            self._history = history
            self._history_seen = n
        return self._history

    def account(self, now: float) -> None:
        """Close the current size segment so node_seconds is exact across resizes."""
        since = self._size_since
        if since is not None:
            d = now - since
            self.node_seconds += len(self.hosts) * (d if d > 0.0 else 0.0)  # noqa: FURB136  # max(0.0, d), without the call
        self._size_since = now if self.state in HOLDING_STATES else None  # holds_nodes, without the property call

    def node_seconds_at(self, now: float) -> float:
        """Node-seconds used so far, counting the segment still open."""
        if self._size_since is None:
            return self.node_seconds
        return self.node_seconds + self.size * max(0.0, now - self._size_since)

    def time_used(self, now: float) -> float:
        if self.start_time is None:
            return 0.0
        end = self.end_time if self.end_time is not None else now
        return max(0.0, end - self.start_time)

    @property
    def exit_text(self) -> str | None:
        return exit_text(self.exit_code, self.exit_signal)


# new_job's template: every field's default, in field order (the three without one first).
_REQUIRED = ("job_id", "spec", "submit_time")
_FRESH = ("hosts", "leaving", "events")  # made anew for each job (their default_factory)
_TEMPLATE: dict[str, object] = {}
for _f in fields(Job):
    if _f.default_factory is not MISSING:
        assert _f.name in _FRESH, f"Job.{_f.name}: a default_factory new_job does not make"
    elif _f.default is MISSING:
        assert _f.name in _REQUIRED, f"Job.{_f.name}: a field without a default new_job does not set"
    _TEMPLATE[_f.name] = None if _f.default is MISSING else _f.default
del _f
_new = object.__new__


def new_job(job_id: int, spec: JobSpec, submit_time: float, record_hosts: bool = True) -> Job:
    """Job(job_id=..., spec=..., submit_time=..., record_hosts=...): the same job, its fields
    in the same order, made from a copy of the defaults instead of the dataclass's __init__
    and its 33 attribute stores (a simulation makes one per job of its trace)."""
    job = _new(Job)
    d = job.__dict__
    d.update(_TEMPLATE)
    d["job_id"], d["spec"], d["submit_time"], d["record_hosts"] = job_id, spec, submit_time, record_hosts
    d["hosts"], d["leaving"], d["events"] = [], set(), []
    job.__post_init__()
    return job


def exit_text(exit_code: int | None, signal: int | None) -> str | None:
    """'CODE:SIGNAL' as Slurm shows it, or None when neither is known."""
    if exit_code is None and signal is None:
        return None
    return f"{exit_code or 0}:{signal or 0}"
