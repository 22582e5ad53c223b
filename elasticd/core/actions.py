"""What the core asks its driver to do; the daemon does it for real, the simulator in time."""

from __future__ import annotations

from dataclasses import dataclass

from elasticd.core.states import JobState


@dataclass(frozen=True)
class Launch:
    job_id: int
    hosts: tuple[str, ...]


@dataclass(frozen=True)
class Terminate:
    """End the job's processes on these hosts (SIGTERM, grace, SIGKILL), then report exit."""

    job_id: int
    hosts: tuple[str, ...]
    ending_as: JobState


Action = Launch | Terminate
