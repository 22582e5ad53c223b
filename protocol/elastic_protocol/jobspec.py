"""The job description: what a job file holds and what `submit` carries on the wire.

Validated the same way by esubmit (to answer before anything is sent) and by the daemon
(which trusts no client); unknown keys are errors so a typo never silently does nothing.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from enum import Enum
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    Tag,
    field_validator,
    model_validator,
)

from elastic_protocol.models import ReconfigCost, SpeedupModel, parse_speedup
from elastic_protocol.timefmt import parse_time_limit


def _no_nul(v: str) -> str:
    # exec, open and chdir cannot take a NUL: refuse it here, naming the field, rather
    # than fail at launch.
    if "\0" in v:
        raise ValueError("must not contain a NUL character")
    return v


# Strings that end up in argv, the environment or a path.
OsStr = Annotated[str, AfterValidator(_no_nul)]


# The widest job a file may ask for: larger is a typo (no machine has more nodes).
MAX_NODES = 1_000_000


class JobKind(str, Enum):
    RIGID = "rigid"
    MOLDABLE = "moldable"
    MALLEABLE = "malleable"
    EVOLVING = "evolving"


class NodeRange(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    min: Annotated[int, Field(ge=1, le=MAX_NODES)]
    max: Annotated[int, Field(ge=1, le=MAX_NODES)]
    preferred: Annotated[int, Field(ge=1, le=MAX_NODES)] | None = None

    @model_validator(mode="after")
    def _ordered(self) -> NodeRange:
        if self.min > self.max:
            raise ValueError(f"min ({self.min}) is greater than max ({self.max})")
        if self.preferred is not None and not self.min <= self.preferred <= self.max:
            raise ValueError(
                f"preferred ({self.preferred}) is outside min..max ({self.min}..{self.max})"
            )
        return self


def _nodes_form(v: object) -> str | None:
    if isinstance(v, (dict, NodeRange)):
        return "range"
    if isinstance(v, int) and not isinstance(v, bool):
        return "count"
    return None


# Tagged so that an error names `nodes.min`, not every branch pydantic tried.
NodesField = Annotated[
    Annotated[Annotated[int, Field(ge=1, le=MAX_NODES)], Tag("count")] | Annotated[NodeRange, Tag("range")],
    Discriminator(
        _nodes_form,
        custom_error_type="nodes_form",
        custom_error_message="must be an integer or a table {min, max, preferred}",
    ),
]
_UNION_TAGS = {"count", "range"}


class PerfModel(BaseModel):
    """What policies that predict run times know of a job (and what the synthetic app and
    the simulator follow): speedup, work and reconfiguration cost."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    # "linear", "amdahl:F" (serial fraction F in [0, 1]) or "rho:R" (R in [0, 1)).
    speedup: str = "linear"
    # Seconds the job's work takes on one node; None: derived from the time limit.
    work: Annotated[float, Field(gt=0)] | None = None
    # Reconfiguration cost (MEBF): T_dr = alpha*dN + beta/N, T_p = b*dN seconds.
    alpha: Annotated[float, Field(ge=0)] = 0.0
    beta: Annotated[float, Field(ge=0)] = 0.0
    b: Annotated[float, Field(ge=0)] = 0.0

    @field_validator("speedup")
    @classmethod
    def _known_speedup(cls, v: str) -> str:
        try:
            parse_speedup(v)
        except ValueError:
            raise ValueError("must be 'linear', 'amdahl:F' with F in [0, 1] or 'rho:R' with R in [0, 1)") from None
        return v

    @property
    def speedup_model(self) -> SpeedupModel:
        return parse_speedup(self.speedup)

    @property
    def reconfig_cost(self) -> ReconfigCost:
        return ReconfigCost(self.alpha, self.beta, self.b)


class EvolutionStep(BaseModel):
    """One step of an evolving job's declared evolution: this many nodes for this long."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    # Slurm time formats, as time_limit ("10" is ten minutes, "0:30" thirty seconds).
    duration: str | int
    nodes: Annotated[int, Field(ge=1)]

    @field_validator("duration")
    @classmethod
    def _duration_parses(cls, v: str | int) -> str | int:
        if parse_time_limit(v) is None:
            raise ValueError("a step cannot last UNLIMITED")
        return v

    @property
    def seconds(self) -> int:
        seconds = parse_time_limit(self.duration)
        assert seconds is not None
        return seconds


MAX_EVOLUTION_STEPS = 256


class MpiSettings(BaseModel):
    """How elasticd runs an MPI job (`launcher = "mpi"`): one mpirun over the job's hosts."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    ranks_per_node: Annotated[int, Field(ge=1, le=1024)] = 1
    # How a malleable MPI job changes size: "spawn" (MPI_Comm_spawn from inside, the
    # application's communicator grows and shrinks in place) or "restart" (checkpoint,
    # exit, elasticd starts mpirun again on the new host set).
    malleability: Literal["spawn", "restart"] = "spawn"
    # Passed to mpirun before the command (e.g. ["--mca", "btl", "self,tcp"]).
    mpirun_args: list[Annotated[str, Field(min_length=1)]] = Field(default_factory=list)


class JobSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    name: Annotated[str, Field(min_length=1, max_length=128)]
    command: Annotated[list[Annotated[OsStr, Field(min_length=1)]], Field(min_length=1)]
    nodes: NodesField
    kind: JobKind | None = None
    time_limit: str | int | None = None
    working_dir: OsStr | None = None
    env: dict[Annotated[str, Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")], OsStr] = Field(
        default_factory=dict
    )
    output: Annotated[OsStr, Field(min_length=1)] = "elastic-%j.out"
    error: Annotated[OsStr, Field(min_length=1)] | None = None
    submit_offset: Annotated[float, Field(ge=0)] = 0.0
    # MiB the job's output files may hold in all before it is ended (FAILED, the cap named);
    # None: the daemon's --output-cap (1024 MiB unless the operator says otherwise).
    output_cap: Annotated[int, Field(ge=1, le=1 << 30)] | None = None
    model: PerfModel | None = None
    # An evolving job's full evolution, declared up front, for the fit policy.
    evolution: Annotated[list[EvolutionStep], Field(min_length=1, max_length=MAX_EVOLUTION_STEPS)] | None = None
    # "host": the command runs once per host (like srun); "mpi": once per job, under mpirun.
    launcher: Literal["host", "mpi"] = "host"
    # The Python interpreter whose directory goes first on the job's PATH (default: the one
    # the daemon runs, whose environment has elastic_apps).
    python: Annotated[OsStr, Field(min_length=1, pattern=r"^/")] | None = None
    mpi: MpiSettings | None = None

    @field_validator("name")
    @classmethod
    def _name_is_one_word(cls, v: str) -> str:
        if any(c.isspace() or c == "/" or not c.isprintable() for c in v):
            raise ValueError("must be one word without spaces, '/' or control characters")
        return v

    @field_validator("time_limit")
    @classmethod
    def _limit_parses(cls, v: str | int | None) -> str | int | None:
        if v is not None:
            parse_time_limit(v)
        return v

    @model_validator(mode="after")
    def _kind_fits_nodes(self) -> JobSpec:
        if (self.resolved_kind is JobKind.RIGID and isinstance(self.nodes, NodeRange)
                and self.nodes.min != self.nodes.max):
            raise ValueError("nodes: a rigid job needs a fixed node count (nodes = N, or min == max)")
        if self.evolution is not None:
            self._check_evolution(self.evolution)
        if self.mpi is not None and self.launcher != "mpi":
            raise ValueError('mpi: only MPI jobs (launcher = "mpi") take an [mpi] table')
        if self.launcher == "mpi" and self.resolved_kind is JobKind.EVOLVING:
            raise ValueError('launcher: an evolving job cannot use launcher = "mpi" (rigid, moldable or malleable)')
        return self

    @property
    def mpi_settings(self) -> MpiSettings:
        """The [mpi] table with its defaults (meaningful when launcher = "mpi")."""
        return self.mpi if self.mpi is not None else MpiSettings()

    def _check_evolution(self, steps: list[EvolutionStep]) -> None:
        if self.resolved_kind is not JobKind.EVOLVING:
            raise ValueError('evolution: only evolving jobs (kind = "evolving") declare an evolution')
        lo, hi, _ = self.node_bounds
        for i, step in enumerate(steps, 1):
            if not lo <= step.nodes <= hi:
                raise ValueError(f"evolution: step {i} uses {step.nodes} nodes, outside nodes min..max ({lo}..{hi})")
        limit = self.limit_seconds
        total = sum(step.seconds for step in steps)
        if limit is not None and total > limit:
            raise ValueError(
                f"evolution: the steps last {total} s in all, longer than time_limit ({limit} s)"
            )

    @property
    def evolution_steps(self) -> tuple[tuple[float, int], ...]:
        """The declared evolution as (seconds, nodes) pairs; empty if none."""
        if self.evolution is None:
            return ()
        return tuple((float(s.seconds), s.nodes) for s in self.evolution)

    @property
    def resolved_kind(self) -> JobKind:
        """A plain count means rigid and a range means moldable unless the file says more."""
        if self.kind is not None:
            return self.kind
        return JobKind.RIGID if isinstance(self.nodes, int) else JobKind.MOLDABLE

    @property
    def node_bounds(self) -> tuple[int, int, int]:
        """(min, max, preferred) whatever form the file used; preferred defaults to max."""
        if isinstance(self.nodes, int):
            return self.nodes, self.nodes, self.nodes
        pref = self.nodes.preferred if self.nodes.preferred is not None else self.nodes.max
        return self.nodes.min, self.nodes.max, pref

    @property
    def limit_seconds(self) -> int | None:
        return None if self.time_limit is None else parse_time_limit(self.time_limit)


def format_validation_errors(errors: Sequence[Mapping[str, Any]], drop_prefix: tuple[str | int, ...] = ()) -> list[str]:
    """One line per problem, naming the field by its dotted path, as users read job files."""
    lines: list[str] = []
    for err in errors:
        loc = list(err.get("loc", ()))
        if drop_prefix and tuple(loc[: len(drop_prefix)]) == drop_prefix:
            loc = loc[len(drop_prefix) :]
        # Pydantic names union branches ("int", "NodeRange"); users know only field names.
        loc = [p for p in loc if p not in _UNION_TAGS and not _is_branch_name(p)]
        where = ".".join(str(p) for p in loc) or "(file)"
        msg = str(err.get("msg", "invalid"))
        if err.get("type") == "extra_forbidden":
            msg = "unknown field"
        elif err.get("type") == "missing":
            msg = "missing required field"
        msg = msg.removeprefix("Value error, ")
        if not loc and ": " in msg:
            # Whole-model checks name their field at the start of the message.
            lines.append(msg)
            continue
        lines.append(f"{where}: {msg}")
    # A union failure reports once per branch; keep each distinct line once.
    return list(dict.fromkeys(lines))


def _is_branch_name(part: str | int) -> bool:
    """Pydantic's names for union branches and validators, which no job file contains."""
    return isinstance(part, str) and (
        part in {"int", "str", "float", "constrained-int"} or "[" in part
    )


# What the daemon sets in every process of a job (PROTOCOL.md, "Application channel"): a
# job file's `env` cannot change them, and says so rather than being overridden unseen.
DAEMON_SET_ENV = frozenset({
    "ELASTIC_JOB_ID", "ELASTIC_JOB_NAME", "ELASTIC_JOB_HOSTS", "ELASTIC_JOB_NUM_NODES",
    "ELASTIC_HOSTFILE", "ELASTIC_HOST", "ELASTIC_NODE_INDEX", "ELASTIC_APP_ADDRESS",
    "ELASTIC_JOB_SECRET", "ELASTIC_JOINING", "ELASTIC_TAG",
})


def env_problems(spec: JobSpec) -> list[str]:
    """One line per `env` key the daemon sets itself for every process of the job."""
    return [f"env.{k}: set by the daemon for every process of the job; a job file cannot change it"
            for k in spec.env if k in DAEMON_SET_ENV]
