"""A job's node range against the machine it runs on: one rule, in one place, for the
daemon (at submission, at a restart, when its allocation changes size) and the simulator
(when a trace job is converted).

A job whose minimum the machine cannot give is refused (it could never start); a maximum or
preferred size beyond the machine is cut to the machine (the job can still start and every
policy can reach its preferred size), so that no policy waits for nodes that do not exist.

A job already taken is never refused afterwards: when the machine has since become smaller
than its minimum (a restart on fewer nodes, nodes given back), it keeps its range and
waits, out of every policy's sight (it must not hold up the queue behind it), with the
reason it cannot start, until the machine can hold it again -- as Slurm keeps such a job
pending (PartitionNodeLimit) rather than dropping it.
"""

from __future__ import annotations

from elasticd.errors import JobRejected


def fit_bounds(bounds: tuple[int, int, int], total: int, field: str = "nodes.min") -> tuple[int, int, int]:
    """(min, max, preferred) cut to `total` nodes; JobRejected naming `field` if min > total."""
    fitted, lacking = refit_bounds(bounds, total)
    if lacking is not None:
        raise JobRejected([f"{field}: {bounds[0]} nodes requested but the cluster has {total}"])
    return fitted


def refit_bounds(bounds: tuple[int, int, int], total: int) -> tuple[tuple[int, int, int], str | None]:
    """A job's range on `total` nodes and, if its minimum is more than that, why it cannot
    start (its range then left whole: it is the job's, shown as asked, and no policy sees it)."""
    lo, hi, pref = bounds
    if lo > total:
        return bounds, f"needs {lo} nodes, the cluster has {total}"
    return (lo, min(hi, total), min(pref, total)), None
