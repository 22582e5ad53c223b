"""The per-job file: one gzipped CSV per run, a row per job, from which every table and plot
of the run is computed (docs/per-job-files.md documents each column).

Why this format: any reader opens it without our code (`zcat`, Python's csv and gzip,
pandas.read_csv, R's read.csv), its header names the columns, and it is small (a 3,000-job
run is 45-90 KiB). It is written byte for byte the same for the same run (gzip without a
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


def read(path: Path) -> RunFile:
    try:
        text = gzip.decompress(path.read_bytes()).decode()
    except (OSError, EOFError, UnicodeDecodeError) as exc:
        raise PerJobFileError(f"{path}: not a readable per-job file ({exc})") from None
    lines = csv.reader(io.StringIO(text))
    head = next(lines, None)
    if head is None or tuple(head) != COLUMNS:
        raise PerJobFileError(f"{path}: line 1: not the per-job file's header (docs/per-job-files.md)")
    rows: list[JobRow] = []
    machine, window = 0, (0.0, 0.0)
    for no, f in enumerate(lines, 2):
        try:
            changes = tuple((float(t), int(n)) for t, n in (p.split(":") for p in f[18].split())) if f[18] else ()
            rows.append(JobRow(int(f[0]), f[1], f[2], float(f[3]), _opt(f[4]), _opt(f[5]), _opt(f[6]), _opt(f[7]),
                               int(f[8]), int(f[9]), int(f[10]), int(f[11]), int(f[12]), int(f[13]), int(f[14]),
                               int(f[15]), float(f[16]), float(f[17]), changes))
            machine, window = int(f[19]), (float(f[20]), float(f[21]))
        except (ValueError, IndexError) as exc:
            raise PerJobFileError(f"{path}: line {no}: {exc}") from None
    return RunFile(rows, machine, window)
