"""When the daemon's own Slurm allocation should shrink or grow, and what holding it cost.

Pure: the daemon's allocation driver (elasticd.daemon.allocation_resize) gives the state of
the node table and queue and the time; what comes out are requests to act on. The rules:

- **Give back** a node that has been free (not down) for `release_idle` seconds while no
  pending job could use it: a pending job whose minimum fits in the nodes the daemon holds
  (or may hold, with `grow_max`) is waiting for nodes, and gets them as running jobs end.
  The cluster's first node (where the daemon runs) is never given back.
- **Ask for more** (`grow_max` set) when the first pending job in submission order has
  waited `grow_wait` seconds and its minimum exceeds the free nodes plus those already
  asked for: the difference, within `grow_max` nodes held in all, one request per job.
  A pending request whose job no longer waits is withdrawn.
- **Shrink to give back** (`shrink_malleable`, the operator's choice: `--release-policy
  shrink`): while no pending job could use nodes, a registered malleable job that has held
  more than its preferred size for `release_idle` seconds is shrunk to its preferred size,
  and the nodes it gives back leave the allocation (under a policy that lends every idle
  node to malleable jobs, nodes are otherwise never idle while one runs).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

# Companion allocations are given back after this long idle when the operator asked only
# for growth (`--grow-allocation` without `--release-idle`).
DEFAULT_COMPANION_IDLE = 60.0


@dataclass(frozen=True)
class AllocationRules:
    release_idle: float | None = None  # seconds idle before a node is given back; None: never
    grow_max: int | None = None  # nodes the daemon may hold in all; None: never grows
    grow_wait: float = 5.0  # how long the first pending job waits before more is asked for
    shrink_malleable: bool = False  # malleable jobs above their preferred size give nodes back

    @property
    def companion_idle(self) -> float:
        return self.release_idle if self.release_idle is not None else DEFAULT_COMPANION_IDLE


@dataclass(frozen=True)
class PendingNeed:
    job_id: int
    min_nodes: int
    submit_time: float


@dataclass(frozen=True)
class Outstanding:
    """A companion allocation asked for and not granted yet."""

    request_id: str
    count: int
    for_job: int


@dataclass(frozen=True)
class Holding:
    """A running malleable job that could take a shrink order now."""

    job_id: int
    size: int
    preferred: int
    since: float  # its last resize (or start): how long it has held `size`


@dataclass(frozen=True)
class ShrinkToRelease:
    job_id: int
    nodes: int  # the size to shrink to


@dataclass(frozen=True)
class Release:
    hosts: tuple[str, ...]


@dataclass(frozen=True)
class Request:
    count: int
    for_job: int


@dataclass(frozen=True)
class Withdraw:
    request_id: str


Step = Release | Request | Withdraw | ShrinkToRelease


def waiting_for_nodes(pending_minimums: Iterable[int], held: int, rules: AllocationRules) -> bool:
    """Whether a pending job could use the nodes held (or, with growth, that may be held):
    then no node is given back, whatever is idle."""
    capacity = held if rules.grow_max is None else max(held, rules.grow_max)
    return any(m <= capacity for m in pending_minimums)


def plan(
    now: float,
    members: Sequence[str],
    free: Sequence[str],
    idle_since: Mapping[str, float],
    companion_hosts: frozenset[str],
    pending: Sequence[PendingNeed],
    outstanding: Sequence[Outstanding],
    rules: AllocationRules,
    holding: Sequence[Holding] = (),
) -> list[Step]:
    """`members`: the nodes held now, first node first; `free`: those free and up;
    `idle_since`: when each free node became free; `pending`: in submission order;
    `holding`: the malleable jobs that could be shrunk now."""
    steps: list[Step] = []
    waiting = {p.job_id for p in pending}
    for o in outstanding:
        if o.for_job not in waiting:
            steps.append(Withdraw(o.request_id))
    live = [o for o in outstanding if o.for_job in waiting]
    asked = sum(o.count for o in live)
    if not waiting_for_nodes((p.min_nodes for p in pending), len(members), rules):
        first = members[0] if members else None
        out = []
        for h in free:
            if h == first:
                continue
            limit = rules.companion_idle if h in companion_hosts else rules.release_idle
            if limit is not None and now - idle_since.get(h, now) >= limit:
                out.append(h)
        if out:
            steps.append(Release(tuple(out)))
        if rules.shrink_malleable and rules.release_idle is not None:
            steps += [ShrinkToRelease(h.job_id, h.preferred) for h in holding
                      if h.size > h.preferred and now - h.since >= rules.release_idle]
    if rules.grow_max is not None and pending:
        head = pending[0]
        need = head.min_nodes - len(free) - asked
        room = rules.grow_max - len(members) - asked
        if (now - head.submit_time >= rules.grow_wait and need > 0 and need <= room
                and all(o.for_job != head.job_id for o in live)):
            steps.append(Request(need, head.job_id))
    return steps


@dataclass
class AllocationUsage:
    """Node-seconds held (the allocation's size over time), used (by jobs) and given back
    (nodes released, counted from their release until the daemon stops)."""

    held: float = 0.0
    used: float = 0.0
    given_back: float = 0.0
    released_nodes: int = 0  # given back and not held again
    _since: float | None = None
    _held_now: int = 0
    _used_now: int = 0

    def advance(self, now: float, held: int, used: int) -> None:
        """Close the segment up to `now` at the sizes that held during it; open the next."""
        if self._since is not None and now > self._since:
            dt = now - self._since
            self.held += self._held_now * dt
            self.used += self._used_now * dt
            self.given_back += self.released_nodes * dt
        if self._since is None or now >= self._since:
            self._since = now
        self._held_now, self._used_now = held, used

    def as_dict(self) -> dict[str, float]:
        return {"held": round(self.held, 1), "used": round(self.used, 1), "given_back": round(self.given_back, 1),
                "released_nodes": self.released_nodes}
