"""What flows into the core: a closed set of frozen events, each with its time and cause.

The daemon turns sockets, process exits and timers into these; the simulator makes them in
virtual time; a replay reads them back from a run's event log. `Core.handle` is the one entry
point, so whatever a driver does to a job is one of these, and an event log holding them is
enough to rebuild every decision the core made.

Why causes: an accounting of resource changes must say who decided each one (the policy, a
user, the application, a fault, a time limit, the daemon itself). Every event type has one.
"""

from __future__ import annotations

import typing
from dataclasses import dataclass
from enum import StrEnum
from typing import ClassVar

from elastic_protocol.jobspec import JobSpec
from elasticd.core.fastinit import fast_init


class Cause(StrEnum):
    POLICY = "policy"
    USER = "user"
    APP = "app"
    FAULT = "fault"
    LIMIT = "limit"
    DAEMON = "daemon"


class JobEventKind(StrEnum):
    """The kinds of entries in a job's history (`Job.events`); a StrEnum, so the journal and
    `equeue --json` keep plain strings."""

    SUBMITTED = "submitted"
    STARTED = "started"
    LAUNCHED = "launched"
    SHRINK_ORDERED = "shrink_ordered"
    GROW_ORDERED = "grow_ordered"
    SHRUNK = "shrunk"
    GROWN = "grown"
    RELEASED = "released"
    REFUSED = "refused"
    DEFERRED = "deferred"
    DEADLINE_MISSED = "deadline_missed"
    ORDER_FAILED = "order_failed"
    ORDER_DROPPED = "order_dropped"
    GROW_FAILED = "grow_failed"  # a grow the application took never started on its hosts
    REGISTERED = "registered"
    UNREGISTERED = "unregistered"
    DEREGISTERED = "deregistered"
    REQUESTED = "requested"
    HELD = "held"
    HOLD_RELEASED = "hold_released"
    ENDING = "ending"
    ENDED = "ended"
    CANCELLED = "cancelled"
    NODE_FAILED = "node_failed"
    RECOVERED = "recovered"
    REQUEUED = "requeued"


# The entries after which a job holds a different number of nodes (for the policies that
# replay a job's progress, for accounting, for the simulator's outcomes): defined here once.
# A requeued job holds none again (its start was never launched; see NeverLaunched).
SIZE_CHANGES: frozenset[JobEventKind] = frozenset(
    {JobEventKind.STARTED, JobEventKind.GROWN, JobEventKind.SHRUNK, JobEventKind.RELEASED, JobEventKind.REQUEUED}
)


class OrderKind(StrEnum):
    SHRINK = "shrink"
    GROW = "grow"


@dataclass(frozen=True, slots=True)
class _Event:
    time: float
    cause: ClassVar[Cause] = Cause.DAEMON


# ---- users (control channel) -----------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Submitted(_Event):
    """A job was accepted; `job_id` is `Core.next_job_id` when it was made."""

    job_id: int
    spec: JobSpec
    cause: ClassVar[Cause] = Cause.USER


@dataclass(frozen=True, slots=True)
class CancelRequested(_Event):
    job_id: int
    cause: ClassVar[Cause] = Cause.USER


@dataclass(frozen=True, slots=True)
class ResizeRequested(_Event):
    """A user's resize of a running malleable or evolving job, whatever the policy."""

    job_id: int
    nodes: int
    hold: bool = False  # and keep it there: no policy resizes it until HoldReleased
    cause: ClassVar[Cause] = Cause.USER


@dataclass(frozen=True, slots=True)
class HoldReleased(_Event):
    """The user lets the policy resize the job again."""

    job_id: int
    cause: ClassVar[Cause] = Cause.USER


@dataclass(frozen=True, slots=True)
class StopRequested(_Event):
    """The daemon is stopping: the queue is cancelled and every running job ended."""


# ---- the scheduler ------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class PassDue(_Event):
    """Ask the policy now. A pass is a transaction: its decisions are checked as a whole
    before any is applied."""

    cause: ClassVar[Cause] = Cause.POLICY


# ---- processes (the launcher) -------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Launched(_Event):
    """The job's processes exist on every host it was started on."""

    job_id: int


@dataclass(frozen=True, slots=True)
class LaunchFailed(_Event):
    """The job's processes could not be started; none of them is left. `exit_code` as a
    shell would give it: 127 command not found, 126 not executable, 1 anything else."""

    job_id: int
    why: str
    exit_code: int = 1
    cause: ClassVar[Cause] = Cause.FAULT


@dataclass(frozen=True, slots=True)
class Exited(_Event):
    """Every process of the job is gone (verified by the driver)."""

    job_id: int
    exit_code: int | None
    signal: int | None


@dataclass(frozen=True, slots=True)
class JoinLaunchFailed(_Event):
    """A grow's processes could not be started on its new hosts (LaunchJoining failed); the
    launcher left none of them there. The core decides what that means: while the grow is
    open, the order fails (its hosts are taken back, as for any grow that does not happen);
    once the application took it (`grown`, which may come first: it need not wait for the
    start), the job runs without those hosts and they are taken back all the same."""

    job_id: int
    hosts: tuple[str, ...]
    why: str
    cause: ClassVar[Cause] = Cause.FAULT


@dataclass(frozen=True, slots=True)
class HostsGone(_Event):
    """No process of the job is left on these hosts (after a Reclaim)."""

    job_id: int
    hosts: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class JobLost(_Event):
    """None of the job's processes is left and how they ended is unknown (NODE_FAIL)."""

    job_id: int
    why: str
    cause: ClassVar[Cause] = Cause.FAULT


@dataclass(frozen=True, slots=True)
class NeverLaunched(_Event):
    """After a daemon restart: the job's start was recorded but not its launch, and no process
    of it exists on any of its hosts (all of them checked), none ever started or those of a
    launch the crash cut short ended by the driver. It never ran whole, so it can simply be
    started again: it goes back to the queue, as Slurm requeues a job whose launch failed
    before it ran, rather than ending as a failure (JobLost) for a crash of the daemon."""

    job_id: int
    why: str


@dataclass(frozen=True, slots=True)
class LimitReached(_Event):
    """The job's time limit fell (the driver armed it from an ArmLimit action)."""

    job_id: int
    cause: ClassVar[Cause] = Cause.LIMIT


@dataclass(frozen=True, slots=True)
class OutputLimitReached(_Event):
    """The job's output files passed their cap: it is ended, FAILED, with the reason."""

    job_id: int
    why: str
    cause: ClassVar[Cause] = Cause.LIMIT


# ---- the application channel ------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Registered(_Event):
    job_id: int
    cause: ClassVar[Cause] = Cause.APP


@dataclass(frozen=True, slots=True)
class Unregistered(_Event):
    """final: the application deregistered for good (before its final phase); otherwise its
    connection closed and it runs on as rigid until it registers again."""

    job_id: int
    final: bool = False
    cause: ClassVar[Cause] = Cause.APP


@dataclass(frozen=True, slots=True)
class ShrinkAnswered(_Event):
    job_id: int
    order_id: int
    hosts: tuple[str, ...]
    cause: ClassVar[Cause] = Cause.APP


@dataclass(frozen=True, slots=True)
class GrowAnswered(_Event):
    job_id: int
    order_id: int
    hosts: tuple[str, ...]
    cause: ClassVar[Cause] = Cause.APP


@dataclass(frozen=True, slots=True)
class OrderRefused(_Event):
    job_id: int
    order_id: int
    reason: str = ""
    cause: ClassVar[Cause] = Cause.APP


@dataclass(frozen=True, slots=True)
class OrderDeferred(_Event):
    job_id: int
    order_id: int
    seconds: float
    cause: ClassVar[Cause] = Cause.APP


@dataclass(frozen=True, slots=True)
class OrderDeadline(_Event):
    """No answer in time: the daemon decides for the application."""

    job_id: int
    order_id: int


@dataclass(frozen=True, slots=True)
class OrderUndeliverable(_Event):
    """The application's connection was gone when the order was to be sent or answered, or
    (`why`) a grow's new process died before the application took it."""

    job_id: int
    order_id: int
    why: str = ""
    cause: ClassVar[Cause] = Cause.FAULT


@dataclass(frozen=True, slots=True)
class NodesRequested(_Event):
    """An evolving job asks for more nodes."""

    job_id: int
    count: int
    cause: ClassVar[Cause] = Cause.APP


@dataclass(frozen=True, slots=True)
class HostsReleased(_Event):
    """An evolving job gives hosts back."""

    job_id: int
    hosts: tuple[str, ...]
    cause: ClassVar[Cause] = Cause.APP


# ---- nodes --------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class NodeDown(_Event):
    host: str
    cause: ClassVar[Cause] = Cause.FAULT


@dataclass(frozen=True, slots=True)
class NodeUp(_Event):
    host: str
    cause: ClassVar[Cause] = Cause.FAULT


@dataclass(frozen=True, slots=True)
class NodesAdded(_Event):
    """The allocation grew: these nodes (reachable, verified by the driver) join as free.
    `refused`: they are back because the batch system refused the NodesRemoved just before
    (they never left the allocation: accounting counts them as held throughout)."""

    hosts: tuple[str, ...]
    refused: bool = False


@dataclass(frozen=True, slots=True)
class NodesRemoved(_Event):
    """The allocation shrank: these idle nodes were given back to the batch system."""

    hosts: tuple[str, ...]


Event = (
    Submitted | CancelRequested | ResizeRequested | HoldReleased | StopRequested | PassDue
    | Launched | LaunchFailed | JoinLaunchFailed | Exited | HostsGone | JobLost | NeverLaunched | LimitReached | OutputLimitReached
    | Registered | Unregistered | ShrinkAnswered | GrowAnswered | OrderRefused | OrderDeferred
    | OrderDeadline | OrderUndeliverable | NodesRequested | HostsReleased | NodeDown | NodeUp
    | NodesAdded | NodesRemoved
)

# Every kind of event, for decoding a log: the members of `Event`, named once.
EVENT_TYPES: tuple[type[_Event], ...] = typing.get_args(Event)

for _type in EVENT_TYPES:
    fast_init(_type)
