"""MEBF, Malleable EASY Backfilling, from `mebf-performance-driven-malleable-backfilling.txt`
(Almaaitah, Singh, Özden, Carretero): EASY backfilling plus shrinks and expands of running
malleable jobs chosen by their scalability and judged by a feasibility test.

One pass (the paper's Algorithm 1):
1. Serve the queue with EASY backfilling; a malleable job starts on its preferred size
   when that many nodes are usable, else on fewer, down to its minimum.
2. Queue empty and idle nodes left: Expand.
   Jobs still wait and no node is idle: Shrink, to make room for the first waiting job.
   Jobs wait, some nodes are idle, but backfilling found no job for them:
   basic does nothing, expand+ Expands anyway, shrink+ Shrinks anyway.

Shrink (Algorithm 2): candidates are the running malleable jobs not being reconfigured,
least scalable first; each gives at most share_factor of its nodes (never going below its
minimum), and only if the Feasibility test passes. It stops once the first waiting job's
minimum is covered by idle nodes, nodes already coming back and the shrinks ordered.

Expand: candidates most scalable first; GetResources = min(max - current, idle nodes):
- Handoff (Algorithm 4): only if that amount exceeds the job's current size; takes it all.
- Spare (Algorithm 5): only if that amount exceeds spare_ratio x current size; takes
  max(1, floor(spare_ratio x current)) nodes, keeping the rest idle for arriving jobs.
- Intensive (Algorithm 6): takes it all, up to the job's maximum.

Feasibility (Algorithm 3), by the job's performance model (see `predict.py`): the job
must have at least theta of its initially estimated run time left, and its predicted
execution time with the new size, reconfiguration cost included, must not exceed gamma
times its predicted execution time without the change.

Readings where the paper (whose algorithms are figures, not text) is silent:
- "Scalability" is the model's parallel efficiency S(n)/n at the job's current size, a
  single number comparable across Amdahl and rho models (for jobs of equal size it orders
  them exactly by their serial fraction or rho). Jobs without a model count as linear.
- "Excludes the previously configured ones": a job with an order in flight, or resized
  within min_resize_interval seconds (elastic's guard against flapping), is no candidate.
- A shrink is all or nothing: if the candidates cannot cover the first waiting job's
  minimum, none is shrunk (nodes taken for nobody would only be expanded back).
- share_factor is a cap per job, floor(share_factor x nodes); a job never gives more
  than the waiting job still lacks.
- Expands use every idle node under expand+ too (the paper's own finding is that this
  can delay waiting jobs); evolving jobs' requests are served first, as under EASY.
- Only malleable jobs are reconfigured; moldable jobs start as under EASY.
"""

from __future__ import annotations

import math

from elasticd.policies.base import (
    Decision,
    Grow,
    RunningView,
    Shrink,
    Snapshot,
    grant_requests,
    start_nodes_of,
)
from elasticd.policies.easy import easy_pass
from elasticd.policies.min_avg_pref import start_at_pref_or_fewer
from elasticd.policies.predict import Predictions, RunningPrediction, efficiency
from elasticd.policies.threestep import resizable

VARIANTS = ("basic", "expandplus", "shrinkplus")
EXPANDS = ("handoff", "spare", "intensive")


class Mebf:
    stateless = True  # see Policy (its predictions are memoised per view, nothing more)

    def __init__(
        self,
        variant: str = "basic",
        expand: str = "handoff",
        theta: float = 0.5,
        gamma: float = 2.0,
        share_factor: float = 0.4,
        spare_ratio: float = 0.5,
        min_resize_interval: float = 10.0,
    ) -> None:
        if variant not in VARIANTS or expand not in EXPANDS:
            raise ValueError(f"unknown MEBF variant {variant!r} / expand policy {expand!r}")
        self.name = f"mebf-{variant}-{expand}"
        self.variant = variant
        self.expand_policy = expand
        self.theta = theta
        self.gamma = gamma
        self.share_factor = share_factor
        self.spare_ratio = spare_ratio
        self.min_resize_interval = min_resize_interval
        self._predictions = Predictions()

    # ---- the pass --------------------------------------------------------------------
    def decide(self, snap: Snapshot) -> list[Decision]:
        self._predictions.new_pass(snap.running)
        res = easy_pass(snap, start_at_pref_or_fewer, start_nodes_of)
        out: list[Decision] = list(res.starts)
        free = res.free
        grants = grant_requests(snap, res.extra)
        out.extend(grants)
        free -= sum(g.by for g in grants)
        if not res.waiting:
            if free > 0:
                out.extend(self.expand(snap, free))
            return out
        if free == 0:
            out.extend(self.shrink(snap, res.waiting[0].start_nodes))
        elif res.backfilled == 0:
            if self.variant == "expandplus":
                out.extend(self.expand(snap, free))
            elif self.variant == "shrinkplus":
                out.extend(self.shrink(snap, res.waiting[0].start_nodes - free))
        return out

    # ---- Feasibility (Algorithm 3) -------------------------------------------------------
    def feasible(self, p: RunningPrediction, n_new: int) -> bool:
        if not p.known:
            return False
        assert p.end is not None
        if p.end - p.now < self.theta * p.initial_runtime():
            return False  # too little left for a reconfiguration to pay off
        static = p.end - p.job.start_time
        new = p.end_if_resized(n_new) - p.job.start_time
        return static > 0 and new <= self.gamma * static

    def _candidates(self, snap: Snapshot) -> list[RunningView]:
        return [r for r in snap.running if resizable(r, snap.now, self.min_resize_interval)]

    # ---- Shrink (Algorithm 2) -----------------------------------------------------------
    def shrink(self, snap: Snapshot, need: int) -> list[Decision]:
        """Free `need` more nodes (beyond idle ones), counting nodes already coming back."""
        lack = need - snap.incoming_nodes
        if lack <= 0:
            return []
        cands = [r for r in self._candidates(snap) if r.size > r.min_nodes]
        cands.sort(key=lambda r: (efficiency(r.model, r.size), r.job_id))  # least scalable first
        out: list[Decision] = []
        for r in cands:
            k = min(lack, math.floor(self.share_factor * r.size), r.size - r.min_nodes)
            if k < 1 or not self.feasible(self._predictions.get(r, snap.now), r.size - k):
                continue
            out.append(Shrink(r.job_id, k))
            lack -= k
            if lack == 0:
                return sorted(out, key=lambda d: d.job_id)
        return []  # the first waiting job could not be served: shrink nobody

    # ---- Expand (Algorithms 4-6) -----------------------------------------------------------
    def expand(self, snap: Snapshot, free: int) -> list[Decision]:
        cands = [r for r in self._candidates(snap) if r.size < r.max_nodes]
        cands.sort(key=lambda r: (-efficiency(r.model, r.size), r.job_id))  # most scalable first
        out: list[Decision] = []
        for r in cands:
            if free <= 0:
                break
            amount = self.expand_amount(r.size, min(r.max_nodes - r.size, free))
            if amount and self.feasible(self._predictions.get(r, snap.now), r.size + amount):
                out.append(Grow(r.job_id, amount))
                free -= amount
        return sorted(out, key=lambda d: d.job_id)

    def expand_amount(self, size: int, available: int) -> int:
        """Nodes the expand policy gives a job of `size` when `available` could be had."""
        if available <= 0:
            return 0
        if self.expand_policy == "handoff":
            return available if available > size else 0
        if self.expand_policy == "spare":
            if available > self.spare_ratio * size:
                return min(available, max(1, math.floor(self.spare_ratio * size)))
            return 0
        return available  # intensive
