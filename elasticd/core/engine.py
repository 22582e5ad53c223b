"""The state machine that both the daemon and the simulator drive.

Every method takes `now` from its caller and returns the actions to carry out; nothing here
waits, sleeps or does I/O. Nodes are handed back only when the driver reports that a job's
processes are gone (`exited`), never when an end is merely requested.
"""

from __future__ import annotations

from collections.abc import Iterable

from elastic_protocol.jobspec import JobSpec

from elasticd.core.actions import Action, Launch, Terminate
from elasticd.core.job import Job
from elasticd.core.nodes import NodeTable
from elasticd.core.states import JobState
from elasticd.errors import InvalidTransition, JobRejected, PolicyError, UnknownJob
from elasticd.policies.base import (
    Decision,
    PendingView,
    Policy,
    RunningView,
    Snapshot,
    Start,
)


class Core:
    def __init__(self, node_names: Iterable[str], policy: Policy, first_job_id: int = 1) -> None:
        self.nodes = NodeTable(list(node_names))
        self.policy = policy
        self.jobs: dict[int, Job] = {}
        self._next_id = first_job_id
        # Pending job ids in queue order; dicts keep insertion order and delete in O(1).
        self._pending: dict[int, None] = {}
        self._active: dict[int, None] = {}

    # ---- queries -------------------------------------------------------------------
    def job(self, job_id: int) -> Job:
        try:
            return self.jobs[job_id]
        except KeyError:
            raise UnknownJob(f"no job {job_id}") from None

    @property
    def pending_ids(self) -> list[int]:
        return list(self._pending)

    @property
    def active_ids(self) -> list[int]:
        """Jobs holding nodes (RUNNING or RESIZING, including those being ended)."""
        return list(self._active)

    def snapshot(self, now: float) -> Snapshot:
        pending = []
        for jid in self._pending:
            j = self.jobs[jid]
            lo, hi, pref = j.bounds
            pending.append(
                PendingView(jid, j.submit_time, j.kind, lo, hi, pref, j.time_limit)
            )
        running = []
        for jid in self._active:
            j = self.jobs[jid]
            lo, hi, pref = j.bounds
            assert j.start_time is not None
            running.append(
                RunningView(
                    job_id=jid,
                    kind=j.kind,
                    size=j.size,
                    min_nodes=lo,
                    max_nodes=hi,
                    preferred=pref,
                    start_time=j.start_time,
                    time_limit=j.time_limit,
                    malleable_ready=j.malleable_ready,
                    last_resize=j.last_resize,
                    ending=j.ending_as is not None,
                )
            )
        return Snapshot(now, self.nodes.total, self.nodes.free_count, tuple(pending), tuple(running))

    # ---- events --------------------------------------------------------------------
    def check_fits(self, spec: JobSpec) -> None:
        """Reject at submit time what could never start here, one problem per line."""
        lo, _hi, _pref = spec.node_bounds
        if lo > self.nodes.total:
            field = "nodes" if isinstance(spec.nodes, int) else "nodes.min"
            raise JobRejected(
                [f"{field}: {lo} nodes requested but the cluster has {self.nodes.total}"]
            )

    def submit(self, spec: JobSpec, now: float) -> Job:
        self.check_fits(spec)
        job = Job(job_id=self._next_id, spec=spec, submit_time=now)
        self._next_id += 1
        self.jobs[job.job_id] = job
        self._pending[job.job_id] = None
        job.record(now, "submitted")
        return job

    def schedule(self, now: float) -> list[Action]:
        """Ask the policy, then carry its decisions out; call after any event."""
        if not self._pending:
            return []
        decisions = self.policy.decide(self.snapshot(now))
        actions: list[Action] = []
        for d in decisions:
            actions.extend(self._apply(d, now))
        return actions

    def _apply(self, d: Decision, now: float) -> list[Action]:
        if isinstance(d, Start):
            job = self.jobs.get(d.job_id)
            if job is None or job.state is not JobState.PENDING:
                raise PolicyError(f"{self.policy.name}: start of job {d.job_id}, which is not pending")
            lo, hi, _ = job.bounds
            if not lo <= d.nodes <= hi:
                raise PolicyError(
                    f"{self.policy.name}: job {d.job_id} started on {d.nodes} nodes, outside {lo}..{hi}"
                )
            if d.nodes > self.nodes.free_count:
                raise PolicyError(
                    f"{self.policy.name}: job {d.job_id} started on {d.nodes} nodes, "
                    f"{self.nodes.free_count} free"
                )
            job.hosts = self.nodes.allocate(job.job_id, d.nodes)
            job.state = JobState.RUNNING
            job.start_time = now
            job.account(now)
            del self._pending[job.job_id]
            self._active[job.job_id] = None
            job.record(now, "started")
            return [Launch(job.job_id, tuple(job.hosts))]
        raise PolicyError(f"{self.policy.name}: {type(d).__name__} is not supported yet")

    def cancel(self, job_id: int, now: float) -> list[Action]:
        job = self.job(job_id)
        if job.state is JobState.PENDING:
            del self._pending[job_id]
            job.state = JobState.CANCELLED
            job.end_time = now
            job.reason = "cancelled by user"
            job.record(now, "cancelled")
            return []
        if job.state.holds_nodes:
            return self._end(job, now, JobState.CANCELLED, "cancelled by user")
        return []  # already finished: cancelling is a no-op, as scancel on a done job

    def time_limit_reached(self, job_id: int, now: float) -> list[Action]:
        job = self.job(job_id)
        if not job.state.holds_nodes:
            return []
        return self._end(job, now, JobState.TIMEOUT, "time limit reached")

    def _end(self, job: Job, now: float, as_state: JobState, why: str) -> list[Action]:
        if job.ending_as is not None:
            return []  # already being ended; the first reason stands
        job.ending_as = as_state
        job.reason = why
        job.record(now, "ending", why)
        return [Terminate(job.job_id, tuple(job.hosts), as_state)]

    def launch_failed(self, job_id: int, now: float, why: str) -> None:
        """The driver could not start the job's processes; none of them is left."""
        job = self.job(job_id)
        self._finish(job, now, JobState.FAILED, None, None, f"launch failed: {why}")

    def exited(self, job_id: int, now: float, exit_code: int | None, signal: int | None) -> None:
        """All of the job's processes are gone (verified by the driver): free its nodes."""
        job = self.job(job_id)
        if not job.state.holds_nodes:
            raise InvalidTransition(f"job {job_id} exited while {job.state.value}")
        if job.ending_as is not None:
            state = job.ending_as
        elif exit_code == 0 and not signal:
            state = JobState.COMPLETED
        else:
            state = JobState.FAILED
        self._finish(job, now, state, exit_code, signal, job.reason)

    def _finish(
        self,
        job: Job,
        now: float,
        state: JobState,
        exit_code: int | None,
        signal: int | None,
        reason: str | None,
    ) -> None:
        job.account(now)
        self.nodes.release(job.job_id, job.hosts)
        self._active.pop(job.job_id, None)
        job.state = state
        job.end_time = now
        job.exit_code = exit_code
        job.exit_signal = signal
        job.reason = reason
        job.account(now)
        job.record(now, "ended", f"{state.value} {job.exit_text or ''}".strip())
        job.hosts = []

    def stop_all(self, now: float) -> list[Action]:
        """Daemon shutdown: cancel the queue and end every running job."""
        for jid in list(self._pending):
            self.cancel(jid, now)
            self.jobs[jid].reason = "daemon stopped"
        actions: list[Action] = []
        for jid in list(self._active):
            job = self.jobs[jid]
            actions.extend(self._end(job, now, JobState.CANCELLED, "daemon stopped"))
        return actions
