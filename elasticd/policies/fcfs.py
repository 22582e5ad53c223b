"""First come, first served: start jobs in submit order; the first that cannot start blocks all."""

from __future__ import annotations

from elasticd.policies.base import Decision, Snapshot, Start, start_size


class Fcfs:
    name = "fcfs"

    def decide(self, snap: Snapshot) -> list[Decision]:
        free = snap.free_nodes
        out: list[Decision] = []
        for job in snap.pending:
            n = start_size(job, free)
            if n is None:
                break
            out.append(Start(job.job_id, n))
            free -= n
        return out
