"""A job's node range against the machine it runs on: one rule, in one place, for the
daemon (at submission) and the simulator (when a trace job is converted).

A job whose minimum the machine cannot give is refused (it could never start); a maximum or
preferred size beyond the machine is cut to the machine (the job can still start and every
policy can reach its preferred size), so that no policy waits for nodes that do not exist.
"""

from __future__ import annotations

from elasticd.errors import JobRejected


def fit_bounds(bounds: tuple[int, int, int], total: int, field: str = "nodes.min") -> tuple[int, int, int]:
    """(min, max, preferred) cut to `total` nodes; JobRejected naming `field` if min > total."""
    lo, hi, pref = bounds
    if lo > total:
        raise JobRejected([f"{field}: {lo} nodes requested but the cluster has {total}"])
    return lo, min(hi, total), min(pref, total)
