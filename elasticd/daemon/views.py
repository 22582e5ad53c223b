"""How the daemon's jobs and nodes look on the wire."""

from __future__ import annotations

from pathlib import Path

from elastic_protocol.control import JobEventInfo, JobInfo, NodeInfo
from elastic_protocol.jobspec import JobKind
from elasticd.core.job import Job
from elasticd.core.nodes import NodeTable
from elasticd.core.states import JobState
from elasticd.launch.base import expand_pattern

# A malleable job that has not registered this long after its start is flagged.
UNREGISTERED_AFTER = 60.0


def job_note(job: Job, now: float, first_pending: bool, disk_full: bool = False, joining: bool = False,
             cut_off: bool = False) -> str | None:
    """The job's state in a word, as squeue's REASON column gives it. `disk_full`: no job
    may start (the state directory is short of space or cannot be written), whatever else
    a pending job waits for: idle nodes would otherwise read as a scheduler that hangs.
    `joining`: a grow's processes are still being started, after the application took the
    grow (Joining): the grow may yet be undone (`grow_failed`). `cut_off`: its application
    cannot reconnect, its port taken at the daemon's restart (Status.cut_off)."""
    if job.state is JobState.PENDING:
        if job.reason is not None:  # the cluster is too small for it (Core.cannot_start)
            return "PartitionNodeLimit"
        if disk_full:
            return "StateDiskFull"
        return "Resources" if first_pending else "Priority"
    if not job.state.holds_nodes:
        return None
    if job.order is not None and not job.order.settled:
        return f"ResizeBy:{job.order.cause.value}"
    if joining:
        return "Joining"
    if job.kind in (JobKind.MALLEABLE, JobKind.EVOLVING) and not job.malleable_ready and not job.deregistered:
        if job.connection_lost():  # a library that gave up reconnecting never registers again
            return "Disconnected"
        if cut_off:
            return "AppPortTaken"
        if job.start_time is not None and now - job.start_time >= UNREGISTERED_AFTER:
            return "NotRegistered"
    return "Held" if job.held else None


def job_info(job: Job, now: float, note: str | None = None) -> JobInfo:
    lo, hi, pref = job.bounds
    spec = job.spec
    out = err = None
    if spec.working_dir:
        wd = Path(spec.working_dir)
        # A pattern with %N or %t names one file per host; it is shown for the first one.
        first = job.hosts[0] if job.hosts else "%N"
        out = str(wd / expand_pattern(spec.output, job.job_id, spec.name, first, 0))
        err = str(wd / expand_pattern(spec.error or spec.output, job.job_id, spec.name, first, 0))
    return JobInfo(
        job_id=job.job_id,
        name=spec.name,
        kind=job.kind.value,
        # Started by the policy, processes not yet confirmed (Slurm's CONFIGURING): a job is
        # shown RUNNING only once its launch is recorded and its processes exist.
        state="CONFIGURING" if job.state is JobState.RUNNING and not job.launched else job.state.value,
        reason=job.reason,
        nodes=job.size,
        nodes_min=lo,
        nodes_max=hi,
        nodes_preferred=pref,
        hosts=list(job.hosts),
        submit_time=job.submit_time,
        start_time=job.start_time,
        end_time=job.end_time,
        time_limit=job.time_limit,
        limit_now=None if job.limit_due is None or job.start_time is None else job.limit_due - job.start_time,
        time_used=job.time_used(now),
        exit_code=job.exit_code,
        exit_signal=job.exit_signal,
        exit=job.exit_text,
        command=list(spec.command),
        working_dir=spec.working_dir,
        output_path=out,
        error_path=err,
        node_seconds=job.node_seconds_at(now),
        held=job.held,
        note=note,
        requested=job.requested,
        events=[
            JobEventInfo(time=e.time, event=e.event, nodes=e.nodes, hosts=list(e.hosts), detail=e.detail,
                         cause=e.cause)
            for e in job.events
        ],
    )


def node_infos(nodes: NodeTable) -> list[NodeInfo]:
    return [NodeInfo(name=n, state=nodes.state_of(n).value, job_id=nodes.owner_of(n)) for n in nodes.members]
