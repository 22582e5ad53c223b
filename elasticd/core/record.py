"""A job's state as plain data (dicts of JSON types) and back, for the daemon's journal.

Pure: the core hands out what changed and takes back what was saved; where the data is
kept, and when it is written, is the daemon's business. The spec travels separately (it
never changes after submission, so the journal writes it once).
"""

from __future__ import annotations

from typing import Any

from elastic_protocol.jobspec import JobSpec
from elasticd.core.events import Cause, JobEventKind, OrderKind
from elasticd.core.job import Job, JobEvent
from elasticd.core.orders import Order, Settlement
from elasticd.core.states import JobState


def job_state(job: Job) -> dict[str, Any]:
    """Everything about the job that changes after submission."""
    o = job.order
    return {
        "submit_time": job.submit_time,
        "state": job.state.value,
        "hosts": job.hosts,
        "start_time": job.start_time,
        "end_time": job.end_time,
        "exit_code": job.exit_code,
        "exit_signal": job.exit_signal,
        "reason": job.reason,
        "ending_as": None if job.ending_as is None else job.ending_as.value,
        "malleable_ready": job.malleable_ready,
        "launched": job.launched,
        "deregistered": job.deregistered,
        "held": job.held,
        "last_resize": job.last_resize,
        "order": None if o is None else [o.order_id, o.kind, o.count, list(o.new_hosts), o.issued,
                                         o.deadline, o.settled, o.cause],
        "leaving": sorted(job.leaving),
        "release_cause": job.release_cause,
        "requested": job.requested,
        "requested_at": job.requested_at,
        "no_orders_until": job.no_orders_until,
        "refused_until": job.refused_until,
        "events": [[e.time, e.event, e.nodes, list(e.hosts), e.detail, e.cause] for e in job.events],
        "limit": [job.limit_used, job.limit_since, job.limit_due],
        "node_seconds": job.node_seconds,
        "size_since": job._size_since,
    }


def restore_job(job_id: int, spec: JobSpec, data: dict[str, Any]) -> Job:
    job = Job(job_id=job_id, spec=spec, submit_time=data["submit_time"])
    job.state = JobState(data["state"])
    job.hosts = list(data["hosts"])
    job.start_time = data["start_time"]
    job.end_time = data["end_time"]
    job.exit_code = data["exit_code"]
    job.exit_signal = data["exit_signal"]
    job.reason = data["reason"]
    job.ending_as = None if data["ending_as"] is None else JobState(data["ending_as"])
    job.malleable_ready = data["malleable_ready"]
    # Journals written before launches were confirmed: a job that held nodes had been launched.
    job.launched = data.get("launched", job.state.holds_nodes)
    job.deregistered = data["deregistered"]
    job.held = data.get("held", False)
    job.last_resize = data["last_resize"]
    o = data["order"]
    if o is not None:
        job.order = Order(o[0], job_id, OrderKind(o[1]), o[2], tuple(o[3]), o[4], o[5],
                          None if o[6] is None else Settlement(o[6]), Cause(o[7]) if len(o) > 7 else Cause.POLICY)
    job.leaving = set(data["leaving"])
    job.release_cause = None if data.get("release_cause") is None else Cause(data["release_cause"])
    job.requested = data["requested"]
    job.requested_at = data["requested_at"]
    job.no_orders_until = data["no_orders_until"]
    job.refused_until = data["refused_until"]
    job.events = [_event(e) for e in data["events"]]
    limit = data.get("limit")
    if limit is not None:
        job.limit_used, job.limit_since, job.limit_due = limit
    elif job.start_time is not None and job.time_limit is not None:  # journals before limits scaled
        job.limit_since, job.limit_due = job.start_time, job.start_time + job.time_limit
    job.node_seconds = data["node_seconds"]
    job._size_since = data["size_since"]
    return job


def _event(e: list[Any]) -> JobEvent:
    """One saved history entry; entries saved before causes were kept have five fields."""
    cause = Cause(e[5]) if len(e) > 5 and e[5] is not None else None
    return JobEvent(e[0], JobEventKind(e[1]), e[2], tuple(e[3]), e[4], cause)
