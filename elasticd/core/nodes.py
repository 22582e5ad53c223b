"""Which node belongs to which job; the one place that can say a node is free.

Free nodes, and each job's nodes, are kept as sorted, disjoint index intervals, and owners
in a flat list, so that giving a 1,000-node job its nodes, or taking them back when it
ends, is a few slice operations rather than 1,000 dictionary updates: the simulator does
this for every job of a 4,000-node trace.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterator
from enum import Enum
from operator import sub

from elasticd.errors import InvalidTransition


class NodeState(str, Enum):
    IDLE = "idle"
    ALLOCATED = "allocated"
    DOWN = "down"
    GONE = "gone"  # given back to the batch system; no longer part of the cluster


def _runs(indices: list[int]) -> list[tuple[int, int]]:
    """Sorted, distinct indices -> [start, end) runs of consecutive ones.

    `index - position` is the same along a run and grows between runs, so each run's end
    is found by bisection: the cost is per run, not per node (a job's nodes are a few
    runs of hundreds)."""
    offsets = list(map(sub, indices, range(len(indices))))
    out: list[tuple[int, int]] = []
    p, n = 0, len(indices)
    while p < n:
        q = bisect.bisect_right(offsets, offsets[p], p)
        out.append((indices[p], indices[q - 1] + 1))
        p = q
    return out


class Intervals:
    """Sorted, disjoint [start, end) index intervals; touching ones are merged."""

    __slots__ = ("ends", "starts")

    def __init__(self) -> None:
        self.starts: list[int] = []
        self.ends: list[int] = []

    def __iter__(self) -> Iterator[tuple[int, int]]:
        return zip(self.starts, self.ends)

    def add(self, s: int, e: int) -> None:
        """[s, e) must not overlap what is held."""
        self.add_runs([(s, e)])

    def add_runs(self, runs: list[tuple[int, int]]) -> None:
        """`add` for each run (none may overlap what is held), in one call: a job's nodes
        come and go in a few runs at every resize."""
        starts, ends = self.starts, self.ends
        bisect_left = bisect.bisect_left
        for s, e in runs:
            i = bisect_left(starts, s)
            if i > 0 and ends[i - 1] == s:
                i -= 1
                ends[i] = e
            else:
                starts.insert(i, s)
                ends.insert(i, e)
            if i + 1 < len(starts) and starts[i + 1] == ends[i]:
                ends[i] = ends[i + 1]
                del starts[i + 1], ends[i + 1]

    def remove(self, s: int, e: int) -> None:
        """[s, e) must lie inside one interval (true of any run of held indices, since
        touching intervals are merged)."""
        starts, ends = self.starts, self.ends
        j = bisect.bisect_right(starts, s) - 1
        a, b = starts[j], ends[j]
        if a < s:
            ends[j] = s
            if e < b:
                starts.insert(j + 1, e)
                ends.insert(j + 1, b)
        elif e < b:
            starts[j] = e
        else:
            del starts[j], ends[j]

    def take_lowest(self, count: int) -> list[tuple[int, int]]:
        """Remove the `count` lowest indices (there must be as many); the runs taken."""
        starts, ends = self.starts, self.ends
        taken: list[tuple[int, int]] = []
        while count:
            s, e = starts[0], ends[0]
            take = min(count, e - s)
            taken.append((s, s + take))
            if take == e - s:
                del starts[0], ends[0]
            else:
                starts[0] = s + take
            count -= take
        return taken


class NodeTable:
    def __init__(self, names: list[str]) -> None:
        if len(set(names)) != len(names):
            raise ValueError("node names must be unique")
        self.names = list(names)
        self.index = {n: i for i, n in enumerate(self.names)}
        self._owner: list[int | None] = [None] * len(self.names)
        self.down: set[str] = set()
        self._free = Intervals()
        if self.names:
            self._free.add(0, len(self.names))
        self._free_count = len(self.names)
        self._held: dict[int, Intervals] = {}  # job -> the nodes it owns
        # Nodes given back (the allocation shrank); their indices stay, so intervals and
        # owners never renumber, and a node that comes back takes its old index again.
        self.gone: set[str] = set()

    @property
    def total(self) -> int:
        return len(self.names) - len(self.gone)

    @property
    def members(self) -> list[str]:
        """The nodes that are part of the cluster now, in index order."""
        if not self.gone:
            return list(self.names)
        return [n for n in self.names if n not in self.gone]

    # ---- the cluster grows and shrinks (the allocation itself) -------------------------------
    def add(self, names: list[str]) -> None:
        """New nodes join as free (names seen before take their old index again)."""
        if len(set(names)) != len(names):
            raise InvalidTransition(f"nodes added twice: {' '.join(names)}")
        present = [n for n in names if n in self.index and n not in self.gone]
        if present:
            raise InvalidTransition(f"nodes already in the cluster: {' '.join(present)}")
        for n in names:
            i = self.index.get(n)
            if i is None:
                i = self.index[n] = len(self.names)
                self.names.append(n)
                self._owner.append(None)
            self.gone.discard(n)
            if n not in self.down:
                self._free.add(i, i + 1)
                self._free_count += 1

    def remove(self, names: list[str]) -> None:
        """Idle nodes leave the cluster (down ones included)."""
        bad = [n for n in names if n not in self.index or n in self.gone or self._owner[self.index[n]] is not None]
        if bad or len(set(names)) != len(names):
            raise InvalidTransition(f"only idle nodes of the cluster can leave it: {' '.join(bad or names)}")
        for n in names:
            i = self.index[n]
            if n in self.down:
                self.down.discard(n)
            else:
                self._free.remove(i, i + 1)
                self._free_count -= 1
            self.gone.add(n)

    @property
    def free_count(self) -> int:
        return self._free_count

    def owner_of(self, name: str) -> int | None:
        return self._owner[self.index[name]]

    def not_held(self, job_id: int, names: list[str]) -> list[str]:
        """Those of the names that are not nodes the job owns (names of no node included)."""
        index, owner = self.index, self._owner
        out = []
        for n in names:
            i = index.get(n)
            if i is None or owner[i] != job_id:
                out.append(n)
        return out

    def holds(self, job_id: int, name: str) -> bool:
        """Whether the job owns this node (False for a name that is no node here)."""
        i = self.index.get(name)
        return i is not None and self._owner[i] == job_id

    @property
    def owner(self) -> dict[str, int | None]:
        """Every member node's job (None when free); built on demand, for status displays."""
        if not self.gone:
            return dict(zip(self.names, self._owner))
        return {n: o for n, o in zip(self.names, self._owner) if n not in self.gone}

    def free_hosts(self) -> list[str]:
        out: list[str] = []
        for s, e in self._free:
            out.extend(self.names[s:e])
        return out

    def state_of(self, name: str) -> NodeState:
        if name in self.gone:
            return NodeState.GONE
        if name in self.down:
            return NodeState.DOWN
        return NodeState.IDLE if self.owner_of(name) is None else NodeState.ALLOCATED

    def allocate(self, job_id: int, count: int) -> list[str]:
        """Lowest-numbered free nodes first, so placements are reproducible run to run."""
        if count > self._free_count:
            raise InvalidTransition(f"job {job_id}: {count} nodes asked, {self._free_count} free")
        runs = self._free.take_lowest(count)
        held = self._held.get(job_id)
        if held is None:  # a job's first nodes: the runs taken are its intervals as they are
            held = self._held[job_id] = Intervals()
            held.starts = [s for s, _ in runs]
            held.ends = [e for _, e in runs]
            runs_to_add: list[tuple[int, int]] = []
        else:
            runs_to_add = runs
        chosen: list[str] = []
        owner, names = self._owner, self.names
        for s, e in runs:
            owner[s:e] = [job_id] * (e - s)
            chosen.extend(names[s:e])
        if runs_to_add:
            held.add_runs(runs_to_add)
        self._free_count -= count
        return chosen

    def claim(self, job_id: int, hosts: list[str]) -> None:
        """Give the job exactly these free nodes (a job found again after a daemon restart)."""
        idx = [self.index[h] for h in hosts]
        taken = [self.names[i] for i in idx if self._owner[i] is not None or self.names[i] in self.gone]
        if taken or len(set(idx)) != len(idx):
            raise InvalidTransition(f"job {job_id}: nodes {' '.join(taken) or 'named twice'} not free")
        held = self._held.setdefault(job_id, Intervals())
        for s, e in _runs(sorted(idx)):
            self._owner[s:e] = [job_id] * (e - s)
            held.add(s, e)
        for i in idx:
            if self.names[i] not in self.down:
                self._free.remove(i, i + 1)
                self._free_count -= 1

    def release(self, job_id: int, hosts: list[str]) -> None:
        if not hosts:
            return
        idx = sorted(map(self.index.__getitem__, hosts))
        if len(set(idx)) != len(idx):
            raise InvalidTransition(f"job {job_id} releases a node twice")
        runs = _runs(idx)
        for s, e in runs:
            if self._owner[s:e].count(job_id) != e - s:
                bad = next(self.names[i] for i in range(s, e) if self._owner[i] != job_id)
                raise InvalidTransition(f"job {job_id} releases {bad}, which it does not hold")
        held = self._held[job_id]
        for s, e in runs:
            held.remove(s, e)
        if not held.starts:
            del self._held[job_id]
        self._free_runs(runs)

    def release_all(self, job_id: int) -> int:
        """Free every node the job holds, without a host list to check against its own:
        the job's end, which the simulator does for every job. How many were freed."""
        held = self._held.pop(job_id, None)
        if held is None:
            return 0
        runs = list(held)
        self._free_runs(runs)
        return sum(e - s for s, e in runs)

    def _free_runs(self, runs: list[tuple[int, int]]) -> None:
        freed = 0
        owner = self._owner
        for s, e in runs:
            owner[s:e] = [None] * (e - s)
            freed += e - s
        if self.down:
            for s, e in runs:
                freed -= self._insert_free_up(s, e)
        else:
            self._free.add_runs(runs)
        self._free_count += freed

    # ---- nodes that stop answering (cluster mode) -----------------------------------------
    def mark_down(self, name: str) -> None:
        """Keep the node out of every allocation until mark_up; its owner keeps it meanwhile."""
        if name in self.down:
            return
        self.down.add(name)
        i = self.index[name]
        if self._owner[i] is None:
            self._free.remove(i, i + 1)
            self._free_count -= 1

    def mark_up(self, name: str) -> None:
        if name not in self.down:
            return
        self.down.discard(name)
        i = self.index[name]
        if self._owner[i] is None:
            self._free.add(i, i + 1)
            self._free_count += 1

    def _insert_free_up(self, s: int, e: int) -> int:
        """Free [s, e) except its down nodes; how many down nodes were skipped."""
        skipped = 0
        start = s
        for i in range(s, e):
            if self.names[i] in self.down:
                if start < i:
                    self._free.add(start, i)
                start = i + 1
                skipped += 1
        if start < e:
            self._free.add(start, e)
        return skipped
