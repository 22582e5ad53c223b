"""What a daemon is started with (DaemonConfig), and where it listens once it runs (Endpoints).

Why a module of its own: every part of the daemon reads these settings and the command line
builds them (elasticd.cli), so they stand below every part and import none of them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from elastic_protocol.version import MAX_APP_LINE_BYTES, MAX_LINE_BYTES
from elasticd import defaults
from elasticd.core.allocation_plan import AllocationRules


@dataclass
class DaemonConfig:
    state_dir: Path
    node_names: list[str]
    policy: str = defaults.POLICY
    mode: str = "local"
    listen_host: str = "127.0.0.1"
    app_host: str = "127.0.0.1"
    control_port: int = 0
    app_port: int = 0
    kill_wait: float = defaults.KILL_WAIT
    order_deadline: float = defaults.ORDER_DEADLINE
    min_resize_interval: float = defaults.MIN_RESIZE_INTERVAL
    # Policies are also run this often while jobs exist. A job's resize interval, deferral or
    # refusal back-off ending has a pass of its own at that instant (timers.JobTimers).
    schedule_interval: float = defaults.SCHEDULE_INTERVAL
    policy_params: list[str] = field(default_factory=list)  # KEY=VALUE, as on the command line
    policy_config: str | None = None
    # Limits that keep a misbehaving client from exhausting the daemon (README: Limits).
    max_connections: int = 256  # per channel (control, application)
    max_unauthenticated: int = 32  # per channel, before their hello; the oldest is dropped
    hello_timeout: float = 10.0
    max_line_bytes: int = MAX_LINE_BYTES  # control-channel requests
    max_app_line_bytes: int = MAX_APP_LINE_BYTES
    max_queued_jobs: int = 100_000  # PENDING jobs; a submit past it is refused (queue_full)
    # Cluster mode: how processes reach the nodes (local | ssh | srun), and its settings.
    launcher: str = "local"
    launcher_options: dict[str, Any] = field(default_factory=dict)
    # Save every state change in the state directory and recover from it at start.
    journal: bool = True
    # No job is started while the state directory's file system has less free than this.
    min_free_space: int = defaults.MIN_FREE_SPACE_MIB << 20
    # Start on a state directory whose journal is missing, empty or damaged, recovering every
    # record that can be read (elasticd.daemon.salvage).
    salvage: bool = False
    # Start although running jobs of the journal hold nodes that this start leaves out: they
    # end NODE_FAIL and their processes are ended. Without it such a start is refused.
    drop_missing_nodes: bool = False
    # Bytes a job's output files may hold in all (a job file's output_cap, in MiB, overrides).
    output_cap: int = defaults.OUTPUT_CAP_MIB << 20
    # Serve Prometheus metrics on this port of listen_host (None: not at all).
    metrics_port: int | None = None
    output_check_interval: float = 0.5
    # The Slurm allocation shrinks and grows (elasticd.daemon.allocation_resize): its rules,
    # the daemon's own Slurm job, and what companion allocations are submitted with.
    allocation_rules: AllocationRules | None = None
    slurm_job: str | None = None
    sbatch_args: list[str] = field(default_factory=list)

    def job_dir(self, job_id: int) -> Path:
        """A job's own folder in the state directory (its hostfile, its processes' records)."""
        return self.state_dir / "jobs" / str(job_id)


@dataclass
class Endpoints:
    """Where this daemon listens: known once its sockets are bound (Lifecycle.serve), read by
    the launches (the address applications connect back to) and by `elasticd status`."""

    control_address: str = ""
    app_address: str = ""
    # (the previous daemon's application port, the one listened on instead): set when
    # another process held it at this start (Status.app_channel_problem).
    app_port_taken: tuple[int, int] | None = None
    # Where the metrics are served (--metrics-port; the port bound, --metrics-port 0 too).
    metrics_url: str | None = None
