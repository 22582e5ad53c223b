"""What `equeue` and `elasticd status` show: read from the parts, never changing them.

The queue document (each job with its note, as squeue's REASON column gives it) and the
status document (the daemon's settings, nodes, jobs by state, and what keeps it from doing
its work: a full state directory, applications that cannot reconnect, the allocation's
state). Every fact is asked of the part that owns it by a named call or a public field;
the wire form of a job and a node is elasticd.daemon.views'.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Mapping

from elastic_protocol.control import Queue, QueueDocument, StatusInfo
from elastic_protocol.jobspec import JobKind
from elastic_protocol.version import PROTOCOL_VERSION
from elasticd import __version__
from elasticd.core.engine import Core
from elasticd.daemon.clock import Clock
from elasticd.daemon.config import DaemonConfig, Endpoints
from elasticd.daemon.launching import Launching
from elasticd.daemon.nodes import Nodes
from elasticd.daemon.persistence import Persistence
from elasticd.daemon.recovery import Recovery
from elasticd.daemon.room import DiskRoom
from elasticd.daemon.views import job_info, job_note, node_infos


class Status:
    def __init__(self, config: DaemonConfig, core: Core, clock: Clock, endpoints: Endpoints,
                 persistence: Persistence, room: DiskRoom, recovery: Recovery, launching: Launching, nodes: Nodes,
                 policy_settings: Mapping[str, object], started_at: float) -> None:
        self.config = config
        self.core = core
        self.clock = clock
        self.endpoints = endpoints
        self.persistence = persistence
        self.room = room
        self.recovery = recovery
        self.launching = launching
        self.nodes = nodes
        self.policy_settings = policy_settings
        self.started_at = started_at

    def queue(self, req: Queue) -> QueueDocument:
        now = self.clock.now()
        if req.job_ids is not None:
            jobs = [self.core.job(j) for j in req.job_ids]
        else:
            jobs = [j for j in self.core.jobs.values() if req.all or not j.state.is_final]
        pending = self.core.pending_ids
        # The first that waits for nodes: one the cluster is too small for waits for no turn.
        head = next((j for j in pending if j not in self.core.cannot_start), None)
        blocked = bool(pending) and self.storage_problem() is not None
        cut_off = set(self.cut_off())
        joining = self.launching.joining
        return QueueDocument(generated_at=now,
                             jobs=[job_info(j, now, job_note(j, now, j.job_id == head, blocked, j.job_id in joining,
                                                             j.job_id in cut_off))
                                   for j in jobs])

    def status(self) -> StatusInfo:
        counts = Counter(j.state.value for j in self.core.jobs.values())
        return StatusInfo(
            version=__version__,
            protocol=PROTOCOL_VERSION,
            pid=os.getpid(),
            mode=self.config.mode,
            policy=self.core.policy.name,
            policy_params={k: (v if isinstance(v, (int, float, str, bool)) else str(v))
                           for k, v in self.policy_settings.items()},
            started_at=self.started_at,
            control_address=self.endpoints.control_address,
            app_address=self.endpoints.app_address,
            nodes=node_infos(self.core.nodes),
            jobs_by_state=dict(counts),
            journal=None if self.persistence.journal_path is None else str(self.persistence.journal_path),
            recovered_jobs=self.recovery.recovered_jobs,
            salvaged=self.recovery.salvaged,
            storage=self.storage_problem(),
            applications=self.app_channel_problem(),
            allocation=self.nodes.allocation_status(),
            metrics=self.endpoints.metrics_url,
        )

    def cut_off(self) -> list[int]:
        """The running resizable jobs whose applications cannot reconnect: started before this
        start, which found their application port taken, and not registered since. Their
        library knows only the address it was started with; they run as rigid to their end."""
        if self.endpoints.app_port_taken is None:
            return []
        return [j.job_id for j in map(self.core.job, self.core.active_ids)
                if j.kind in (JobKind.MALLEABLE, JobKind.EVOLVING) and not j.malleable_ready and not j.deregistered
                and j.start_time is not None and j.start_time < self.started_at]

    def app_channel_problem(self) -> str | None:
        """Why applications of jobs taken back cannot reconnect, in words (`elasticd start`,
        `elasticd status`; the jobs' AppPortTaken); None when they can."""
        jobs = self.cut_off()
        if not jobs or self.endpoints.app_port_taken is None:
            return None
        old, new = self.endpoints.app_port_taken
        return (f"the application port {old} of the previous daemon was held by another process at this start, "
                f"so this one listens on {new}: the applications of job(s) {', '.join(map(str, jobs))} cannot "
                f"reconnect, and those jobs run as rigid to their end (port {old} free at `elasticd start` keeps "
                "them malleable across a restart)")

    def storage_problem(self) -> str | None:
        """What the state directory keeps from happening, in words (`elasticd status`, and
        the pending jobs' StateDiskFull): too little free space to start jobs, or the last
        write that failed; None when neither."""
        problems = [self.room.space_warning] if self.room.short_of_space() else []
        if self.persistence.write_error is not None:
            problems.append(f"the last write failed: {self.persistence.write_error} (changes held in memory until one "
                            "succeeds; submissions, answers and starts are refused meanwhile)")
        return "; ".join(p for p in problems if p) or None
