"""The event log: every event a daemon fed its core, with the actions that came out.

Why a log beside the journal: the journal is the durable *state* (what recovery needs, and
it is removed by a clean stop); the log is the *history* — append-only, kept across stops —
from which a real run is replayed decision for decision (`elasticd replay`), re-run under
another policy (`elasticd sim --from-log`) and accounted for (`eacct`).

Format: JSON lines in `events.jsonl` in the state directory (0600), one daemon start per
segment. A segment begins with a `start` record (the cluster's nodes, the policy and its
effective parameters, the core's settings, the next job and order ids, and whether the
daemon recovered jobs from its journal); each following line is one event:

    {"seq": 17, "event": {"type": "Submitted", "cause": "user", "time": ..., ...},
     "actions": [{"type": "Launch", "job_id": 3, "hosts": ["node1"]}, ...]}

When it is written: lines are buffered as events happen and written (one write) right after
the journal commits them, so the log never holds an event whose state change was not
committed. A log write that fails is retried at the next commit and reported; the history is
then late, the state is not at risk. A write the disk cut short part-way (ENOSPC) is finished,
not repeated, at the next try: the line it began is completed, never written twice.

`seq` numbers the records of a state directory on across daemon starts (a start goes on from
the journal's `log_seq`, which each commit sets to the last record it covers): the journal
and the log can then be compared (elasticd.daemon.statecheck: a journal set back to an older
state is refused, not started). Logs written before this numbered each segment from 1; a
start goes on above the last number in the file, so numbers only grow from there on.

A line cut short: a daemon killed (or a machine losing power) during a write leaves the
file ending in part of a line. The next start ends that line first (a lone "\n"; the file
is only ever appended to, and the bytes are kept for whoever looks), so its own segment
starts on a line of its own, and readers drop the cut line as what it is: history that was
committed to the journal but never fully written here. Only a line that can be nothing else
is dropped: the file's last line when the file does not end it, or one that begins as a
record or a header does, is not JSON, and is followed by a segment's header (the one the
next start wrote; a cut line anywhere else is not what a crash leaves). A start
of an earlier version wrote its header on the same line, straight after the cut part: such a
line, a cut-short beginning followed by a whole header, is read as the two. Any other
unreadable line is damage, and an error naming it.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from elasticd.core.actions import Action
from elasticd.core.codec import action_to_dict, event_to_dict
from elasticd.core.events import Event
from elasticd.errors import ElasticError
from elasticd.statedir import move_aside

LOG_FILE = "events.jsonl"
FORMAT = 1


class EventLogError(ElasticError):
    """An event log that cannot be written or read (names the file and the line)."""

    code = "event_log"


@dataclass
class Segment:
    """One daemon start: its settings and the records that followed."""

    header: dict[str, Any]
    records: list[dict[str, Any]] = field(default_factory=list)
    line: int = 0  # where the header is, for messages


class EventLogWriter:
    def __init__(self, state_dir: Path) -> None:
        self.path = state_dir / LOG_FILE
        self._buffer: list[str] = []
        self._rest = b""  # the part of a write the disk refused (its start is in the file)
        self._tail_checked = False  # whether the file's last line was seen to be whole
        self._seq = 0
        self._header: dict[str, Any] | None = None  # this start's segment header
        self._file: tuple[int, int] | None = None  # the file written last (device, inode)
        # Set when the file was found removed or replaced (what was done, for the daemon's
        # log and `elasticd status`); cleared by whoever reports it.
        self.lost: str | None = None

    def resume(self, journal_seq: int) -> None:
        """Number records on from the journal's `log_seq`, or from the file's last number
        when that is higher (a log written before records were numbered on, or a start
        after a salvage): the numbers never go down in a file."""
        self._seq = max(journal_seq, last_seq(self.path))

    @property
    def seq(self) -> int:
        """The number of the last record buffered: what a commit covers."""
        return self._seq

    def start(self, header: dict[str, Any]) -> None:
        """Open a new segment (written with the next flush)."""
        self._header = {"type": "start", "format": FORMAT, **header}
        self._buffer.append(_line(self._header))

    def add(self, event: Event, actions: list[Action]) -> None:
        self._seq += 1
        self._buffer.append(_line({"seq": self._seq, "event": event_to_dict(event),
                                   "actions": [action_to_dict(a) for a in actions]}))

    def withdraw(self) -> None:
        """Drop the record `add` just buffered (not yet written): its decision was rolled
        back, so it never happened."""
        self._buffer.pop()
        self._seq -= 1

    @property
    def pending(self) -> int:
        """Records not yet written whole."""
        return len(self._buffer) + self._rest.count(b"\n")

    def flush(self) -> None:
        """Write what is buffered; on failure raise and keep what was not written for the
        next try (the rest of a line the disk cut short included: finished, not repeated)."""
        if not self._buffer and not self._rest:
            return
        cut = bool(self._rest)
        data = self._rest + "".join(self._buffer).encode()
        self._rest = b""
        self._buffer.clear()
        view = memoryview(data)
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o600)
            try:
                st = os.fstat(fd)
                if self._file is not None and (st.st_dev, st.st_ino) != self._file:
                    fd, data = self._begin_again(fd, st.st_size, data, cut)
                    view = memoryview(data)
                if not self._tail_checked:
                    size = os.fstat(fd).st_size
                    if size and os.pread(fd, 1, size - 1) != b"\n":
                        # A line cut short by the last daemon's end: ended here, so that this
                        # start's records begin a line (see the module's docstring).
                        data = b"\n" + data
                        view = memoryview(data)
                    self._tail_checked = True
                while view:
                    n = os.write(fd, view)
                    view = view[n:]
                st = os.fstat(fd)
                self._file = (st.st_dev, st.st_ino)
            finally:
                os.close(fd)
        except OSError as exc:
            self._rest = bytes(view)
            raise EventLogError(f"{self.path}: cannot append to the event log: {exc.strerror or exc}") from None

    def _begin_again(self, fd: int, size: int, data: bytes, cut: bool) -> tuple[int, bytes]:
        """The file at the path is not the one written before: that one was removed (by hand,
        a cleanup, the state directory removed or moved away) or replaced while the daemon
        ran. Appending records there as they come made a file of events without a segment
        header, which no reader takes (`eacct`: an event before any start record), even
        after a restart; or, added to another file, a history that is not this run's. A new
        file is begun instead, with a header that says the history before it is lost (replay
        and eacct name that), and a file found in its place is moved aside as
        events.jsonl.replaced-TIME. Returns the descriptor to write and what to write."""
        assert self._header is not None
        what = "removed"
        if size:
            aside = move_aside([self.path], "replaced")[0]
            new = os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o600)
            os.close(fd)
            fd = new
            what = f"replaced (kept as {aside})"
        # The new file from now on: a write it cuts short is finished there, not begun again.
        st = os.fstat(fd)
        self._file = (st.st_dev, st.st_ino)
        if cut and b"\n" in data:
            data = data[data.index(b"\n") + 1:]  # the end of a line begun in the file that is gone
        self._tail_checked = True
        first = self._seq - data.count(b"\n") + 1  # the first record written to the new file
        self.lost = (f"the event log {self.path} was {what} while the daemon ran: the history before record "
                     f"{first} is lost; a new one was begun")
        header = {**self._header, "recovered": True, "history_lost": self.lost}
        return fd, _line(header).encode() + data


def _line(record: dict[str, Any]) -> str:
    return json.dumps(record, separators=(",", ":")) + "\n"


_HEADER_START = '{"type":"start","format":'
_RECORD_START = '{"seq":'


def _cut_short(raw: str) -> bool:
    """Whether a line that is not JSON begins as the writer's lines do: a record or a
    header cut short, not a line of something else."""
    return any(raw.startswith(p) or p.startswith(raw) for p in (_HEADER_START, _RECORD_START))


def _glued_header(raw: str) -> int:
    """Where a whole header starts in a line that began as a cut-short line (a start before
    the writer ended such lines wrote its header straight after); -1 if it does not."""
    at = raw.find(_HEADER_START, 1)
    if at < 0 or not _cut_short(raw[:at]):
        return -1
    try:
        header = json.loads(raw[at:])
    except json.JSONDecodeError:
        return -1
    return at if isinstance(header, dict) and header.get("type") == "start" else -1


def read_log(path: Path) -> list[Segment]:
    """Every segment of a log. A line cut short (the daemon was killed mid-write) is
    dropped: the last line, or one followed by the next start's header (see the module's
    docstring); any other unreadable line is an error naming it."""
    if path.is_dir():
        path = path / LOG_FILE
    try:
        text = path.read_text()
    except OSError as exc:
        raise EventLogError(f"{path}: cannot read the event log: {exc.strerror or exc}") from None
    segments: list[Segment] = []
    lines = text.split("\n")
    numbered = list(_numbered(lines))
    for k, (lineno, raw) in enumerate(numbered):
        try:
            record = json.loads(raw)
        except json.JSONDecodeError as exc:
            if lineno == len(lines) and not text.endswith("\n"):
                break  # cut short by a kill: it was never acknowledged history
            if _cut_short(raw) and k + 1 < len(numbered) and numbered[k + 1][1].startswith(_HEADER_START):
                continue  # cut short by a kill, ended by the next start (its header follows)
            at = _glued_header(raw)
            if at < 0:
                raise EventLogError(f"{path}:{lineno}: not a JSON record: {exc.msg}") from None
            record = json.loads(raw[at:])  # a start's header written after a cut-short line
        if not isinstance(record, dict):
            raise EventLogError(f"{path}:{lineno}: not a JSON object")
        if record.get("type") == "start":
            if record.get("format") != FORMAT:
                raise EventLogError(f"{path}:{lineno}: event log format {record.get('format')!r}, "
                                    f"this version reads {FORMAT}")
            segments.append(Segment(record, line=lineno))
        elif not segments:
            raise EventLogError(f"{path}:{lineno}: an event before any start record")
        else:
            record["line"] = lineno
            segments[-1].records.append(record)
    return segments


def _numbered(lines: list[str]) -> Iterator[tuple[int, str]]:
    for i, raw in enumerate(lines, 1):
        if raw.strip():
            yield i, raw


def _lines_backward(path: Path, chunk: int = 1 << 16) -> Iterator[bytes]:
    """The file's lines, last first, read from the end only as far as the caller goes."""
    try:
        f = path.open("rb")
    except OSError:
        return
    with f:
        pos = f.seek(0, os.SEEK_END)
        rest = b""
        while pos > 0:
            step = min(chunk, pos)
            pos -= step
            f.seek(pos)
            parts = (f.read(step) + rest).split(b"\n")
            rest = parts[0]
            for raw in reversed(parts[1:]):
                if raw.strip():
                    yield raw
        if rest.strip():
            yield rest


def records_from_end(path: Path) -> Iterator[dict[str, Any]]:
    """The log's numbered records, last first (headers and lines that are not records
    skipped: a cut-short line is no record, and damage is not what this reads for)."""
    for raw in _lines_backward(path):
        try:
            record = json.loads(raw)
        except ValueError:
            continue
        if isinstance(record, dict) and isinstance(record.get("seq"), int) and record.get("type") != "start":
            yield record


def last_seq(path: Path) -> int:
    """The number of the log's last record; 0 when it has none."""
    return next((int(r["seq"]) for r in records_from_end(path)), 0)
