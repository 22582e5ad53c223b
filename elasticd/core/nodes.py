"""Which node belongs to which job; the one place that can say a node is free.

Free nodes are kept in a min-heap of their index so that allocating k of 5,000 nodes costs
O(k log n), not a scan of the machine: the simulator calls this tens of thousands of times.
"""

from __future__ import annotations

import heapq
from enum import Enum

from elasticd.errors import InvalidTransition


class NodeState(str, Enum):
    IDLE = "idle"
    ALLOCATED = "allocated"
    DOWN = "down"


class NodeTable:
    def __init__(self, names: list[str]) -> None:
        if len(set(names)) != len(names):
            raise ValueError("node names must be unique")
        self.names = list(names)
        self.index = {n: i for i, n in enumerate(self.names)}
        self.owner: dict[str, int | None] = {n: None for n in self.names}
        self.down: set[str] = set()
        self._free = list(range(len(self.names)))  # a valid heap: sorted
        self._free_count = len(self.names)

    @property
    def total(self) -> int:
        return len(self.names)

    @property
    def free_count(self) -> int:
        return self._free_count

    def free_hosts(self) -> list[str]:
        return [self.names[i] for i in sorted(self._free)]

    def state_of(self, name: str) -> NodeState:
        if name in self.down:
            return NodeState.DOWN
        return NodeState.IDLE if self.owner[name] is None else NodeState.ALLOCATED

    def allocate(self, job_id: int, count: int) -> list[str]:
        """Lowest-numbered free nodes first, so placements are reproducible run to run."""
        if count > self._free_count:
            raise InvalidTransition(f"job {job_id}: {count} nodes asked, {self._free_count} free")
        chosen = []
        for _ in range(count):
            name = self.names[heapq.heappop(self._free)]
            self.owner[name] = job_id
            chosen.append(name)
        self._free_count -= count
        return chosen

    def release(self, job_id: int, hosts: list[str]) -> None:
        for n in hosts:
            if self.owner.get(n) != job_id:
                raise InvalidTransition(f"job {job_id} releases {n}, which it does not hold")
        for n in hosts:
            self.owner[n] = None
            heapq.heappush(self._free, self.index[n])
        self._free_count += len(hosts)
