"""Greedy Backfilling, as the APGAS seed's ElasticJobScheduler runs it: start the head if
it fits, otherwise any later job that fits the idle nodes now, with no reservation at all.

It packs the machine best of the seed's baselines (highest utilization, lowest makespan in
its Figures 9-10) and is unfair by design: a wide job can wait for ever behind a stream of
narrow ones. Moldable jobs take as many nodes as are idle, up to their maximum.
"""

from __future__ import annotations

from elasticd.policies.base import Decision, Snapshot, Start, grant_requests, start_size


class GreedyBackfill:
    name = "backfill"
    stateless = True  # see Policy

    def decide(self, snap: Snapshot) -> list[Decision]:
        free = snap.free_nodes
        out: list[Decision] = []
        for job in snap.pending:
            if free <= 0:
                break
            n = start_size(job, free)
            if n is not None:
                out.append(Start(job.job_id, n))
                free -= n
        return out + grant_requests(snap, free)
