"""Control requests that change jobs: submit, cancel, resize, release a hold, wait.

What `esubmit`, `ecancel`, `elasticd resize` and `ewait` ask, checked and handed to the core
as events (a decision, committed before it is answered: elasticd.daemon.feed). The wire
(authentication, framing, typed errors) is elasticd.daemon.control_server's; the queue and
status documents are elasticd.daemon.status'; the stop is the lifecycle's. This part keeps
no state of its own.
"""

from __future__ import annotations

import logging

from elastic_protocol.jobspec import JobSpec
from elasticd.core import events as ev
from elasticd.core.engine import Core
from elasticd.daemon.clock import Clock
from elasticd.daemon.config import DaemonConfig
from elasticd.daemon.feed import CoreFeed
from elasticd.daemon.metrics import DaemonMetrics
from elasticd.daemon.room import DiskRoom
from elasticd.daemon.tasks import LoopTasks
from elasticd.errors import QueueFull, ResizeRejected, StateWriteError

log = logging.getLogger("elasticd")


class ControlRequests:
    def __init__(self, config: DaemonConfig, core: Core, clock: Clock, feed: CoreFeed, room: DiskRoom,
                 tasks: LoopTasks, metrics: DaemonMetrics | None) -> None:
        self.config = config
        self.core = core
        self.clock = clock
        self.feed = feed
        self.room = room
        self.tasks = tasks
        self.metrics = metrics

    def submit(self, spec: JobSpec) -> int:
        if self.room.without_reserve() is not None:
            raise StateWriteError(f"not taken: {self.room.reserve_missing}; nothing was queued")
        if self.core.pending_count >= self.config.max_queued_jobs:
            raise QueueFull(f"the queue holds {self.config.max_queued_jobs} pending jobs, its limit; "
                            "submit again once some have started")
        job_id = self.core.next_job_id
        self.feed.do(ev.Submitted(self.clock.now(), job_id, spec))
        if self.metrics is not None:
            self.metrics.submitted.inc()
        log.info("job %d submitted: %s, nodes %s", job_id, spec.name, spec.nodes)
        self.feed.pass_soon()
        return job_id

    def cancel(self, job_id: int) -> tuple[str, str | None]:
        """The job's state after the cancel, and None; or, when the cancel cannot be saved
        (a full disk), it is carried out all the same — the operator's way to end the job
        that fills the disk — and the second value says what was not saved and what a
        restart before it is saved would show."""
        event = ev.CancelRequested(self.clock.now(), job_id)
        unsaved: str | None = None
        try:
            self.feed.do(event)
        except StateWriteError as exc:
            held = self.core.job(job_id).state.holds_nodes
            self.feed.do(event, saved=False)
            after = ("ended as its processes' recorded exit says (they are ended now: FAILED with SIGTERM's "
                     "signal, or NODE_FAIL if none was recorded)" if held
                     else "PENDING again (cancel it again then)")
            unsaved = (f"job {job_id} is cancelled, but the cancel could not be saved ({exc}); it is saved as soon "
                       f"as the state directory takes writes again; a daemon restarted before that shows the job "
                       f"{after}")
            log.warning("%s", unsaved)
        self.feed.changed()
        self.feed.pass_soon()
        return self.core.job(job_id).state.value, unsaved

    def resize(self, job_id: int, nodes: int, hold: bool = False) -> None:
        self.feed.do(ev.ResizeRequested(self.clock.now(), job_id, nodes, hold))
        self.feed.changed()

    def release_hold(self, job_id: int) -> None:
        job = self.core.job(job_id)
        if job.state.is_final:
            # A hold ends with its job: `released; the policy may resize it again` said of a
            # finished job (held until it ended) would be false. Refused here, as `resize`
            # refuses it, so that the core replays the logs that recorded such a release.
            raise ResizeRejected(f"job {job_id} is {job.state.value}, not running")
        self.feed.do(ev.HoldReleased(self.clock.now(), job_id))
        self.feed.changed()
        self.feed.pass_soon()

    async def wait_jobs(self, job_ids: list[int] | None, timeout: float | None) -> bool:
        """True once every given job (all jobs when None) has ended; False on timeout."""

        def done() -> bool:
            ids = self.core.jobs.keys() if job_ids is None else job_ids
            return all(self.core.job(j).state.is_final for j in ids)

        return await self.tasks.wait(done, timeout)
