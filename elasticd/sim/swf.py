"""Reading Standard Workload Format logs as real archives ship them.

Real logs contain cancelled jobs (run time 0 or -1), jobs wider than the machine, missing
requested times, -1 everywhere, blank lines and the odd malformed line; some are not sorted
by submit time, repeat a line, split a checkpointed job into partial executions, mix
partitions, or come with Windows line endings, a byte-order mark or a misleading file name.
Every one of these is handled by an explicit rule, every job not kept is counted under its
reason and every reading a user should know of is noted, all in the one line of
`Trace.report()`, so a user knows what the simulation is (and is not) made of.
"""

from __future__ import annotations

import bz2
import gzip
import io
import lzma
import math
import zlib
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from elastic_protocol.timefmt import MAX_TIME_LIMIT
from elasticd.errors import ElasticError

# 1-based SWF field numbers.
F_ID, F_SUBMIT, F_WAIT, F_RUN, F_ALLOC, F_CPU, F_MEM, F_REQ_PROCS, F_REQ_TIME = 1, 2, 3, 4, 5, 6, 7, 8, 9
F_STATUS = 11
F_PARTITION = 16
FIELDS = 18
# Fields 1-9 (all the reader uses) are whole only when at least one more follows them: a line
# cut short (the end of a truncated file) is malformed below this, read (the rest unknown) above.
MIN_FIELDS = 11
# Status of one partial execution of a checkpointed or swapped job (2: to be continued, 3: the
# last, completed, 4: the last, failed); the job as a whole is its line of status 0, 1 or 5.
PARTIAL = (2.0, 3.0, 4.0)
# Seconds a float counts exactly: a submit, run or requested time beyond it is no time a log
# holds (and 1.25 x a run of 1e308 s is infinite).
MAX_SECONDS = 2.0**53
_TIMES = (F_SUBMIT, F_RUN, F_REQ_TIME)
# The fields the reader uses, in the order it keeps them.
_USED = (F_ID, F_SUBMIT, F_RUN, F_ALLOC, F_REQ_PROCS, F_REQ_TIME, F_STATUS, F_PARTITION)

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
    # What the reader saw and kept as it is, each said with its count (out of order, ...).
    notes: list[str] = field(default_factory=list)
    # What is wrong with each line of bad_lines ("line 15: 4 fields, ..."), in the same order.
    bad_problems: list[str] = field(default_factory=list)
    # Set when only the first jobs are simulated (TraceSource.max_jobs): how many the whole
    # log kept. Every count of the report is the whole log's; said so, since "3000 kept,
    # 7174 adjusted" read as a contradiction.
    whole_log_kept: int | None = None

    def report(self) -> str:
        kept = len(self.jobs) if self.whole_log_kept is None else self.whole_log_kept
        parts = [f"{self.name}: " + ("" if self.whole_log_kept is None else "in the whole log, ")
                 + f"{_plural(kept, 'job', 'jobs')} kept on {self.nodes} nodes" + (f" ({self.units})" if self.units else "")]
        if self.dropped:
            parts.append("dropped " + ", ".join(_plural(n, why, _PLURALS.get(why, why))
                                                for why, n in sorted(self.dropped.items())))
        if self.adjusted:
            parts.append("adjusted " + ", ".join(f"{n} {why}" for why, n in sorted(self.adjusted.items())))
        if self.notes:
            parts.append("noted " + ", ".join(self.notes))
        if self.bad_lines:
            parts.append("malformed lines " + ", ".join(map(str, self.bad_lines))
                         + (" ..." if self.dropped["malformed line"] > len(self.bad_lines) else "")
                         + (f" ({'; '.join(self.bad_problems)})" if self.bad_problems else ""))
        if self.whole_log_kept is not None:
            parts.append(f"the first {_plural(len(self.jobs), 'job', 'jobs')} kept are simulated")
        return "; ".join(parts)


# Reasons for a drop that are counted nouns: "2 malformed lines", not "2 malformed line".
_PLURALS = {"malformed line": "malformed lines", "duplicate of an earlier line": "duplicates of an earlier line"}


def _plural(n: int, one: str, many: str) -> str:
    return f"{n} {one if n == 1 else many}"


def _header_value(line: str, key: str) -> int | None:
    body = line.lstrip(";").strip()
    if body.lower().startswith(key.lower() + ":"):
        try:
            return int(float(body.split(":", 1)[1].split()[0]))
        except (ValueError, IndexError, OverflowError):
            return None
    return None


# More jobs than this share of a trace (and than MAX_WIDE_JOBS) wider than the machine means
# the trace was read in the wrong units (processors taken for nodes, or the wrong machine
# size): an error, not a drop.
MAX_WIDE_SHARE = 0.01
MAX_WIDE_JOBS = 10


def _open_text(path: Path) -> io.TextIOWrapper:
    """The file as text, decompressed by what it holds, not by its name (a gzipped log saved
    as .swf, a plain one as .swf.gz); a UTF-8 byte-order mark is skipped."""
    with open(path, "rb") as f:
        magic = f.read(6)
    if magic.startswith(b"\x1f\x9d"):
        raise TraceError(f"{path}: compressed with Unix compress (.Z): uncompress it first (gzip -d reads it)")
    if magic.startswith(b"PK\x03\x04"):
        raise TraceError(f"{path}: a zip archive: unzip it first")
    # Each is closed with the text wrapper, which the caller closes.
    raw: io.BufferedIOBase
    if magic.startswith(b"\x1f\x8b"):
        raw = gzip.open(path, "rb")  # noqa: SIM115
    elif magic.startswith(b"BZh"):
        raw = bz2.open(path, "rb")  # noqa: SIM115
    elif magic.startswith(b"\xfd7zXZ\x00"):
        raw = lzma.open(path, "rb")  # noqa: SIM115
    else:
        raw = open(path, "rb")  # noqa: SIM115
    return io.TextIOWrapper(raw, encoding="utf-8-sig", errors="replace")


def read_swf(path: Path, nodes: int | None = None, cores_per_node: int | None = None, strict: bool = False) -> Trace:
    """Parse `path` (plain, gzip, bzip2 or xz, whatever its name; any line endings).

    Units: a job's size is field 5 (allocated processors), else field 8 (requested), in
    processors as the SWF standard says; nodes = ceil(processors / cores per node). Cores per
    node: `cores_per_node` if given, else inferred from the header when it has both MaxNodes
    and MaxProcs (MaxProcs // MaxNodes, rounded down when nodes differ), else 1; `nodes` does
    not change it. Capacity: `nodes` if given, else MaxProcs / `cores_per_node` when that is
    given, else MaxNodes, else MaxProcs / cores per node. A header value of 0 or less (the
    archive's `MaxNodes: -1`) is unknown: as if absent. What was inferred is said in
    `Trace.units`. Jobs wider than the machine are dropped and counted, unless they are more
    than 1 % of the trace and more than 10: that is a wrong reading and an error naming
    --cores-per-node and --nodes.

    Limits: the requested time (field 9); when it is unknown or 0, 1.25 x the run time; never
    below the run time. One beyond 365 days, a job file's longest, is counted: the simulator
    gives that job no limit, as a job file's UNLIMITED (elasticd.sim.simulator).

    Lines: a job line has 18 fields; one of 11 to 17 is read with the rest unknown (-1), noted;
    fewer, a field that is not a finite number, or a time beyond 2^53 s makes it malformed. An
    exact repeat of an earlier line is dropped (counted). A job number on several different lines is several
    jobs (noted), except partial executions (status 2, 3, 4) of a job that also has its whole
    line (status 0, 1, 5 or -1): those parts are dropped (counted), the whole is the job.
    Submit time -1 is unknown (dropped, counted); other negative submit times are times before
    the log began (kept, noted). Lines out of submit order are sorted (noted). Jobs of several
    partitions (field 16) share the one machine (noted).

    strict: a malformed line is an error naming its line number instead of a counted drop.
    """
    if nodes is not None and nodes < 1:
        raise TraceError("--nodes must be at least 1")
    if cores_per_node is not None and cores_per_node < 1:
        raise TraceError("--cores-per-node must be at least 1")
    header: dict[str, int] = {}
    # Per job line, only the fields used (a log can have a million lines), and its text to
    # find exact repeats.
    raw: list[tuple[float, ...]] = []
    seen: set[str] = set()
    dropped: Counter[str] = Counter()
    bad: list[int] = []
    problems: list[str] = []
    short = long = 0
    lineno = 0
    try:
        with _open_text(path) as f:
            for lineno, line in enumerate(f, 1):
                s = line.strip()
                if not s:
                    continue
                if "\x00" in s and not raw and not header:
                    raise TraceError(f"{path}:{lineno}: not SWF text (binary: UTF-16, or compressed other than by "
                                     "gzip, bzip2 or xz?)")
                if s.startswith(";"):
                    for name in ("MaxNodes", "MaxProcs"):
                        value = _header_value(s, name)
                        if value is not None:
                            header[name] = value
                    continue
                fields = s.split()
                values: list[float] = []
                problem = ""
                if len(fields) < MIN_FIELDS:
                    problem = f"{len(fields)} fields, {MIN_FIELDS} or more needed ({FIELDS} in full)"
                for i, x in enumerate(fields[:FIELDS] if not problem else ()):
                    try:
                        number = float(x)
                    except ValueError:
                        problem = f"field {i + 1} is {x[:20]!r}, not a number"
                        break
                    if not math.isfinite(number):
                        problem = f"field {i + 1} is {x[:20]!r}, not a finite number"
                        break
                    if i + 1 in _TIMES and abs(number) > MAX_SECONDS:
                        problem = f"field {i + 1} is {x[:20]!r}, more seconds than a log can hold"
                        break
                    values.append(number)
                if problem:
                    if strict:
                        raise TraceError(f"{path}:{lineno}: malformed SWF line ({problem}): {s[:80]!r}")
                    dropped["malformed line"] += 1
                    if len(bad) < 10:
                        bad.append(lineno)
                        problems.append(f"line {lineno}: {problem}")
                    continue
                short += len(fields) < FIELDS
                long += len(fields) > FIELDS
                text = " ".join(fields)
                if text in seen:
                    dropped["duplicate of an earlier line"] += 1
                    continue
                seen.add(text)
                values += [-1.0] * (FIELDS - len(values))
                raw.append(tuple(values[i - 1] for i in _USED))
    except (OSError, EOFError, zlib.error, lzma.LZMAError) as exc:
        where = f" after line {lineno}" if lineno else ""
        raise TraceError(f"{path}: cannot read{where}: {getattr(exc, 'strerror', None) or exc}") from None
    del seen

    nodes_given = nodes is not None
    nodes, cpn, units = _machine(path, nodes, cores_per_node, header)
    notes: list[str] = []
    if short:
        notes.append(_plural(short, "line", "lines") + f" of fewer than {FIELDS} fields (the rest read as unknown)")
    if long:
        notes.append(_plural(long, "line", "lines") + f" of more than {FIELDS} fields (the rest ignored)")

    whole = {jid for jid, *_, status, _partition in raw if status not in PARTIAL}
    jobs: list[TraceJob] = []
    adjusted: Counter[str] = Counter()
    widest = 0
    parts = before_zero = out_of_order = 0
    latest = -math.inf
    ids: Counter[int] = Counter()
    partitions: set[float] = set()
    for jid, submit, run, allocated, requested, req, status, partition in raw:
        partial = status in PARTIAL
        if partial and jid in whole:
            dropped["partial execution (status 2-4) of a job kept whole"] += 1
            continue
        procs = allocated if allocated > 0 else requested
        if submit == -1:
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
        if req <= 0:
            limit = run * MISSING_LIMIT_FACTOR
            adjusted["no requested time (limit = 1.25 x run)"] += 1
        elif req < run:
            limit = run
            adjusted["ran past its requested time (limit = run)"] += 1
        else:
            limit = req
        if limit > MAX_TIME_LIMIT:  # 'no limit' is often written 2^31 - 1 s
            adjusted["limit beyond 365 days (simulated without one)"] += 1
        job_id = int(jid)
        jobs.append(TraceJob(job_id, submit, run, n, limit))
        parts += partial
        if not partial:
            ids[job_id] += 1
        before_zero += submit < 0
        out_of_order += submit < latest
        latest = max(latest, submit)
        if partition > 0:
            partitions.add(partition)
    wide = dropped["wider than the machine"]
    if wide > MAX_WIDE_JOBS and wide > MAX_WIDE_SHARE * (len(jobs) + wide) and nodes_given:
        raise TraceError(
            f"{path}: {wide} of {len(jobs) + wide} jobs are wider than the {nodes} nodes of --nodes ({units}; the "
            f"widest asks for {widest} processors): give --nodes N of the machine's size, or --cores-per-node C if "
            "sizes count processors of several per node")
    if wide > MAX_WIDE_JOBS and wide > MAX_WIDE_SHARE * (len(jobs) + wide):
        raise TraceError(
            f"{path}: {wide} of {len(jobs) + wide} jobs are wider than the machine read as {nodes} nodes "
            f"({units}; the widest asks for {widest} processors): the units are wrong. Give --cores-per-node C "
            f"(processors per node) or --nodes N (the machine's size)")
    if not jobs:
        why = ", ".join(f"{n} {w}" for w, n in sorted(dropped.items())) or "no job line"
        raise TraceError(f"{path}: no usable job ({why})" + (f"; {problems[0]}" if problems else ""))
    if parts:
        notes.append(_plural(parts, "partial execution", "partial executions")
                     + " (status 2-4) without their job's whole line (each simulated as a job)")
    repeated = sum(1 for c in ids.values() if c > 1)
    if repeated:
        notes.append(_plural(repeated, "job number", "job numbers") + " on more than one line (each line a job)")
    if out_of_order:
        notes.append(_plural(out_of_order, "line", "lines") + " out of submit order (sorted)")
    if before_zero:
        notes.append(f"{before_zero} submitted before time 0 (kept: times count from the first submission)")
    if len(partitions) > 1:
        notes.append(f"{len(partitions)} partitions (field 16) simulated as one machine of {nodes} nodes")
    jobs.sort(key=lambda j: (j.submit, j.job_id))
    t0 = jobs[0].submit
    jobs = [TraceJob(j.job_id, j.submit - t0, j.run, j.nodes, j.limit) for j in jobs]
    name = path.name
    for suffix in (".gz", ".bz2", ".xz"):
        name = name.removesuffix(suffix)
    return Trace(name, nodes, jobs, dropped, adjusted, bad, units, notes, problems)


def _machine(path: Path, nodes: int | None, cores_per_node: int | None,
             header: dict[str, int]) -> tuple[int, int, str]:
    """(capacity in nodes, processors per node, one line saying how both were decided)."""
    unknown = [f"{k} {v}" for k, v in header.items() if v <= 0]
    max_nodes = header["MaxNodes"] if header.get("MaxNodes", 0) > 0 else None
    max_procs = header["MaxProcs"] if header.get("MaxProcs", 0) > 0 else None
    if cores_per_node is not None:
        cpn = cores_per_node
        units = f"{cpn} processor(s) per node as given"
        if nodes is None and max_procs:
            nodes = max_procs // cpn  # the user's reading of the processors
            if nodes < 1:
                raise TraceError(f"{path}: --cores-per-node {cpn} is more than the header's MaxProcs {max_procs}")
            units += f"; {nodes} nodes = the header's MaxProcs {max_procs} / {cpn}" + (
                f" (its MaxNodes says {max_nodes})" if max_nodes and max_nodes != nodes else "")
    elif max_nodes and max_procs and max_procs > max_nodes:
        cpn = max_procs // max_nodes
        exact = "" if max_procs % max_nodes == 0 else f" ({max_procs / max_nodes:.1f}, rounded down: nodes differ)"
        units = (f"sizes in processors, {cpn} per node from the header's MaxProcs {max_procs} / "
                 f"MaxNodes {max_nodes}{exact}")
    else:
        cpn = 1
        if max_nodes and max_procs == max_nodes:
            units = "sizes in processors, 1 per node (the header's MaxNodes and MaxProcs agree)"
        elif max_nodes and max_procs:
            units = f"sizes read as nodes (the header's MaxProcs {max_procs} is below its MaxNodes {max_nodes})"
        elif max_procs:
            units = "sizes in processors, 1 per node (the header has MaxProcs only)"
        elif max_nodes:
            units = "sizes read as nodes (the header has MaxNodes only)"
        else:
            units = "sizes read as nodes (1 processor per node)"
    if unknown:
        units += f"; the header's {' and '.join(unknown)} (unknown) ignored"
    if nodes is None:
        nodes = max_nodes or (max_procs // cpn if max_procs else None)
    if not nodes:
        has = "; it has " + ", ".join(f"{k}: {v}" for k, v in header.items()) if header else ""
        raise TraceError(f"{path}: no capacity in the header (neither '; MaxNodes:' nor '; MaxProcs:' gives a size{has}): "
                         "give --nodes N (the machine's nodes) and, if field 5 counts processors of several per node, "
                         "--cores-per-node C")
    return nodes, cpn, units
