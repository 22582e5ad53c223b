"""A state directory is never started fresh by accident, and what a damaged one held is
salvaged, not dropped.

Why: a daemon that finds no journal starts with an empty queue and gives out job ids from 1
again. If the directory once held jobs (its event log, its jobs/ folders say so), that is
data loss — acknowledged jobs forgotten, the old jobs' processes running untracked, a new job
overwriting an old one's output. So `elasticd start` refuses such a directory, says what is
wrong, and `elasticd start --salvage` recovers every record that can still be read: rows of
the damaged journal, else the jobs the event log rebuilds, and ids above everything ever
given out (elasticd.daemon.salvage). Room on the disk is elasticd.daemon.room's: a full disk
is refused before anything is read, and is never taken for damage.
"""

from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from elasticd.daemon.journal import JOURNAL_FILE, LOG_SEQ
from elasticd.daemon.room import StateDirFull, check_room, free_bytes, full_message, is_full_error
from elasticd.errors import JournalError
from elasticd.eventlog import LOG_FILE, records_from_end


class DamagedState(JournalError):
    """A state directory that held jobs but whose journal is missing, empty or unreadable."""

    code = "damaged_state"


def _had_jobs(state_dir: Path) -> str | None:
    """Evidence that jobs were here, in words, or None."""
    log = state_dir / LOG_FILE
    if log.exists() and log.stat().st_size > 0:
        return f"its event log {log.name} records a run"
    jobs = state_dir / "jobs"
    if jobs.is_dir():
        ids = [p.name for p in jobs.iterdir() if p.name.isdigit()]
        if ids:
            return f"jobs/ holds the folders of {len(ids)} job(s)"
    return None


@dataclass
class LogAhead:
    """What the event log records that the journal does not reflect."""

    events: int = 0
    seqs: tuple[int, int] = (0, 0)  # the first and last such record's number (0: not numbered on)
    journal_seq: int | None = None  # the journal's log_seq (None: written before it was kept)
    next_job_id: int = 1  # the journal's
    submitted: set[int] = field(default_factory=set)  # ids the journal would give out again
    touched: dict[int, set[str]] = field(default_factory=dict)  # other jobs: their event types

    @property
    def jobs(self) -> set[int]:
        """Every job the log knows better than the journal."""
        return self.submitted | set(self.touched)

    def words(self) -> str:
        if self.journal_seq is None:
            head = f"job(s) {_ids(self.submitted)} submitted"
        else:
            head = (f"{self.events} event(s) its journal does not reflect (numbers {self.seqs[0]}-{self.seqs[1]}; "
                    f"the journal's last is {self.journal_seq})")
            parts = ([f"job(s) {_ids(self.submitted)} submitted"] if self.submitted else []) + \
                [f"job {jid}: {', '.join(sorted(kinds))}" for jid, kinds in sorted(self.touched.items())]
            head += (": " + "; ".join(parts[:10]) + (" ..." if len(parts) > 10 else "")) if parts else ""
        given = f", while the journal would give out ids from {self.next_job_id} again" if self.submitted else ""
        return f"its event log {LOG_FILE} records {head}{given}"


def _ids(ids: set[int]) -> str:
    """1-3, 7: ids in runs."""
    runs: list[list[int]] = []
    for i in sorted(ids):
        if runs and runs[-1][1] == i - 1:
            runs[-1][1] = i
        else:
            runs.append([i, i])
    return ", ".join(f"{a}-{b}" if b > a else str(a) for a, b in runs)


def log_ahead(state_dir: Path, meta: dict[str, str], max_row: int) -> LogAhead | None:
    """What the event log holds beyond the journal, or None when the journal is as new.

    Why this is a sound test of a journal set back to an older state (its WAL cut short or
    overwritten, an older copy put in place), and why it cannot refuse a crash's restart:
    the daemon numbers log records on across starts and writes a batch of them only after
    the journal commit that covers them has succeeded, and each commit stores the number of
    the last record it covers (`log_seq`, elasticd.daemon.persistence). So the
    log may lag the journal: killed between the commit and the log's write, or with the
    log's write failing on a full disk (retried at the next commit, the part a full disk
    cut short finished then), the journal covers records the log never got; those are
    history lost, not state. The log can never lead it: no record is written before a
    commit with a number at least as high succeeded, and a commit that failed wrote neither
    (its records are kept, unwritten, for the next commit to cover). A log record numbered
    above the journal's `log_seq` is therefore an event the journal once covered and no
    longer does: whatever state it changed (a submission, a start, an end) the journal
    has lost, and starting on it would give out ids again, start again what was started and
    forget what ended. The one other way: a machine that lost power (the journal is synced
    at checkpoints only, see elasticd.daemon.journal) may keep the log's page and lose the
    journal's: the journal is older than what was acknowledged then too.

    A journal written before `log_seq` was kept (or rebuilt without it) is held to the
    part of this it can be: no job id the log saw submitted, nor below a start's next id,
    may be one the journal would give out again. That reads the whole log, once: the
    first start's first commit stores `log_seq`."""
    log = state_dir / LOG_FILE
    next_job_id = int(meta.get("next_job_id", str(max_row + 1)))
    out = LogAhead(next_job_id=next_job_id)
    if LOG_SEQ in meta:
        out.journal_seq = int(meta[LOG_SEQ])
        for rec in records_from_end(log):
            if rec["seq"] <= out.journal_seq:
                break
            out.events += 1
            out.seqs = (rec["seq"], out.seqs[1] or rec["seq"])
            raw_event = rec.get("event")
            event: dict[str, Any] = raw_event if isinstance(raw_event, dict) else {}
            kind = str(event.get("type"))
            jids = {event.get("job_id")} | {a.get("job_id") for a in rec.get("actions") or [] if isinstance(a, dict)}
            for jid in jids:
                if not isinstance(jid, int):
                    continue
                if kind == "Submitted" and jid == event.get("job_id"):
                    out.submitted.add(jid)
                else:
                    out.touched.setdefault(jid, set()).add(kind)
        for jid in out.submitted:
            out.touched.pop(jid, None)
        return out if out.events else None
    given = _ids_given(log)
    out.submitted = {jid for jid in given if jid >= next_job_id}
    return out if out.submitted else None


def _ids_given(log: Path) -> set[int]:
    """Every job id the log records as given out: its submissions, and the ids below each
    start's next one."""
    ids: set[int] = set()
    try:
        f = log.open("rb")
    except OSError:
        return ids
    with f:
        for raw in f:
            if b'"Submitted"' not in raw and not raw.startswith(b'{"type":"start"'):
                continue
            try:
                rec = json.loads(raw)
            except ValueError:
                continue
            if not isinstance(rec, dict):
                continue
            if rec.get("type") == "start" and isinstance(rec.get("next_job_id"), int):
                ids.update(range(1, rec["next_job_id"]))
            event = rec.get("event")
            if isinstance(event, dict) and event.get("type") == "Submitted" and isinstance(event.get("job_id"), int):
                ids.add(event["job_id"])
    return ids


def check(state_dir: Path) -> None:
    """Raise DamagedState when the journal cannot be trusted but jobs were here; StateDirFull
    first when the disk is full: reading a WAL journal needs room for its index, and what
    fails for want of room is not damage."""
    check_room(state_dir)
    journal = state_dir / JOURNAL_FILE
    evidence = _had_jobs(state_dir)
    if evidence is None:
        return
    how = " Start with `elasticd start --salvage` to recover every record that can be read (the damaged " \
          "journal is kept beside as journal.db.damaged-TIME), or move the directory away to start afresh."
    if not journal.exists():
        raise DamagedState(f"{state_dir}: {evidence}, but its journal {JOURNAL_FILE} is missing.{how}")
    if journal.stat().st_size == 0:
        raise DamagedState(f"{state_dir}: {evidence}, but its journal {JOURNAL_FILE} is empty.{how}")
    try:
        db = sqlite3.connect(f"file:{journal}?mode=ro", uri=True)
        try:
            ok = db.execute("PRAGMA quick_check").fetchone()
            tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
            meta = dict(db.execute("SELECT key, value FROM meta")) if "meta" in tables else {}
            max_row = int(db.execute("SELECT max(job_id) FROM jobs").fetchone()[0] or 0) if "jobs" in tables else 0
        finally:
            db.close()
    except sqlite3.Error as exc:
        if is_full_error(exc):
            raise StateDirFull(full_message(state_dir, free_bytes(state_dir), f" (reading {JOURNAL_FILE}: {exc})")) \
                from None
        raise DamagedState(f"{state_dir}: {evidence}, but its journal {JOURNAL_FILE} is unreadable ({exc}).{how}") from None
    if ok is None or ok[0] != "ok":
        raise DamagedState(f"{state_dir}: its journal {JOURNAL_FILE} is damaged ({ok[0] if ok else 'no answer'}).{how}")
    if "jobs" not in tables or "next_job_id" not in meta and not _rows(journal):
        raise DamagedState(f"{state_dir}: {evidence}, but its journal {JOURNAL_FILE} holds no job and no job "
                           f"count (it was replaced or reset).{how}")
    ahead = log_ahead(state_dir, meta, max_row)
    if ahead is not None:
        raise DamagedState(f"{state_dir}: {ahead.words()}: its journal {JOURNAL_FILE} was set back to an older state "
                           f"(its WAL cut short or damaged, or an older copy put in place).{how}")


def _rows(journal: Path) -> int:
    try:
        db = sqlite3.connect(f"file:{journal}?mode=ro", uri=True)
        try:
            return int(db.execute("SELECT count(*) FROM jobs").fetchone()[0])
        finally:
            db.close()
    except sqlite3.Error:
        return 0

