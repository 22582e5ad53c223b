"""The contract between the core and every policy: a snapshot in, decisions out.

A policy never sees hosts, sockets or a clock — only counts and times in the snapshot —
so the same policy decides identically in the daemon and in the simulator.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from operator import attrgetter
from typing import Protocol

from elastic_protocol.jobspec import JobKind, PerfModel
from elasticd.core.fastinit import fast_init

# An evolution profile: (seconds, nodes) per step, in order.
Profile = tuple[tuple[float, int], ...]


@dataclass(frozen=True, slots=True)
class PendingView:
    job_id: int
    submit_time: float
    kind: JobKind
    min_nodes: int
    max_nodes: int
    preferred: int
    time_limit: float | None  # seconds at its preferred size; None = unlimited
    # For the policies that predict run times (MEBF, SD-Policy); None: no model given.
    model: PerfModel | None = None
    # An evolving job's declared steps, for the fit policy; empty: none declared.
    evolution: Profile = ()
    # The fewest nodes the job can start on: its first step if it declared its evolution
    # (it needs that many from the start), else its minimum. A field, not a property: every
    # backfilling pass reads it for each waiting job.
    start_nodes: int = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        first = self.evolution[0][1] if self.evolution and self.kind is JobKind.EVOLVING else self.min_nodes
        object.__setattr__(self, "start_nodes", first)


@dataclass(frozen=True, slots=True)
class RunningView:
    job_id: int
    kind: JobKind
    size: int
    min_nodes: int
    max_nodes: int
    preferred: int
    start_time: float
    time_limit: float | None
    # Registered, not deregistered, no order in flight, not deferring, not ending: an
    # order sent now would be delivered and considered.
    malleable_ready: bool
    last_resize: float | None
    ending: bool  # told to end (cancel / time limit); its nodes come back soon
    resizing: bool = False  # an order is in flight or hosts are being reclaimed
    requested: int = 0  # an evolving job's outstanding request for more nodes
    requested_at: float | None = None
    leaving: int = 0  # nodes still held but being given back (not counted in size)
    shrinking: int = 0  # nodes an open, unanswered shrink order will give back
    submit_time: float | None = None  # None in hand-made views: taken as the start time
    model: PerfModel | None = None
    evolution: Profile = ()
    # (time, nodes) for every size the job has had, from its start; empty: its size now
    # since its start (hand-made views).
    history: tuple[tuple[float, int], ...] = ()
    # When its time limit falls, as the core keeps it (scaled by the job's model across
    # resizes, see elasticd.core.limits); None in hand-made views: start + time_limit.
    limit_end: float | None = None

    @property
    def estimated_end(self) -> float:
        """When backfilling may count on this job's nodes: its limit, or never."""
        if self.limit_end is not None:
            return self.limit_end
        if self.time_limit is None:
            return math.inf
        return self.start_time + self.time_limit


@dataclass(frozen=True, slots=True)
class Snapshot:
    now: float
    total_nodes: int
    free_nodes: int
    pending: tuple[PendingView, ...]  # in queue order (submit order)
    running: tuple[RunningView, ...]
    # Nodes still held but already promised back: shrink orders (answered or not) and ends
    # in flight.
    incoming_nodes: int = 0


@dataclass(frozen=True, slots=True)
class Start:
    job_id: int
    nodes: int


@dataclass(frozen=True, slots=True)
class Shrink:
    job_id: int
    by: int


@dataclass(frozen=True, slots=True)
class Grow:
    job_id: int
    by: int


Decision = Start | Shrink | Grow

# Views, snapshots and decisions are made on every pass: the quicker constructor (same
# arguments, still frozen).
for _type in (PendingView, RunningView, Snapshot, Start, Shrink, Grow):
    fast_init(_type)


class Policy(Protocol):
    """A policy may also say `stateless = True`: what it decides depends on the snapshot
    alone (memoised facts of views aside), so a pass in which no decision could be valid
    (fewer nodes free than any waiting job's minimum, no running job an order can resize)
    can go unasked: the core skips it (Core._pass). A policy that remembers what a pass saw
    (SD-Policy's promises to waiting jobs) leaves it unset and is asked every time."""

    name: str

    def decide(self, snap: Snapshot) -> list[Decision]: ...


# A waiting job's start_nodes as a function (a C-level getter: it is called for every
# waiting job on every backfilling pass).
start_nodes_of: Callable[[PendingView], int] = attrgetter("start_nodes")


def start_size(job: PendingView, available: int) -> int | None:
    """Nodes to start a job with when `available` are usable, or None if it cannot start.

    Moldable (and, under policies that do not resize, malleable) jobs take as many nodes as
    are allowed, as the seed's baselines do. Evolving jobs start at their minimum (or the
    first step of a declared evolution): they ask for more themselves.

    easy_pass spells this rule out in its backfilling loop (a call less per job that fits):
    a change here is a change there.
    """
    need = job.start_nodes
    if available < need:
        return None
    if job.kind in (JobKind.RIGID, JobKind.EVOLVING):
        return need
    return min(job.max_nodes, available)


def limit_at(job: PendingView, n: int) -> float | None:
    """The job's time limit if it starts on n nodes: its limit at its preferred size, scaled
    by its model (the core's rule, elasticd.core.limits); as given when it has no model."""
    limit = job.time_limit
    if limit is None or job.model is None or n == job.preferred:
        return limit
    s = job.model.speedup_model
    return limit * s.speedup(job.preferred) / s.speedup(n)


def grant_requests(snap: Snapshot, free: int) -> list[Grow]:
    """Evolving jobs' requests, first asked first served, each whole or not at all.

    Called by every policy after it has started what it starts, so that a queue of waiting
    jobs is never starved by running jobs asking for more; two evolving jobs waiting for
    each other cannot deadlock because a request never holds nodes while it waits.
    """
    out: list[Grow] = []
    asking = [r for r in snap.running if r.requested > 0 and r.malleable_ready and not r.ending]
    if not asking:
        return out
    asking.sort(key=lambda r: (r.requested_at or 0.0, r.job_id))
    for r in asking:
        n = min(r.requested, r.max_nodes - r.size)
        if 0 < n <= free:
            out.append(Grow(r.job_id, n))
            free -= n
        elif n > free:
            break  # first come first served: a later request may not overtake
    return out
