"""What the core asks its driver to do; the daemon does it for real, the simulator in time."""

from __future__ import annotations

from dataclasses import dataclass

from elasticd.core.events import OrderKind
from elasticd.core.fastinit import fast_init
from elasticd.core.states import JobState


@dataclass(frozen=True, slots=True)
class Launch:
    job_id: int
    hosts: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Terminate:
    """End the job's processes on these hosts (SIGTERM, grace, SIGKILL), then report exit."""

    job_id: int
    hosts: tuple[str, ...]
    ending_as: JobState


@dataclass(frozen=True, slots=True)
class LaunchJoining:
    """Start the job's command on new hosts of a running job (a grow); `all_hosts` is the
    job's host list including them, in order."""

    job_id: int
    hosts: tuple[str, ...]
    all_hosts: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class SendOrder:
    job_id: int
    order_id: int
    kind: OrderKind
    count: int
    hosts: tuple[str, ...]  # the new hosts of a grow; empty for a shrink
    deadline_s: float


@dataclass(frozen=True, slots=True)
class Reclaim:
    """Make sure no process of the job is left on these hosts: let them exit on their own
    for `grace` seconds, then end them; report with a HostsGone event."""

    job_id: int
    hosts: tuple[str, ...]
    grace: float


@dataclass(frozen=True, slots=True)
class ArmLimit:
    """The job's time limit falls at `at` (seconds, the driver's clock): feed LimitReached
    then. Time limits are the core's rule, so both clocks end a job at the same instant."""

    job_id: int
    at: float


Action = Launch | Terminate | LaunchJoining | SendOrder | Reclaim | ArmLimit

for _type in (Launch, Terminate, LaunchJoining, SendOrder, Reclaim, ArmLimit):
    fast_init(_type)
