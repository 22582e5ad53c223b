"""Min, Avg, Pref and KeepPref, from `real-workloads-min-avg-pref-keeppref.txt` (Zojer,
Posner, Özden), on the three-step skeleton of `threestep.py`:

    Step 1  waiting jobs start with EASY backfilling, malleable ones on the strategy's size;
    Step 2  if idle nodes are too few to start jobs, running malleable jobs are shrunk,
            highest priority first;
    Step 3  remaining idle nodes expand running malleable jobs, lowest priority first.

Priorities, as the paper's equations give them:

    Min       current - min                        (Eq. 1)
    Pref      current - preferred                  (Eq. 2)
    Avg       (current - min) / (max - min)        (Eq. 3)
    KeepPref  current - preferred                  (Eq. 2)

Start sizes (step 1): Min and Avg start malleable jobs on their minimum; Pref on their
preferred size if that many nodes are usable, else on fewer (down to the minimum);
KeepPref always on the preferred size (a job waits until that many are usable).

How nodes move (steps 2 and 3): Min, Pref and KeepPref limit resizing "to the smallest
number of jobs needed to achieve the target allocation": the highest-priority job gives
(or the lowest-priority job takes) as many nodes as it can before the next one is touched.
Avg makes "all malleable jobs eligible for resizing, enabling a more balanced
redistribution": one node at a time, priorities re-ranked after each. KeepPref shrinks
only jobs running on more than their preferred size, and never below it.

Readings where the paper is silent, as an experienced reader would take them:
- "If there are idle nodes but not enough to start jobs" is read as "too few idle nodes
  (none included)": a full machine of expanded malleable jobs must still let a job start.
- The target of step 2 is what a waiting job needs to start under the strategy's own
  rule: its minimum for Min, Avg and Pref ("steps 2 and 3 mirror Min"), its preferred
  size for KeepPref. Waiting jobs are served in queue order, as in the seed's minAgree.
- KeepPref's step 3 is Pref's (the paper changes only steps 1 and 2).
- Jobs with max == min have no Avg priority; they cannot be resized anyway.
- Only malleable jobs are resized; rigid, moldable and evolving jobs start as under EASY
  (moldable ones on as many nodes as allowed).
- Ties in priority go to the lower job id, so runs are reproducible.
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
from elasticd.policies.malleable import start_at_min
from elasticd.policies.threestep import Strategy, three_step


def start_at_pref_or_fewer(job: PendingView, available: int) -> int | None:
    if job.kind is JobKind.MALLEABLE:
        return min(job.preferred, available) if available >= job.min_nodes else None
    return start_size(job, available)


def start_at_pref(job: PendingView, available: int) -> int | None:
    if job.kind is JobKind.MALLEABLE:
        return job.preferred if available >= job.preferred else None
    return start_size(job, available)


def keeppref_need(job: PendingView) -> int:
    return job.preferred if job.kind is JobKind.MALLEABLE else job.start_nodes


def over_min(size: int, r: RunningView) -> float:
    return size - r.min_nodes


def over_pref(size: int, r: RunningView) -> float:
    return size - r.preferred


def range_used(size: int, r: RunningView) -> float:
    return (size - r.min_nodes) / (r.max_nodes - r.min_nodes)


def _range_used_grown(r: RunningView) -> Callable[[int], float]:
    """range_used(r.size + m, r) as a function of m (threestep.Strategy.grown_key)."""
    base, span = r.size - r.min_nodes, r.max_nodes - r.min_nodes
    return lambda m: (base + m) / span


def _range_used_shrunk(size: int, r: RunningView) -> Callable[[int], float]:
    """-range_used(size - m, r) as a function of m (threestep.Strategy.shrunk_key)."""
    base, span = size - r.min_nodes, r.max_nodes - r.min_nodes
    return lambda m: -((base - m) / span)


STRATEGIES: dict[str, Strategy] = {
    "min": Strategy(start_at_min, start_nodes_of, over_min, lambda r: r.min_nodes, balanced=False),
    "avg": Strategy(start_at_min, start_nodes_of, range_used, lambda r: r.min_nodes, balanced=True,
                   grown_key=_range_used_grown, shrunk_key=_range_used_shrunk),
    "pref": Strategy(
        start_at_pref_or_fewer, start_nodes_of, over_pref, lambda r: r.min_nodes, balanced=False
    ),
    "keeppref": Strategy(
        start_at_pref, keeppref_need, over_pref, lambda r: max(r.min_nodes, r.preferred), balanced=False
    ),
}


class PriorityMalleable:
    """One of Min, Avg, Pref, KeepPref, chosen by name."""

    stateless = True  # see Policy

    def __init__(self, strategy: str, min_resize_interval: float = 10.0) -> None:
        self.name = strategy
        self.strategy = STRATEGIES[strategy]
        self.min_resize_interval = min_resize_interval

    def decide(self, snap: Snapshot) -> list[Decision]:
        return three_step(snap, self.strategy, self.min_resize_interval)
