"""An example policy: first come, first served, then idle nodes to malleable jobs below
their preferred size, one node per job per pass, never a shrink."""

from __future__ import annotations

from elasticd.policies.base import Decision, Grow, Snapshot, Start, start_size


class FillToPreferred:
    name = "fill-to-preferred"

    def decide(self, snap: Snapshot) -> list[Decision]:
        free = snap.free_nodes
        out: list[Decision] = []
        for job in snap.pending:  # in submit order
            n = start_size(job, min(free, job.preferred))
            if n is None:
                break  # the head waits; nothing overtakes it
            out.append(Start(job.job_id, n))
            free -= n
        below = [r for r in snap.running if r.malleable_ready and not r.ending and r.size < r.preferred]
        for r in sorted(below, key=lambda r: r.size - r.preferred):  # furthest below first
            if free == 0:
                break
            out.append(Grow(r.job_id, 1))
            free -= 1
        return out
