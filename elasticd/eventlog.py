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
then late, the state is not at risk.
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
        self._seq = 0

    def start(self, header: dict[str, Any]) -> None:
        """Open a new segment (written with the next flush)."""
        self._buffer.append(_line({"type": "start", "format": FORMAT, **header}))

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
        return len(self._buffer)

    def flush(self) -> None:
        """Write what is buffered; on failure raise and keep it for the next try."""
        if not self._buffer:
            return
        data = "".join(self._buffer).encode()
        try:
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
            try:
                view = memoryview(data)
                while view:
                    n = os.write(fd, view)
                    view = view[n:]
            finally:
                os.close(fd)
        except OSError as exc:
            raise EventLogError(f"{self.path}: cannot append to the event log: {exc.strerror or exc}") from None
        self._buffer.clear()


def _line(record: dict[str, Any]) -> str:
    return json.dumps(record, separators=(",", ":")) + "\n"


def read_log(path: Path) -> list[Segment]:
    """Every segment of a log. A last line cut short (the daemon was killed mid-write) is
    dropped; any other unreadable line is an error naming it."""
    if path.is_dir():
        path = path / LOG_FILE
    try:
        text = path.read_text()
    except OSError as exc:
        raise EventLogError(f"{path}: cannot read the event log: {exc.strerror or exc}") from None
    segments: list[Segment] = []
    lines = text.split("\n")
    for lineno, raw in _numbered(lines):
        try:
            record = json.loads(raw)
        except json.JSONDecodeError as exc:
            if lineno == len(lines) and not text.endswith("\n"):
                break  # cut short by a kill: it was never acknowledged history
            raise EventLogError(f"{path}:{lineno}: not a JSON record: {exc.msg}") from None
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
