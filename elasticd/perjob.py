"""The per-job file: one gzipped CSV per run, a row per job, from which every table and plot
of the run is computed (docs/per-job-files.md documents each column).

Why this format: any reader opens it without our code (`zcat`, Python's csv and gzip,
pandas.read_csv, R's read.csv), its header names the columns, and it is small (a 2,000-job
run is 28-128 KiB, a 77K-job one 1.7 MiB). It is written byte for byte the same for the same run (gzip without a
time stamp or a file name), so runs made on one worker or on many compare equal.

Numbers are written to the millisecond, and a run's summary is computed from the rows as
written (`rounded`): read back, a file gives that summary exactly.
"""

from __future__ import annotations

import contextlib
import csv
import gzip
import io
import os
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path

from elasticd.errors import ElasticError
from elasticd.metrics import JobRow

COLUMNS = (
    "job_id", "kind", "state", "submit", "start", "end", "static_run", "limit", "min_nodes", "preferred_nodes",
    "max_nodes", "logged_nodes", "start_nodes", "final_nodes", "shrinks", "expands", "reconfig_seconds",
    "reconfig_node_seconds", "size_changes", "machine_nodes", "window_start", "window_end",
)
SUFFIX = ".csv.gz"
DECIMALS = 3


class PerJobFileError(ElasticError):
    """A per-job file that cannot be written or read as one."""

    code = "bad_per_job_file"


@dataclass(frozen=True)
class RunFile:
    """A per-job file's content: its jobs and the run's machine and measurement window
    (the same on every row)."""

    rows: list[JobRow]
    machine_nodes: int
    window: tuple[float, float]


def _r(x: float) -> float:
    return round(x, DECIMALS) + 0.0  # + 0.0: no "-0"


def rounded(row: JobRow) -> JobRow:
    """The row as its file holds it (times and seconds to the millisecond)."""
    def opt(x: float | None) -> float | None:
        return None if x is None else _r(x)

    return replace(row, submit=_r(row.submit), start=opt(row.start), end=opt(row.end), static_run=opt(row.static_run),
                   limit=opt(row.limit), reconfig_seconds=_r(row.reconfig_seconds),
                   reconfig_node_seconds=_r(row.reconfig_node_seconds),
                   size_changes=tuple((_r(t), n) for t, n in row.size_changes))


def _num(x: float | None) -> str:
    """The shortest text that reads back as the same float; whole numbers without '.0'."""
    if x is None:
        return ""
    return repr(x).removesuffix(".0")


def encode(run: RunFile) -> bytes:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(COLUMNS)
    w0, w1 = _num(run.window[0]), _num(run.window[1])
    for r in run.rows:
        w.writerow((r.job_id, r.kind, r.state, _num(r.submit), _num(r.start), _num(r.end), _num(r.static_run),
                    _num(r.limit), r.min_nodes, r.preferred_nodes, r.max_nodes, r.logged_nodes, r.start_nodes,
                    r.final_nodes, r.shrinks, r.expands, _num(r.reconfig_seconds), _num(r.reconfig_node_seconds),
                    " ".join(f"{_num(t)}:{n}" for t, n in r.size_changes), run.machine_nodes, w0, w1))
    # No time stamp, no file name: the same run gives the same bytes.
    return gzip.compress(buf.getvalue().encode(), compresslevel=9, mtime=0)


def write(path: Path, run: RunFile) -> int:
    """Write it whole or not at all (a temporary file renamed over it); its size in bytes.
    A failed write is an error naming the file."""
    data = encode(run)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_bytes(data)
        tmp.replace(path)
    except OSError as exc:
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)
        raise PerJobFileError(f"{path}: cannot write the per-job file: {exc.strerror or exc}") from None
    return len(data)


def _opt(text: str) -> float | None:
    return float(text) if text else None


def stream(path: Path) -> Iterator[tuple[JobRow, int, tuple[float, float]]]:
    """Each row of the file with the run's machine size and window, read as it is needed."""
    for no, f in enumerate(stream_fields(path), 2):
        try:
            yield parse(f)
        except (ValueError, IndexError) as exc:
            raise PerJobFileError(f"{path}: line {no}: {exc}") from None


# The columns a figure of busy nodes needs, by index.
_SUBMIT, _START, _END, _START_NODES, _CHANGES = (COLUMNS.index(c) for c in
                                                 ("submit", "start", "end", "start_nodes", "size_changes"))


def stream_fields(path: Path) -> Iterator[list[str]]:
    """The file's rows as their text fields, unparsed (COLUMNS' order): a figure of a long run
    reads every job's timeline but makes a row (stream) only of the few it draws."""
    try:
        with gzip.open(path, "rt", newline="") as text:
            lines = csv.reader(text)
            head = next(lines, None)
            if head is None or tuple(head) != COLUMNS:
                raise PerJobFileError(f"{path}: line 1: not the per-job file's header (docs/per-job-files.md)")
            yield from lines
    except (OSError, EOFError, UnicodeDecodeError, csv.Error) as exc:
        raise PerJobFileError(f"{path}: not a readable per-job file ({exc})") from None


def parse(f: list[str]) -> tuple[JobRow, int, tuple[float, float]]:
    """A row's fields (stream_fields) as a row, the machine's size and the window."""
    changes = tuple((float(t), int(n)) for t, n in (p.split(":") for p in f[18].split())) if f[18] else ()
    row = JobRow(int(f[0]), f[1], f[2], float(f[3]), _opt(f[4]), _opt(f[5]), _opt(f[6]), _opt(f[7]), int(f[8]),
                 int(f[9]), int(f[10]), int(f[11]), int(f[12]), int(f[13]), int(f[14]), int(f[15]), float(f[16]),
                 float(f[17]), changes)
    return row, int(f[19]), (float(f[20]), float(f[21]))


def timeline_of(f: list[str]) -> tuple[float, float, float, list[tuple[float, int]]] | None:
    """(submit, start, end, [(time, nodes) from its start, the last at 0]) of a row's fields;
    None for a job that never started."""
    if not f[_START] or not f[_END]:
        return None
    start, end = float(f[_START]), float(f[_END])
    points = [(start, int(f[_START_NODES]))]
    if f[_CHANGES]:
        for p in f[_CHANGES].split():
            t, n = p.split(":")
            points.append((float(t), int(n)))
    points.append((end, 0))
    return float(f[_SUBMIT]), start, end, points


def read(path: Path) -> RunFile:
    rows: list[JobRow] = []
    machine, window = 0, (0.0, 0.0)
    for row, machine, window in stream(path):
        rows.append(row)
    return RunFile(rows, machine, window)
