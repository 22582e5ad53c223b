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

    def report(self) -> str:
        parts = [f"{self.name}: {len(self.jobs)} jobs kept on {self.nodes} nodes"]
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


def read_swf(path: Path, nodes: int | None = None, cores_per_node: int = 1, strict: bool = False) -> Trace:
    """Parse `path`. Capacity: `nodes`, else the header's MaxNodes (or MaxProcs divided by
    `cores_per_node`). Sizes: allocated processors (else requested) / cores_per_node, up.

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
    if nodes is None:
        if max_nodes and cores_per_node == 1:
            nodes = max_nodes
        elif max_procs:
            nodes = max_procs // cores_per_node
        elif max_nodes:
            nodes = max_nodes
    if not nodes or nodes < 1:
        raise TraceError(f"{path}: no capacity in the header (; MaxNodes: / ; MaxProcs:); give --nodes")

    jobs: list[TraceJob] = []
    adjusted: Counter[str] = Counter()
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
        n = math.ceil(procs / cores_per_node)
        if n > nodes:
            dropped["wider than the machine"] += 1
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
    if not jobs:
        raise TraceError(f"{path}: no usable job ({sum(dropped.values())} dropped)")
    jobs.sort(key=lambda j: (j.submit, j.job_id))
    t0 = jobs[0].submit
    jobs = [TraceJob(j.job_id, j.submit - t0, j.run, j.nodes, j.limit) for j in jobs]
    return Trace(path.name.removesuffix(".gz"), nodes, jobs, dropped, adjusted, bad)
