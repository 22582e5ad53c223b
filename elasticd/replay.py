"""Replaying a real run's event log through the core: the same decisions, or the first one
that differs.

The daemon's core is deterministic given its events (each carries its time), and a policy is
built fresh at every daemon start, so feeding a segment's events to a new core with the
segment's settings must give back every recorded action. Each segment's core starts where the
daemon's did: with the next job and order ids of its header (the journal's, kept across a clean
stop), and, for a daemon that recovered jobs from its journal, those jobs as the replay had
them, taken back through `Core.restore` (the journal holds exactly what the log had committed).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from elasticd.core.codec import CodecError, action_to_dict, event_from_dict
from elasticd.core.engine import Core
from elasticd.core.events import PassDue
from elasticd.core.job import Job
from elasticd.core.record import job_state, restore_job
from elasticd.errors import ElasticError
from elasticd.eventlog import LOG_FILE, Segment, read_log
from elasticd.policies.registry import make_policy


class ReplayDiverged(ElasticError):
    """The replayed core decided differently from the recorded run."""

    code = "replay_diverged"


@dataclass(frozen=True)
class ReplayedStart:
    """One daemon start as its replay left it: what `sim --from-log` needs to tell one
    daemon's run (its machine, its policy, its jobs) from the next one's."""

    header: dict[str, Any]
    line: int  # the header's line in the log
    core: Core  # at the segment's last event


@dataclass
class ReplayResult:
    core: Core  # as the last daemon start left it
    jobs: dict[int, Job]  # every job of every start (a clean stop's jobs are not carried over)
    segments: int
    events: int
    actions: int
    passes: int
    decisions: int  # actions that came out of policy passes
    starts: list[ReplayedStart] = field(default_factory=list)  # one per segment, in log order


def core_for(header: dict[str, Any], previous: Core | None) -> Core:
    """The core a daemon start built: fresh, or with the jobs it recovered."""
    policy = make_policy(header["policy"], dict(header.get("params", {})))
    core = Core(header["nodes"], policy, first_job_id=int(header["next_job_id"]),
                order_deadline=float(header["order_deadline"]), refuse_backoff=float(header["refuse_backoff"]))
    core.grow_to = int(header.get("grow_to", 0))  # an allocation that grows took wider jobs
    jobs: list[Job] = []
    if header.get("recovered"):
        if previous is None:
            lost = header.get("history_lost")  # the daemon found its log removed while it ran
            raise ReplayDiverged(f"the log starts with a recovered daemon: the run before it is not in the log"
                                 f"{f' ({lost})' if lost else ''}")
        # Copied through the journal's own record format, as the real daemon read them.
        jobs = [restore_job(j.job_id, j.spec, json.loads(json.dumps(job_state(j)))) for j in previous.jobs.values()]
    # At every start, not only a recovery: the daemon takes its next job and order ids from the
    # journal, whose jobs a clean stop removes but whose counters it keeps (ids are never
    # reused in a state directory); a start after a stop numbers orders on from the last one.
    core.restore(jobs, int(header["next_order"]), float(header["time"]), int(header["next_job_id"]))
    return core


def replay(path: Path, strict: bool = True) -> ReplayResult:
    """Feed every recorded event to a core; with `strict`, raise ReplayDiverged at the first
    action list that differs from the recorded one (without: go on, skipping events the core
    refuses — what salvaging a damaged state directory needs)."""
    if path.is_dir():
        path = path / LOG_FILE
    segments = read_log(path)
    if not segments:
        raise ReplayDiverged(f"{path}: the event log holds no daemon start")
    core: Core | None = None
    jobs: dict[int, Job] = {}
    events = actions = passes = decisions = 0
    starts: list[ReplayedStart] = []
    for seg in segments:
        core = core_for(seg.header, core)
        for rec in seg.records:
            try:
                got = _feed(core, rec, path, seg)
            except ReplayDiverged:
                if strict:
                    raise
                continue
            events += 1
            actions += len(got)
            if rec["event"]["type"] == PassDue.__name__:
                passes += 1
                decisions += len(got)
            if strict and got != rec["actions"]:
                raise ReplayDiverged(
                    f"{path}:{rec['line']}: event {rec['seq']} ({rec['event']['type']} at {rec['event']['time']}) "
                    f"gave {got}, the run recorded {rec['actions']}")
        jobs.update(core.jobs)
        starts.append(ReplayedStart(seg.header, seg.line, core))
    assert core is not None
    return ReplayResult(core, jobs, len(segments), events, actions, passes, decisions, starts)


def _feed(core: Core, rec: dict[str, Any], path: Path, seg: Segment) -> list[dict[str, Any]]:
    try:
        event = event_from_dict(rec["event"])
    except (CodecError, KeyError, TypeError, ValueError) as exc:
        raise ReplayDiverged(f"{path}:{rec.get('line')}: unreadable event: {exc}") from None
    try:
        out = core.handle(event)
    except ElasticError as exc:
        raise ReplayDiverged(f"{path}:{rec.get('line')}: the core refused recorded event {rec.get('seq')}: {exc}") from None
    # Through JSON, as the record was: tuples become lists, infinities stay floats.
    normalized: list[dict[str, Any]] = json.loads(json.dumps([action_to_dict(a) for a in out]))
    return normalized
