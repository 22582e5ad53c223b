"""The seed's Malleable algorithm (minAgree), in three steps:

1. Start waiting jobs with EASY backfilling; malleable jobs start at their minimum.
2. If jobs still wait and idle nodes are too few, take nodes from running malleable jobs,
   those running on the most nodes first, so that a waiting job can start.
3. Give the remaining idle nodes to running malleable jobs, those on the fewest nodes
   first.

Resizes are asynchronous here (an order is answered, processes end, then nodes are
free), so step 2 counts nodes already promised back and does not shrink again for them,
and step 3 gives nothing away while a waiting job is owed nodes. A job is not resized
again within `min_resize_interval` seconds of its last resize, so it is not flapped.
"""

from __future__ import annotations

from dataclasses import replace

from elastic_protocol.jobspec import JobKind

from elasticd.policies.base import (
    Decision,
    Grow,
    RunningView,
    Shrink,
    Snapshot,
    Start,
    grant_requests,
)
from elasticd.policies.easy import EasyBackfill


class MalleableMinAgree:
    name = "malleable"

    def __init__(self, min_resize_interval: float = 10.0) -> None:
        self.min_resize_interval = min_resize_interval
        self._easy = EasyBackfill()

    def _resizable(self, r: RunningView, now: float) -> bool:
        return (
            r.kind is JobKind.MALLEABLE
            and r.malleable_ready
            and not r.resizing
            and not r.ending
            and (r.last_resize is None or now - r.last_resize >= self.min_resize_interval)
        )

    def decide(self, snap: Snapshot) -> list[Decision]:
        # Step 1: EASY, with malleable jobs asking for their minimum only.
        at_min = tuple(
            replace(p, max_nodes=p.min_nodes, preferred=p.min_nodes) if p.kind is JobKind.MALLEABLE else p
            for p in snap.pending
        )
        decisions = [d for d in self._easy.decide(replace(snap, pending=at_min)) if isinstance(d, Start)]
        started = {d.job_id for d in decisions}
        free = snap.free_nodes - sum(d.nodes for d in decisions)
        waiting = [p for p in snap.pending if p.job_id not in started]

        # Step 2: shrink the widest malleable jobs for waiting jobs, in queue order.
        donors = {r.job_id: r for r in snap.running if self._resizable(r, snap.now) and r.size > r.min_nodes}
        size = {jid: r.size for jid, r in donors.items()}
        # Idle nodes plus those already on their way back (shrinks and ends in flight).
        avail = free + snap.incoming_nodes
        shrinks: dict[int, int] = {}
        owed = False
        for job in waiting:
            if job.min_nodes <= avail:
                owed = True  # nodes idle or coming back will start it: take nothing more
                avail -= job.min_nodes
                continue
            need = job.min_nodes - avail
            if need > sum(size[j] - donors[j].min_nodes for j in size):
                continue  # cannot be made to fit now; a later, smaller job might
            owed = True
            avail = 0
            for _ in range(need):
                widest = max(
                    (j for j in size if size[j] > donors[j].min_nodes),
                    key=lambda j: (size[j], -j),
                )
                size[widest] -= 1
                shrinks[widest] = shrinks.get(widest, 0) + 1
        decisions.extend(Shrink(j, n) for j, n in sorted(shrinks.items()))

        # Step 3: idle nodes to the narrowest malleable jobs, unless a waiting job is owed them.
        if not owed and free > 0:
            decisions.extend(grant_requests(snap, free))
            free -= sum(d.by for d in decisions if isinstance(d, Grow))
            takers = {
                r.job_id: r
                for r in snap.running
                if self._resizable(r, snap.now) and r.size < r.max_nodes and r.job_id not in shrinks
            }
            grow_size = {j: r.size for j, r in takers.items()}
            grows: dict[int, int] = {}
            while free > 0 and takers:
                open_ = [j for j in takers if grow_size[j] < takers[j].max_nodes]
                if not open_:
                    break
                narrowest = min(open_, key=lambda j: (grow_size[j], j))
                grow_size[narrowest] += 1
                grows[narrowest] = grows.get(narrowest, 0) + 1
                free -= 1
            decisions.extend(Grow(j, n) for j, n in sorted(grows.items()))
        return decisions


__all__ = ["MalleableMinAgree"]
