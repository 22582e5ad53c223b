"""Driving the pure core by hand in tests, the way the daemon and the simulator do."""

from __future__ import annotations

from elastic_protocol.jobspec import JobSpec

from elasticd.core.engine import Core
from elasticd.core.events import Submitted
from elasticd.core.job import Job


def submit(core: Core, spec: JobSpec, now: float) -> Job:
    """A Submitted event with the id the core expects next; the new job."""
    job_id = core.next_job_id
    core.handle(Submitted(now, job_id, spec))
    return core.job(job_id)
