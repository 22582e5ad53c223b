"""Which node belongs to which job; the one place that can say a node is free.

Free nodes are kept as sorted, disjoint index intervals, each job's nodes as the runs of
indices it got, in the order it got them, and owners in a flat list, so that giving a
1,000-node job its nodes, or taking them back when it ends, is a few slice operations
rather than 1,000 dictionary updates: the simulator does this for every job of a 4,000-node
trace. A job's runs are in the order of its host list (a grow appends the hosts it gets), so
a shrink, which gives back the hosts a job got last, takes them off the end of its runs
without sorting or merging anything.
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
    n = len(indices)
    if n and indices[-1] - indices[0] == n - 1:  # one run (the common case: a shrink's last hosts)
        return [(indices[0], indices[-1] + 1)]
    offsets = list(map(sub, indices, range(n)))
    out: list[tuple[int, int]] = []
    p = 0
    while p < n:
        q = bisect.bisect_right(offsets, offsets[p], p)
        out.append((indices[p], indices[q - 1] + 1))
        p = q
    return out


def _pop_last(held: list[tuple[int, int]], runs: list[tuple[int, int]], count: int) -> bool:
    """If the last `count` nodes of a job's runs (in host order: the last ones of a run are
    its highest) are exactly `runs` (sorted, merged), take them off and say so; else leave
    the runs as they are. A shrink gives back the hosts a job got last: this, at once."""
    j = len(held)
    need = count
    while need > 0:
        if j == 0:
            return False
        j -= 1
        s, e = held[j]
        need -= e - s
    s, e = held[j]
    cut = e - s + need  # taken from held[j]: its `cut` highest nodes
    tail = [(e - cut, e), *held[j + 1 :]]
    if len(tail) > 1:
        tail.sort()
        merged = [tail[0]]
        for a, b in tail[1:]:
            if merged[-1][1] == a:
                merged[-1] = (merged[-1][0], b)
            else:
                merged.append((a, b))
        tail = merged
    if tail != runs:
        return False
    del held[j + 1 :]
    if cut == e - s:
        del held[j]
    else:
        held[j] = (s, e - cut)
    return True


def _without(held: list[tuple[int, int]], runs: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """A job's runs less the nodes in `runs` (sorted, disjoint), in the same order."""
    starts = [a for a, _ in runs]
    out: list[tuple[int, int]] = []
    for s, e in held:
        cur = s
        i = max(0, bisect.bisect_right(starts, s) - 1)
        while i < len(runs) and runs[i][0] < e:
            a, b = runs[i]
            if b > cur:
                if a > cur:
                    out.append((cur, a))
                cur = b
            i += 1
        if cur < e:
            out.append((cur, e))
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
            if i > 0 and ends[i - 1] == s:  # joins the one before (and maybe the one after)
                i -= 1
                if i + 1 < len(starts) and starts[i + 1] == e:
                    ends[i] = ends[i + 1]
                    del starts[i + 1], ends[i + 1]
                else:
                    ends[i] = e
            elif i < len(starts) and starts[i] == e:  # joins the one after only
                starts[i] = s
            else:
                starts.insert(i, s)
                ends.insert(i, e)

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
        i = 0  # intervals taken whole, deleted at once at the end
        while count:
            s, e = starts[i], ends[i]
            if count < e - s:
                taken.append((s, s + count))
                starts[i] = s + count
                break
            taken.append((s, e))
            count -= e - s
            i += 1
        if i:
            del starts[:i], ends[:i]
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
        self._held: dict[int, list[tuple[int, int]]] = {}  # job -> its runs, in host order
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
        try:  # all held, the answer to every order: told without a Python loop over the names
            if set(map(owner.__getitem__, map(index.__getitem__, names))) <= {job_id}:
                return []
        except KeyError:
            pass  # a name of no node: listed below
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
        owner, names = self._owner, self.names
        if len(runs) == 1:  # the usual case: one run of free nodes, its names as they are
            s, e = runs[0]
            owner[s:e] = [job_id] * (e - s)
            chosen = names[s:e]
        else:
            chosen = []
            for s, e in runs:
                owner[s:e] = [job_id] * (e - s)
                chosen.extend(names[s:e])
        held = self._held.get(job_id)
        if held is None:
            self._held[job_id] = runs
        else:
            held.extend(runs)
        self._free_count -= count
        return chosen

    def claim(self, job_id: int, hosts: list[str]) -> None:
        """Give the job exactly these free nodes (a job found again after a daemon restart)."""
        idx = [self.index[h] for h in hosts]
        taken = [self.names[i] for i in idx if self._owner[i] is not None or self.names[i] in self.gone]
        if taken or len(set(idx)) != len(idx):
            raise InvalidTransition(f"job {job_id}: nodes {' '.join(taken) or 'named twice'} not free")
        for s, e in _runs(sorted(idx)):
            self._owner[s:e] = [job_id] * (e - s)
        held = self._held.setdefault(job_id, [])
        for i in idx:  # runs in the order of the host list
            if held and held[-1][1] == i:
                held[-1] = (held[-1][0], i + 1)
            else:
                held.append((i, i + 1))
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
        if not _pop_last(held, runs, len(idx)):
            held = self._held[job_id] = _without(held, runs)
        if not held:
            del self._held[job_id]
        self._free_runs(runs)

    def release_all(self, job_id: int) -> int:
        """Free every node the job holds, without a host list to check against its own:
        the job's end, which the simulator does for every job. How many were freed."""
        held = self._held.pop(job_id, None)
        if held is None:
            return 0
        return self._free_runs(held)

    def _free_runs(self, runs: list[tuple[int, int]]) -> int:
        """Free the runs (their down nodes stay out of the free ones); how many nodes they hold."""
        count = 0
        owner = self._owner
        for s, e in runs:
            owner[s:e] = [None] * (e - s)
            count += e - s
        freed = count
        if self.down:
            for s, e in runs:
                freed -= self._insert_free_up(s, e)
        else:
            self._free.add_runs(runs)
        self._free_count += freed
        return count

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
