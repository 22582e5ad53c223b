"""A simulated run's jobs as per-job rows (elasticd.metrics.JobRow): what its per-job file
holds and every metric of the run is computed from.

Read from the outcomes after the run, never during it: the simulator's hot path is left as it
is. A job's reconfiguration seconds are its cost model's for each size change it had (MEBF's
T_dr + T_p, elastic_protocol.models.ReconfigCost), the very seconds WorkProgress stopped its
progress for (tests/test_perjob.py replays every job's run from them).
"""

from __future__ import annotations

from elasticd.metrics import JobRow
from elasticd.sim.simulator import JobOutcome
from elasticd.sim.workload import SimJob


def kind_of(j: SimJob) -> str:
    return "malleable" if j.malleable else "moldable" if j.moldable else "rigid"


def job_rows(jobs: list[SimJob], outcomes: list[JobOutcome]) -> list[JobRow]:
    """One row per outcome, in the outcomes' order; a workload job's static run is its `run`
    (a trace job's logged run at its logged size; a replayed job file's model time at its
    preferred size: elasticd.metrics)."""
    by_id = {j.job_id: j for j in jobs}
    out: list[JobRow] = []
    for o in outcomes:
        j = by_id[o.job_id]
        changes: list[tuple[float, int]] = []
        start_nodes = final_nodes = 0
        seconds = node_seconds = 0.0
        if o.start is not None and o.end is not None and o.sizes:
            start_nodes = size = o.sizes[0][1]
            cost = j.cost
            for t, n in o.sizes[1:-1]:
                if n != size:
                    s = cost.seconds(size, n)
                    seconds += s
                    node_seconds += s * n
                    changes.append((t, n))
                    size = n
            final_nodes = size
        out.append(JobRow(
            job_id=o.job_id, kind=kind_of(j), state=o.state, submit=o.submit, start=o.start, end=o.end,
            static_run=j.run, limit=j.limit, min_nodes=j.min_nodes, preferred_nodes=j.preferred,
            max_nodes=j.max_nodes, logged_nodes=j.nodes, start_nodes=start_nodes, final_nodes=final_nodes,
            shrinks=o.shrinks, expands=o.expands, reconfig_seconds=seconds, reconfig_node_seconds=node_seconds,
            size_changes=tuple(changes)))
    return out
