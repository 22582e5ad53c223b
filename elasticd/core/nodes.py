"""Which node belongs to which job; the one place that can say a node is free."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

from elasticd.errors import InvalidTransition


class NodeState(str, Enum):
    IDLE = "idle"
    ALLOCATED = "allocated"
    DOWN = "down"


@dataclass
class NodeTable:
    names: list[str]
    owner: dict[str, int | None] = field(default_factory=dict)
    down: set[str] = field(default_factory=set)

    def __post_init__(self) -> None:
        if len(set(self.names)) != len(self.names):
            raise ValueError("node names must be unique")
        for n in self.names:
            self.owner.setdefault(n, None)

    @property
    def total(self) -> int:
        return len(self.names)

    def free_hosts(self) -> list[str]:
        return [n for n in self.names if self.owner[n] is None and n not in self.down]

    @property
    def free_count(self) -> int:
        return len(self.free_hosts())

    def state_of(self, name: str) -> NodeState:
        if name in self.down:
            return NodeState.DOWN
        return NodeState.IDLE if self.owner[name] is None else NodeState.ALLOCATED

    def allocate(self, job_id: int, count: int) -> list[str]:
        """Lowest-named free nodes first, so placements are reproducible run to run."""
        free = self.free_hosts()
        if count > len(free):
            raise InvalidTransition(f"job {job_id}: {count} nodes asked, {len(free)} free")
        chosen = free[:count]
        for n in chosen:
            self.owner[n] = job_id
        return chosen

    def release(self, job_id: int, hosts: list[str]) -> None:
        for n in hosts:
            if self.owner.get(n) != job_id:
                raise InvalidTransition(f"job {job_id} releases {n}, which it does not hold")
        for n in hosts:
            self.owner[n] = None
