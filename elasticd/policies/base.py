"""The contract between the core and every policy: a snapshot in, decisions out.

A policy never sees hosts, sockets or a clock — only counts and times in the snapshot —
so the same policy decides identically in the daemon and in the simulator.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Protocol

from elastic_protocol.jobspec import JobKind


@dataclass(frozen=True)
class PendingView:
    job_id: int
    submit_time: float
    kind: JobKind
    min_nodes: int
    max_nodes: int
    preferred: int
    time_limit: float | None  # seconds; None = unlimited


@dataclass(frozen=True)
class RunningView:
    job_id: int
    kind: JobKind
    size: int
    min_nodes: int
    max_nodes: int
    preferred: int
    start_time: float
    time_limit: float | None
    malleable_ready: bool
    last_resize: float | None
    ending: bool  # told to end (cancel / time limit); its nodes come back soon

    @property
    def estimated_end(self) -> float:
        """When backfilling may count on this job's nodes: its limit, or never."""
        if self.time_limit is None:
            return math.inf
        return self.start_time + self.time_limit


@dataclass(frozen=True)
class Snapshot:
    now: float
    total_nodes: int
    free_nodes: int
    pending: tuple[PendingView, ...]  # in queue order (submit order)
    running: tuple[RunningView, ...]


@dataclass(frozen=True)
class Start:
    job_id: int
    nodes: int


@dataclass(frozen=True)
class Shrink:
    job_id: int
    by: int


@dataclass(frozen=True)
class Grow:
    job_id: int
    by: int


Decision = Start | Shrink | Grow


class Policy(Protocol):
    name: str

    def decide(self, snap: Snapshot) -> list[Decision]: ...


def start_size(job: PendingView, available: int) -> int | None:
    """Nodes to start a job with when `available` are usable, or None if it cannot start.

    Moldable (and, under policies that do not resize, malleable and evolving) jobs take as
    many nodes as are allowed, as the seed's baselines do.
    """
    if available < job.min_nodes:
        return None
    if job.kind is JobKind.RIGID:
        return job.min_nodes
    return min(job.max_nodes, available)
