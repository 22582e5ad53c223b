"""Which node belongs to which job; the one place that can say a node is free.

Free nodes are kept as sorted, disjoint index intervals and owners in a flat list, so that
giving a 1,000-node job its nodes is a few slice operations rather than 1,000 dictionary
updates: the simulator does this for every job of a 4,000-node trace.
"""

from __future__ import annotations

import bisect
from enum import Enum

from elasticd.errors import InvalidTransition


class NodeState(str, Enum):
    IDLE = "idle"
    ALLOCATED = "allocated"
    DOWN = "down"


def _runs(indices: list[int]) -> list[tuple[int, int]]:
    """Sorted indices -> [start, end) runs of consecutive ones."""
    if not indices:
        return []
    pairs = list(zip(indices, indices[1:]))
    starts = [indices[0]] + [b for a, b in pairs if b != a + 1]
    ends = [a + 1 for a, b in pairs if b != a + 1] + [indices[-1] + 1]
    return list(zip(starts, ends))


class NodeTable:
    def __init__(self, names: list[str]) -> None:
        if len(set(names)) != len(names):
            raise ValueError("node names must be unique")
        self.names = list(names)
        self.index = {n: i for i, n in enumerate(self.names)}
        self._owner: list[int | None] = [None] * len(self.names)
        self.down: set[str] = set()
        # Disjoint free intervals [start, end), sorted by start.
        self._starts: list[int] = [0] if self.names else []
        self._ends: list[int] = [len(self.names)] if self.names else []
        self._free_count = len(self.names)

    @property
    def total(self) -> int:
        return len(self.names)

    @property
    def free_count(self) -> int:
        return self._free_count

    def owner_of(self, name: str) -> int | None:
        return self._owner[self.index[name]]

    @property
    def owner(self) -> dict[str, int | None]:
        """Every node's job (None when free); built on demand, for status displays."""
        return dict(zip(self.names, self._owner))

    def free_hosts(self) -> list[str]:
        out: list[str] = []
        for s, e in zip(self._starts, self._ends):
            out.extend(self.names[s:e])
        return out

    def state_of(self, name: str) -> NodeState:
        if name in self.down:
            return NodeState.DOWN
        return NodeState.IDLE if self.owner_of(name) is None else NodeState.ALLOCATED

    def allocate(self, job_id: int, count: int) -> list[str]:
        """Lowest-numbered free nodes first, so placements are reproducible run to run."""
        if count > self._free_count:
            raise InvalidTransition(f"job {job_id}: {count} nodes asked, {self._free_count} free")
        chosen: list[str] = []
        need = count
        while need:
            s, e = self._starts[0], self._ends[0]
            take = min(need, e - s)
            self._owner[s : s + take] = [job_id] * take
            chosen.extend(self.names[s : s + take])
            if take == e - s:
                del self._starts[0], self._ends[0]
            else:
                self._starts[0] = s + take
            need -= take
        self._free_count -= count
        return chosen

    def claim(self, job_id: int, hosts: list[str]) -> None:
        """Give the job exactly these free nodes (a job found again after a daemon restart)."""
        idx = [self.index[h] for h in hosts]
        taken = [self.names[i] for i in idx if self._owner[i] is not None]
        if taken or len(set(idx)) != len(idx):
            raise InvalidTransition(f"job {job_id}: nodes {' '.join(taken) or 'named twice'} not free")
        for i in idx:
            self._owner[i] = job_id
            if self.names[i] not in self.down:
                self._take_free(i)

    def _take_free(self, i: int) -> None:
        """Remove index i from the free intervals (it must be in one)."""
        j = bisect.bisect_right(self._starts, i) - 1
        s, e = self._starts[j], self._ends[j]
        del self._starts[j], self._ends[j]
        for a, b in ((s, i), (i + 1, e)):
            if a < b:
                self._insert_free(a, b)
        self._free_count -= 1

    def release(self, job_id: int, hosts: list[str]) -> None:
        if not hosts:
            return
        idx = sorted(map(self.index.__getitem__, hosts))
        if len(set(idx)) != len(idx):
            raise InvalidTransition(f"job {job_id} releases a node twice")
        # Most jobs hold one contiguous block: skip the per-node run detection then.
        runs = [(idx[0], idx[-1] + 1)] if idx[-1] - idx[0] + 1 == len(idx) else _runs(idx)
        for s, e in runs:
            if self._owner[s:e].count(job_id) != e - s:
                bad = next(self.names[i] for i in range(s, e) if self._owner[i] != job_id)
                raise InvalidTransition(f"job {job_id} releases {bad}, which it does not hold")
        freed = len(idx)
        for s, e in runs:
            self._owner[s:e] = [None] * (e - s)
            if self.down:
                freed -= self._insert_free_up(s, e)
            else:
                self._insert_free(s, e)
        self._free_count += freed

    # ---- nodes that stop answering (cluster mode) -----------------------------------------
    def mark_down(self, name: str) -> None:
        """Keep the node out of every allocation until mark_up; its owner keeps it meanwhile."""
        if name in self.down:
            return
        self.down.add(name)
        i = self.index[name]
        if self._owner[i] is None:
            self._take_free(i)

    def mark_up(self, name: str) -> None:
        if name not in self.down:
            return
        self.down.discard(name)
        i = self.index[name]
        if self._owner[i] is None:
            self._insert_free(i, i + 1)
            self._free_count += 1

    def _insert_free_up(self, s: int, e: int) -> int:
        """Free [s, e) except its down nodes; how many down nodes were skipped."""
        skipped = 0
        start = s
        for i in range(s, e):
            if self.names[i] in self.down:
                if start < i:
                    self._insert_free(start, i)
                start = i + 1
                skipped += 1
        if start < e:
            self._insert_free(start, e)
        return skipped

    def _insert_free(self, s: int, e: int) -> None:
        i = bisect.bisect_left(self._starts, s)
        # Merge with the interval before and/or after when they touch.
        if i > 0 and self._ends[i - 1] == s:
            i -= 1
            self._ends[i] = e
        else:
            self._starts.insert(i, s)
            self._ends.insert(i, e)
        if i + 1 < len(self._starts) and self._starts[i + 1] == self._ends[i]:
            self._ends[i] = self._ends[i + 1]
            del self._starts[i + 1], self._ends[i + 1]
