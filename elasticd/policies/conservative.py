"""Conservative backfilling: a reservation for every queued job, not only the first.

Jobs are placed in queue order, each at the earliest time its node count is free for its
whole time limit around the running jobs and the reservations already made; a job whose
reservation is now starts now. So a job may overtake others only where it delays none of
their reservations (EASY protects the head alone). Moldable jobs reserve their minimum and,
when they start, take as many nodes as stay free for their whole limit (the seed's moldable
extension). A job without a time limit is planned as never ending.

Evolving jobs' requests take their place in the queue by the time they were made (see
`profile.queue_entries`): a request is granted when its nodes are free until the job's
limit, otherwise it holds a reservation like a queued job.

The map is built once per pass and the queue is walked only while something could still
start now (`StartBound`): later reservations cannot change this pass's decisions.
"""

from __future__ import annotations

import bisect
import math

from elasticd.policies.base import (
    Decision,
    Grow,
    PendingView,
    RunningView,
    Snapshot,
    Start,
    limit_at,
    start_size,
)
from elasticd.policies.profile import FreeProfile, profile_of, queue_entries


class StartBound:
    """Tells a queue walk when no remaining entry can start now, so it may stop.

    Entry k can start now only if it needs n_k <= idle nodes and n_k <= F(d_k), the
    fewest nodes the map leaves free over [now, now + d_k), which only shrinks as d_k
    grows and as reservations are added. Entries are grouped by duration (at least L
    seconds); a group can start nothing once min(idle, F(L)) is below the fewest nodes any
    of its remaining entries needs. The cheapest form (one group, the shortest duration
    left) is tried on every entry, the grouped one every 16.
    """

    BOUNDS = (0.0, 600.0, 1800.0, 3600.0, 7200.0, 14400.0, 28800.0, 57600.0, 86400.0, 172800.0)

    def __init__(self, now: float, needs: list[int], durations: list[float]) -> None:
        self.now = now
        k = len(needs)
        self.need = [1 << 60] * (k + 1)
        self.dur = [math.inf] * (k + 1)
        for i in range(k - 1, -1, -1):
            self.need[i] = min(self.need[i + 1], needs[i])
            self.dur[i] = min(self.dur[i + 1], durations[i])
        self._needs, self._durations = needs, durations
        self._groups: list[tuple[float, list[int], list[int]]] | None = None

    @property
    def groups(self) -> list[tuple[float, list[int], list[int]]]:
        """Per duration group: its lower bound, the positions of its entries and the
        suffix minimum of their needs (built on first use: most walks end before)."""
        if self._groups is None:
            groups: list[tuple[list[int], list[int]]] = [([], []) for _ in self.BOUNDS]
            for i, d in enumerate(self._durations):
                g = bisect.bisect_right(self.BOUNDS, d) - 1
                groups[g][0].append(i)
                groups[g][1].append(self._needs[i])
            self._groups = []
            for lower, (pos, need) in zip(self.BOUNDS, groups):
                for j in range(len(need) - 2, -1, -1):
                    need[j] = min(need[j], need[j + 1])
                self._groups.append((lower, pos, need))
        return self._groups

    def exhausted(self, i: int, idle: int, prof: FreeProfile) -> bool:
        need = self.need[i]
        if min(idle, prof.free_at_now()) < need:
            return True
        if prof.min_free(self.now, self.now + self.dur[i]) < need:
            return True
        if i % 16:
            return False
        for lower, pos, needs in self.groups:
            j = bisect.bisect_left(pos, i)
            if j < len(pos) and needs[j] <= min(idle, prof.min_free(self.now, self.now + lower)):
                return False  # some entry of this group might still start now
        return True


def place_request(prof: FreeProfile, r: RunningView, free: int, now: float) -> Grow | None:
    """Grant an evolving job's request now if its nodes are free until the job's limit;
    otherwise reserve them for the earliest time they are."""
    end = r.estimated_end
    n = r.requested
    if free >= n and prof.min_free(now, end) >= n:
        prof.reserve(now, end, n)
        return Grow(r.job_id, n)
    ts = prof.earliest(n, end - now if end != math.inf else math.inf)
    if ts < end:
        prof.reserve(ts, end, n)
    return None


def entry_duration(e: object, is_request: bool, now: float) -> float:
    """How long a queue entry holds its nodes: a job its limit, a request until its job's."""
    if is_request:
        end: float = e.estimated_end  # type: ignore[attr-defined]
        return end - now
    assert isinstance(e, PendingView)
    limit = limit_at(e, e.start_nodes)  # on the nodes it is placed on, by its model (the core's rule)
    return math.inf if limit is None else float(limit)


class ConservativeBackfill:
    name = "conservative"
    stateless = True  # see Policy

    def decide(self, snap: Snapshot) -> list[Decision]:
        now = snap.now
        prof = profile_of(snap)
        free = snap.free_nodes
        entries = queue_entries(snap)
        needs = [e.requested if is_req else e.start_nodes for e, is_req in entries]  # type: ignore[attr-defined]
        bound = StartBound(now, needs, [entry_duration(e, is_req, now) for e, is_req in entries])
        out: list[Decision] = []
        for i, (e, is_request) in enumerate(entries):
            if bound.exhausted(i, free, prof):
                break  # nothing from here on can start now
            if is_request:
                g = place_request(prof, e, free, now)  # type: ignore[arg-type]
                if g is not None:
                    out.append(g)
                    free -= g.by
                continue
            job: PendingView = e  # type: ignore[assignment]
            need = needs[i]
            limit = limit_at(job, need)
            dur = math.inf if limit is None else float(limit)
            ts = prof.earliest(need, dur)
            if ts == now and free >= need:
                n = start_size(job, min(free, prof.min_free(now, now + dur)))
                assert n is not None
                out.append(Start(job.job_id, n))
                free -= n
                # Wider than its need, it ends sooner (its limit scales with its model).
                limit = limit_at(job, n)
                prof.reserve(now, now + (math.inf if limit is None else float(limit)), n)
            elif ts != math.inf:
                # Planned now but its nodes are still being given back: it keeps them.
                prof.reserve(ts, ts + dur, need)
        return out
