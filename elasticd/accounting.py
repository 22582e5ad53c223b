"""Accounting of what each job held, when, and who decided each change (for `eacct`).

Built from the jobs a replay of the event log leaves (elasticd.replay), so it is the same
history the daemon acted on, finished jobs included: a job's hosts are the ones of its
history entries, not its (empty) host list after the end.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from elasticd.core.events import SIZE_CHANGES, JobEventKind
from elasticd.core.job import Job
from elasticd.eventlog import Segment

ACCOUNTING_VERSION = 1

# Entries that belong in a size timeline: the size changes and the end.
_TIMELINE = SIZE_CHANGES | {JobEventKind.ENDED}


@dataclass(frozen=True)
class SizeChange:
    time: float
    event: str  # started, grown, shrunk, released, requeued (never launched: 0 nodes), ended
    nodes: int  # held from this time on (0 after the end)
    hosts: tuple[str, ...]
    cause: str | None  # who decided: policy, user, app, fault, limit, daemon
    detail: str | None


@dataclass(frozen=True)
class JobAccount:
    job_id: int
    name: str
    kind: str
    state: str
    exit_code: int | None
    exit_signal: int | None
    reason: str | None
    submit: float
    start: float | None
    end: float | None
    elapsed: float  # seconds from start to end (or to `now` while running)
    node_seconds: float
    max_nodes: int
    hosts: tuple[str, ...]  # every host it ever held, in the order it got them
    timeline: tuple[SizeChange, ...] = field(default=())

    @property
    def exit(self) -> str:
        if self.exit_code is None and self.exit_signal is None:
            return ""
        return f"{self.exit_code or 0}:{self.exit_signal or 0}"

    def as_json(self) -> dict[str, Any]:
        return {
            "job_id": self.job_id, "name": self.name, "kind": self.kind, "state": self.state,
            "exit_code": self.exit_code, "exit_signal": self.exit_signal, "reason": self.reason,
            "submit": self.submit, "start": self.start, "end": self.end, "elapsed": self.elapsed,
            "node_seconds": self.node_seconds, "max_nodes": self.max_nodes, "hosts": list(self.hosts),
            "timeline": [
                {"time": c.time, "event": c.event, "nodes": c.nodes, "hosts": list(c.hosts),
                 "cause": c.cause, "detail": c.detail}
                for c in self.timeline
            ],
        }


def account(job: Job, now: float) -> JobAccount:
    timeline: list[SizeChange] = []
    hosts: dict[str, None] = {}
    for e in job.events:
        if e.event not in _TIMELINE:
            continue
        ended = e.event is JobEventKind.ENDED
        for h in e.hosts:
            hosts[h] = None
        timeline.append(SizeChange(e.time, e.event.value, 0 if ended else e.nodes,
                                   () if ended else e.hosts, None if e.cause is None else e.cause.value, e.detail))
    return JobAccount(
        job_id=job.job_id, name=job.spec.name, kind=job.kind.value, state=job.state.value,
        exit_code=job.exit_code, exit_signal=job.exit_signal, reason=job.reason,
        submit=job.submit_time, start=job.start_time, end=job.end_time, elapsed=job.time_used(now),
        node_seconds=job.node_seconds_at(now), max_nodes=max((c.nodes for c in timeline), default=0),
        hosts=tuple(hosts), timeline=tuple(timeline),
    )


def accounts(jobs: list[Job], now: float) -> list[JobAccount]:
    return [account(j, now) for j in sorted(jobs, key=lambda j: j.job_id)]


@dataclass(frozen=True)
class AllocationAccount:
    """One daemon run's allocation from its event log: node-seconds held (the nodes it had,
    over time), used by jobs, and given back (nodes released, from their release to the
    run's last event); how many nodes it gave back (`released`) and took in (`added`, from
    companion allocations) — nodes, not events (--release-idle, --grow-allocation)."""

    start: float
    end: float
    nodes_at_start: int
    held: float
    used: float
    given_back: float
    released: int
    added: int

    def as_json(self) -> dict[str, Any]:
        return {"start": self.start, "end": self.end, "nodes_at_start": self.nodes_at_start,
                "node_seconds": {"held": self.held, "used": self.used, "given_back": self.given_back},
                "released": self.released, "added": self.added}


def allocation_accounts(segments: list[Segment], jobs: list[Job]) -> list[AllocationAccount]:
    out = []
    for seg in segments:
        start = float(seg.header["time"])
        held = len(seg.header["nodes"]) - len(seg.header.get("gone", []))
        t, end = start, start
        held_s = given_s = 0.0
        out_now = released = added = 0
        removed_at: dict[str, float] = {}
        for rec in seg.records:
            e = rec.get("event") or {}
            now = float(e.get("time", t))
            end = max(end, now)
            kind = e.get("type")
            if kind in ("NodesAdded", "NodesRemoved"):
                held_s += held * (now - t)
                given_s += out_now * (now - t)
                t = now
                hosts = [str(h) for h in e.get("hosts", [])]
                n = len(hosts)
                if kind == "NodesAdded" and e.get("refused"):
                    # The give-back was refused: they were held all along.
                    back = sum(now - removed_at.pop(h, now) for h in hosts)
                    held_s, given_s = held_s + back, given_s - back
                    held, released, out_now = held + n, released - n, max(0, out_now - n)
                elif kind == "NodesAdded":
                    held, added, out_now = held + n, added + n, max(0, out_now - n)
                else:
                    removed_at.update(dict.fromkeys(hosts, now))
                    held, released, out_now = held - n, released + n, out_now + n
        held_s += held * (end - t)
        given_s += out_now * (end - t)
        used = sum(_overlap(j, start, end) for j in jobs)
        out.append(AllocationAccount(start, end, len(seg.header["nodes"]), held_s, used, given_s, released, added))
    return out


def _overlap(job: Job, start: float, end: float) -> float:
    """Node-seconds the job held between start and end, from its size history."""
    total = 0.0
    size, since = 0, start
    for e in job.events:
        if e.event not in _TIMELINE:
            continue
        t = min(max(e.time, start), end)
        total += size * (t - since)
        size, since = (0 if e.event is JobEventKind.ENDED else e.nodes), t
    return total + size * (end - since)
