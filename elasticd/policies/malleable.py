"""The seed's Malleable algorithm (minAgree), in three steps:

1. Start waiting jobs with EASY backfilling; malleable jobs start at their minimum.
2. If jobs still wait and idle nodes are too few, take nodes from running malleable jobs,
   those running on the most nodes first, so that a waiting job can start.
3. Give the remaining idle nodes to running malleable jobs, those on the fewest nodes
   first.

Nodes move one at a time, the widest (or narrowest) job re-chosen after each, ties to the
lower job id. The skeleton, and how asynchronous resizes are accounted for, is in
`threestep.py`.
"""

from __future__ import annotations

from collections.abc import Callable

from elastic_protocol.jobspec import JobKind
from elasticd.policies.base import (
    Decision,
    PendingView,
    RunningView,
    Snapshot,
    start_nodes_of,
    start_size,
)
from elasticd.policies.threestep import Strategy, three_step


def start_at_min(job: PendingView, available: int) -> int | None:
    """Malleable jobs start on their minimum; the others as the baselines start them."""
    if job.kind is JobKind.MALLEABLE:
        return job.min_nodes if available >= job.min_nodes else None
    return start_size(job, available)


def _width(size: int, r: RunningView) -> float:
    return size


def _width_grown(r: RunningView) -> Callable[[int], float]:
    """_width(r.size + m, r) as a function of m (threestep.Strategy.grown_key)."""
    size = r.size
    return lambda m: size + m


def _width_shrunk(size: int, r: RunningView) -> Callable[[int], float]:
    """-_width(size - m, r) as a function of m (threestep.Strategy.shrunk_key)."""
    return lambda m: -(size - m)


MIN_AGREE = Strategy(
    size=start_at_min,
    need=start_nodes_of,
    priority=_width,
    floor=lambda r: r.min_nodes,
    balanced=True,
    grown_key=_width_grown,
    shrunk_key=_width_shrunk,
)


class MalleableMinAgree:
    name = "malleable"
    stateless = True  # see Policy

    def __init__(self, min_resize_interval: float = 10.0) -> None:
        self.min_resize_interval = min_resize_interval

    def decide(self, snap: Snapshot) -> list[Decision]:
        return three_step(snap, MIN_AGREE, self.min_resize_interval)


__all__ = ["MalleableMinAgree", "start_at_min"]
