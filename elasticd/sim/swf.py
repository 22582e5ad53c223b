"""Reading Standard Workload Format logs as real archives ship them.

Real logs contain cancelled jobs (run time 0 or -1), jobs wider than the machine, missing
requested times, -1 everywhere, blank lines and the odd malformed line. Every one of these
is handled by an explicit rule, and every job not kept is counted under its reason, so a
user knows what the simulation is (and is not) made of.
"""

from __future__ import annotations

import gzip
import math
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from elasticd.errors import ElasticError

# 1-based SWF field numbers.
F_ID, F_SUBMIT, F_WAIT, F_RUN, F_ALLOC, F_CPU, F_MEM, F_REQ_PROCS, F_REQ_TIME = 1, 2, 3, 4, 5, 6, 7, 8, 9
F_STATUS = 11

# Requested time when the log has none: 125 % of the run time, as the real-workloads paper.
MISSING_LIMIT_FACTOR = 1.25


class TraceError(ElasticError):
    """A trace that cannot be used at all (unreadable, no capacity, no job)."""

    code = "bad_trace"


@dataclass(frozen=True)
class TraceJob:
    job_id: int
    submit: float  # seconds from the first kept submission
    run: float  # seconds, as logged
    nodes: int
    limit: float  # seconds; never below the run time


@dataclass
class Trace:
    name: str
    nodes: int  # capacity in nodes
    jobs: list[TraceJob]
    dropped: Counter[str] = field(default_factory=Counter)
    adjusted: Counter[str] = field(default_factory=Counter)
    # Line numbers of malformed lines (first few), so they can be looked at.
    bad_lines: list[int] = field(default_factory=list)
    units: str = ""  # how sizes were read (processors per node, and where that came from)

    def report(self) -> str:
        parts = [f"{self.name}: {len(self.jobs)} jobs kept on {self.nodes} nodes" + (f" ({self.units})" if self.units else "")]
        if self.dropped:
            parts.append("dropped " + ", ".join(f"{n} {why}" for why, n in sorted(self.dropped.items())))
        if self.adjusted:
            parts.append("adjusted " + ", ".join(f"{n} {why}" for why, n in sorted(self.adjusted.items())))
        if self.bad_lines:
            parts.append("malformed lines " + ", ".join(map(str, self.bad_lines)) + (" ..." if self.dropped["malformed line"] > len(self.bad_lines) else ""))
        return "; ".join(parts)


def _header_value(line: str, key: str) -> int | None:
    body = line.lstrip(";").strip()
    if body.lower().startswith(key.lower() + ":"):
        try:
            return int(float(body.split(":", 1)[1].split()[0]))
        except (ValueError, IndexError):
            return None
    return None


# More jobs than this share of a trace (and than MAX_WIDE_JOBS) wider than the machine means
# the trace was read in the wrong units (processors taken for nodes, or the wrong machine
# size): an error, not a drop.
MAX_WIDE_SHARE = 0.01
MAX_WIDE_JOBS = 10


def read_swf(path: Path, nodes: int | None = None, cores_per_node: int | None = None, strict: bool = False) -> Trace:
    """Parse `path` (.swf or .swf.gz).

    Units: a job's size is field 5 (allocated processors), else field 8 (requested), in
    processors as the SWF standard says; nodes = ceil(processors / cores per node). Cores per
    node: `cores_per_node` if given, else inferred from the header when it has both MaxNodes
    and MaxProcs (MaxProcs // MaxNodes, rounded down when nodes differ), else 1. Capacity:
    `nodes` if given, else MaxNodes, else MaxProcs / cores per node. What was inferred is said
    in `Trace.units`. Jobs wider than the machine are dropped and counted, unless they are more
    than 1 % of the trace and more than 10: that is a wrong reading and an error naming
    --cores-per-node and --nodes.

    strict: a malformed line is an error naming its line number instead of a counted drop.
    """
    try:
        if path.suffix == ".gz":
            with gzip.open(path, "rt", errors="replace") as f:
                text = f.read()
        else:
            text = path.read_text(errors="replace")
    except (OSError, EOFError) as exc:
        raise TraceError(f"{path}: cannot read: {getattr(exc, 'strerror', None) or exc}") from None
    max_nodes = max_procs = None
    raw: list[tuple[int, list[float]]] = []
    dropped: Counter[str] = Counter()
    bad: list[int] = []
    for lineno, line in enumerate(text.splitlines(), 1):
        s = line.strip()
        if not s:
            continue
        if s.startswith(";"):
            max_nodes = _header_value(s, "MaxNodes") or max_nodes
            max_procs = _header_value(s, "MaxProcs") or max_procs
            continue
        fields = s.split()
        try:
            if len(fields) < 11:
                raise ValueError(f"{len(fields)} fields, 18 expected")
            values = [float(x) for x in fields[:18]]
            if any(math.isnan(v) or math.isinf(v) for v in values):
                raise ValueError("not a finite number")
        except ValueError as exc:
            if strict:
                raise TraceError(f"{path}:{lineno}: malformed SWF line ({exc}): {s[:80]!r}") from None
            dropped["malformed line"] += 1
            if len(bad) < 10:
                bad.append(lineno)
            continue
        raw.append((lineno, values))

    cpn, units = _units(nodes, cores_per_node, max_nodes, max_procs)
    if nodes is None:
        if cores_per_node is not None and max_procs:
            nodes = max_procs // cpn  # the user's reading of the processors
        else:
            nodes = max_nodes if max_nodes else (max_procs // cpn if max_procs else None)
    if not nodes or nodes < 1:
        raise TraceError(f"{path}: no capacity in the header (; MaxNodes: / ; MaxProcs:); give --nodes")

    jobs: list[TraceJob] = []
    adjusted: Counter[str] = Counter()
    widest = 0
    for lineno, v in raw:
        run = v[F_RUN - 1]
        procs = v[F_ALLOC - 1] if v[F_ALLOC - 1] > 0 else v[F_REQ_PROCS - 1]
        submit = v[F_SUBMIT - 1]
        if submit < 0:
            dropped["no submit time"] += 1
            continue
        if run <= 0:
            dropped["zero or unknown run time (cancelled)"] += 1
            continue
        if procs <= 0:
            dropped["unknown size"] += 1
            continue
        n = math.ceil(procs / cpn)
        if n > nodes:
            dropped["wider than the machine"] += 1
            widest = max(widest, int(procs))
            continue
        req = v[F_REQ_TIME - 1]
        if req <= 0:
            limit = run * MISSING_LIMIT_FACTOR
            adjusted["no requested time (limit = 1.25 x run)"] += 1
        elif req < run:
            limit = run
            adjusted["ran past its requested time (limit = run)"] += 1
        else:
            limit = req
        jobs.append(TraceJob(int(v[F_ID - 1]), submit, run, n, limit))
    wide = dropped["wider than the machine"]
    if wide > MAX_WIDE_JOBS and wide > MAX_WIDE_SHARE * (len(jobs) + wide):
        raise TraceError(
            f"{path}: {wide} of {len(jobs) + wide} jobs are wider than the machine read as {nodes} nodes "
            f"({units}; the widest asks for {widest} processors): the units are wrong. Give --cores-per-node C "
            f"(processors per node) or --nodes N (the machine's size)")
    if not jobs:
        raise TraceError(f"{path}: no usable job ({sum(dropped.values())} dropped)")
    jobs.sort(key=lambda j: (j.submit, j.job_id))
    t0 = jobs[0].submit
    jobs = [TraceJob(j.job_id, j.submit - t0, j.run, j.nodes, j.limit) for j in jobs]
    return Trace(path.name.removesuffix(".gz"), nodes, jobs, dropped, adjusted, bad, units)


def _units(nodes: int | None, cores_per_node: int | None, max_nodes: int | None,
           max_procs: int | None) -> tuple[int, str]:
    """(processors per node, one line saying how it was decided)."""
    if cores_per_node is not None:
        if cores_per_node < 1:
            raise TraceError("--cores-per-node must be at least 1")
        return cores_per_node, f"{cores_per_node} processor(s) per node as given"
    if max_nodes and max_procs and max_procs > max_nodes and nodes is None:
        cpn = max_procs // max_nodes
        exact = "" if max_procs % max_nodes == 0 else f" ({max_procs / max_nodes:.1f}, rounded down: nodes differ)"
        return cpn, (f"sizes in processors, {cpn} per node from the header's MaxProcs {max_procs} / "
                     f"MaxNodes {max_nodes}{exact}")
    return 1, "sizes in processors, 1 per node (the header's MaxNodes and MaxProcs agree)" if (
        max_nodes and max_procs == max_nodes) else "sizes read as nodes (1 processor per node)"
