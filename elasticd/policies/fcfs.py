"""First come, first served: start jobs in submit order; the first that cannot start blocks all."""

from __future__ import annotations

from elasticd.policies.base import Decision, Snapshot, Start, grant_requests, start_size


class Fcfs:
    name = "fcfs"
    stateless = True  # see Policy

    def decide(self, snap: Snapshot) -> list[Decision]:
        free = snap.free_nodes
        out: list[Decision] = []
        for job in snap.pending:
            n = start_size(job, free)
            if n is None:
                return out  # the head waits; nothing may overtake it, not even a request
            out.append(Start(job.job_id, n))
            free -= n
        return out + grant_requests(snap, free)
