"""Job states, named as Slurm names them so that users read them without a glossary."""

from enum import Enum


class JobState(str, Enum):
    PENDING = "PENDING"
    RUNNING = "RUNNING"
    RESIZING = "RESIZING"
    COMPLETED = "COMPLETED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"
    TIMEOUT = "TIMEOUT"
    NODE_FAIL = "NODE_FAIL"

    @property
    def is_final(self) -> bool:
        return self in FINAL_STATES

    @property
    def holds_nodes(self) -> bool:
        return self in HOLDING_STATES


HOLDING_STATES = frozenset({JobState.RUNNING, JobState.RESIZING})
FINAL_STATES = frozenset(
    {JobState.COMPLETED, JobState.FAILED, JobState.CANCELLED, JobState.TIMEOUT, JobState.NODE_FAIL}
)
