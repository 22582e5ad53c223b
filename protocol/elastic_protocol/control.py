"""Control channel: command-line tools <-> daemon, one JSON object per line.

A connection starts with `hello` (version + the daemon's secret); every later line is one
request answered by exactly one response line, in order.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

from elastic_protocol.jobspec import JobSpec


class _Req(BaseModel):
    # Strict: a JSON `true` is not job 1 and "3" is not 3 (in lax mode `cancel [true]`
    # cancelled job 1); no infinite or NaN numbers.
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, allow_inf_nan=False)


class Hello(_Req):
    op: Literal["hello"] = "hello"
    version: int
    secret: str
    client: str = "unknown"


class Submit(_Req):
    op: Literal["submit"] = "submit"
    spec: JobSpec


class Cancel(_Req):
    op: Literal["cancel"] = "cancel"
    job_ids: Annotated[list[int], Field(min_length=1)]


class Queue(_Req):
    op: Literal["queue"] = "queue"
    job_ids: list[int] | None = None
    # Finished jobs are shown only when asked for, as squeue does.
    all: bool = False


class Status(_Req):
    op: Literal["status"] = "status"


class Wait(_Req):
    """Block until the jobs have ended (or the timeout passes); spares clients a poll loop."""

    op: Literal["wait"] = "wait"
    job_ids: list[int] | None = None
    timeout: Annotated[float, Field(gt=0)] | None = None


class Resize(_Req):
    """Order a running malleable job to a node count now, as `scontrol update NumNodes`."""

    op: Literal["resize"] = "resize"
    job_id: int
    nodes: Annotated[int, Field(ge=1)]
    # Keep it at that size: the policy does not resize it until the hold is released.
    hold: bool = False


class ReleaseHold(_Req):
    """Let the policy resize a job held by `resize ... hold` again."""

    op: Literal["release_hold"] = "release_hold"
    job_id: int


class Stop(_Req):
    op: Literal["stop"] = "stop"


Request = Annotated[
    Hello | Submit | Cancel | Queue | Status | Wait | Resize | ReleaseHold | Stop, Field(discriminator="op")
]
REQUEST_ADAPTER: TypeAdapter[Any] = TypeAdapter(Request)


class ErrorBody(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    code: str
    message: str
    # One entry per problem (for example one per invalid job-file field).
    details: list[str] = Field(default_factory=list)


class Response(BaseModel):
    model_config = ConfigDict(extra="forbid")

    ok: bool
    error: ErrorBody | None = None
    data: dict[str, Any] = Field(default_factory=dict)


class JobEventInfo(BaseModel):
    model_config = ConfigDict(extra="forbid")

    time: float
    event: str
    nodes: int
    hosts: list[str]
    detail: str | None
    # Who decided it: policy, user, app, fault, limit or daemon (None in older records).
    cause: str | None = None


class JobInfo(BaseModel):
    """Every field is always present (null where unknown), so scripts need no guards."""

    model_config = ConfigDict(extra="forbid")

    job_id: int
    name: str
    kind: str
    state: str
    reason: str | None
    nodes: int
    nodes_min: int
    nodes_max: int
    nodes_preferred: int
    hosts: list[str]
    submit_time: float
    start_time: float | None
    end_time: float | None
    time_limit: int | None
    time_used: float
    exit_code: int | None
    exit_signal: int | None
    exit: str | None
    command: list[str]
    working_dir: str | None
    output_path: str | None
    error_path: str | None
    node_seconds: float
    events: list[JobEventInfo]
    # Held at its size by a user's resize: the policy leaves its size alone.
    held: bool = False
    # Why it is as it is, in Slurm's words where Slurm has them: a pending job's reason
    # (Resources: first in line, waiting for nodes; Priority: jobs ahead of it wait), who
    # asked for the resize in progress (ResizeBy:user|policy|app), NotRegistered (a
    # malleable job that has not registered a handler a minute after its start), Held.
    note: str | None = None
    # An evolving job's request waiting to be granted (`request N` on the application
    # channel), in nodes; 0 when none waits.
    requested: int = 0
    # The limit the daemon ends the job at, in seconds from its start, as things stand:
    # `time_limit` (asked for at the preferred size) scaled by the job's model to the size it
    # runs at, and its resizes' costs added; `time_limit` itself without a model. None until
    # it starts, and without a limit.
    limit_now: float | None = None


QUEUE_DOCUMENT_VERSION = 1


class QueueDocument(BaseModel):
    model_config = ConfigDict(extra="forbid")

    version: int = QUEUE_DOCUMENT_VERSION
    generated_at: float
    jobs: list[JobInfo]


class NodeInfo(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str
    state: str
    job_id: int | None


class StatusInfo(BaseModel):
    model_config = ConfigDict(extra="forbid")

    version: str
    protocol: int
    pid: int
    mode: str
    policy: str
    policy_params: dict[str, Any] = Field(default_factory=dict)
    started_at: float
    control_address: str
    app_address: str
    nodes: list[NodeInfo]
    jobs_by_state: dict[str, int]
    # The journal file (None: the daemon runs without one) and how many jobs this daemon
    # took back from it when it started (after a crash of the previous one).
    journal: str | None = None
    recovered_jobs: int = 0
    # What `--salvage` made of a damaged journal at this start (jobs from its readable rows,
    # rebuilt from the event log, lost; where the damaged files were kept); None without one.
    salvaged: str | None = None
    # Why the state directory keeps jobs from starting (less than --min-free-space free) or
    # changes from being saved (the last failed write), in words; None when all is well.
    storage: str | None = None
    # Why the applications of jobs taken back at this start cannot reconnect (the previous
    # daemon's application port was held by another process), naming the jobs; None when
    # they can.
    applications: str | None = None
    # The Slurm allocation, when it shrinks and grows (`--release-idle`, `--grow-allocation`):
    # its rules, companion allocations and node-seconds held, used and given back.
    allocation: dict[str, Any] | None = None
    # Where the Prometheus metrics are served (the port really bound, which --metrics-port 0
    # leaves to the system); None without --metrics-port.
    metrics: str | None = None
