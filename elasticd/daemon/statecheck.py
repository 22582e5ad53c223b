"""A state directory is never started fresh by accident, and what a damaged one held is
salvaged, not dropped.

Why: a daemon that finds no journal starts with an empty queue and gives out job ids from 1
again. If the directory once held jobs (its event log, its jobs/ folders say so), that is
data loss — acknowledged jobs forgotten, the old jobs' processes running untracked, a new job
overwriting an old one's output. So `elasticd start` refuses such a directory, says what is
wrong, and `elasticd start --salvage` recovers every record that can still be read: rows of
the damaged journal, else the jobs the event log rebuilds, and ids above everything ever
given out.
"""

from __future__ import annotations

import json
import os
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from elasticd.core.record import job_state
from elasticd.daemon.journal import JOURNAL_FILE, LOG_SEQ, journal_files
from elasticd.errors import JournalError
from elasticd.eventlog import LOG_FILE, last_seq, records_from_end
from elasticd.statedir import move_aside


class DamagedState(JournalError):
    """A state directory that held jobs but whose journal is missing, empty or unreadable."""

    code = "damaged_state"


class StateDirFull(JournalError):
    """The state directory's file system has no room for what the daemon must write. Not
    damage: nothing is to be salvaged, and nothing is moved aside (a salvage on a full disk
    would leave an empty journal in place of a good one)."""

    code = "state_dir_full"


# What a daemon writes before it can take a job: the journal's shared-memory index (32 KiB)
# and first WAL pages, daemon.json, its log and the event log's start. Below this a start is
# refused as a full disk, never attempted (SQLite then reports "disk I/O error", which reads
# like damage).
START_NEEDS = 256 << 10


def free_bytes(state_dir: Path) -> int | None:
    """Bytes an unprivileged writer may still use on the state directory's file system."""
    try:
        st = os.statvfs(state_dir)
    except OSError:
        return None
    return st.f_bavail * st.f_frsize


def full_message(state_dir: Path, free: int | None, what: str = "") -> str:
    """The one way a full state directory is named, wherever it is met."""
    has = "no free space" if not free else f"{free} bytes free"
    return (f"state directory {state_dir} is full: {has}{what}. Nothing in it is damaged; free space on its "
            "file system (or start with another --state-dir) and start again")


def check_room(state_dir: Path, needs: int = START_NEEDS) -> None:
    """Raise StateDirFull when a daemon could not write what a start needs."""
    free = free_bytes(state_dir)
    if free is not None and free < needs:
        raise StateDirFull(full_message(state_dir, free, f" (a start needs {needs >> 10} KiB)"))


# A file the daemon keeps in its state directory, of RESERVE_BYTES, to start on when the disk
# is full. Why: a daemon killed (OOM, kill -9) while the disk is full must be restarted before
# space is freed, or the jobs it ran go on unwatched and their exits are never recorded; a
# start must write (its address in daemon.json, the journal's index, its log) and the jobs it
# takes back must be recorded as they end. `elasticd start` on a full disk deletes the reserve
# to start on it; the daemon then refuses submissions and starts nothing until the reserve
# can be made again (the disk has room), so that what it holds stays recordable.
RESERVE_FILE = "reserve"
RESERVE_BYTES = 1 << 20


def has_reserve(state_dir: Path) -> bool:
    try:
        return (state_dir / RESERVE_FILE).stat().st_size >= RESERVE_BYTES
    except OSError:
        return False


def make_reserve(state_dir: Path) -> bool:
    """Whether the state directory holds its reserve, made now if it is missing and the disk
    has room for it and a start beside it. Written in data, not holes and not zeros: a
    sparse file, or zeros on a compressing file system, hold no space to give back."""
    if has_reserve(state_dir):
        return True
    free = free_bytes(state_dir)
    if free is None or free < RESERVE_BYTES + START_NEEDS:
        return False
    tmp = state_dir / (RESERVE_FILE + ".tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            view = memoryview(os.urandom(RESERVE_BYTES))
            while view:
                view = view[os.write(fd, view):]
        finally:
            os.close(fd)
        os.replace(tmp, state_dir / RESERVE_FILE)
    except OSError:
        tmp.unlink(missing_ok=True)
        return False
    return True


def reserve_note(state_dir: Path) -> str:
    """Why the daemon takes no submission and starts nothing while it has no reserve."""
    free = free_bytes(state_dir)
    has = "no free space" if not free else f"{free} bytes free"
    return (f"state directory {state_dir} is full: {has}, its reserve for a restart on a full disk included (given "
            "up to start on, or never made); the daemon records the jobs it holds, but takes no submission and "
            f"starts no job until {(RESERVE_BYTES + START_NEEDS) >> 10} KiB are free and its reserve is made again")


def room_to_start(state_dir: Path, use_reserve: bool = True) -> str | None:
    """Make sure a start can write what it must: on a full disk, the reserve is given up to
    start on (`use_reserve`; a salvage never does: it rewrites the whole journal, which the
    reserve does not hold). Returns what was done, in words, or None when there was room.
    StateDirFull when there is no room and no reserve, naming the jobs left unwatched."""
    (state_dir / (RESERVE_FILE + ".tmp")).unlink(missing_ok=True)  # a reserve's making cut short
    free = free_bytes(state_dir)
    if free is None or free >= START_NEEDS:
        return None
    reserve = state_dir / RESERVE_FILE
    if use_reserve and has_reserve(state_dir):
        reserve.unlink()
        if (free_bytes(state_dir) or 0) >= START_NEEDS:
            return (f"state directory {state_dir} is full ({free} bytes free): starting on its reserve "
                    f"({RESERVE_BYTES >> 10} KiB, given up now); running jobs are taken back and their ends "
                    f"recorded, but no job is submitted or started until {(RESERVE_BYTES + START_NEEDS) >> 10} KiB "
                    "are free")
    running = _running_jobs(state_dir / JOURNAL_FILE)
    unwatched = (f"; job(s) {', '.join(map(str, running))} of its journal were running and, if their processes "
                 "still are, run unwatched (their ends unrecorded) until a start succeeds" if running else "")
    why = " and no reserve to start on" if use_reserve else ""
    raise StateDirFull(full_message(state_dir, free_bytes(state_dir), f" (a start needs {START_NEEDS >> 10} KiB){why}"
                                    f"{unwatched}"))


def _running_jobs(journal: Path) -> list[int]:
    """The jobs the journal holds as running; none when it cannot be read (a best effort,
    for the message). Read without making a file: a journal without its WAL and index
    (closed cleanly) is read as it is; one with only one of them is not read at all."""
    beside = [Path(f"{journal}{suffix}").exists() for suffix in ("-wal", "-shm")]
    if not journal.exists() or beside[0] != beside[1]:
        return []
    try:
        db = sqlite3.connect(f"file:{journal}?{'mode=ro' if beside[0] else 'immutable=1'}", uri=True)
        try:
            return [int(r[0]) for r in db.execute(
                "SELECT job_id FROM jobs WHERE state IN ('RUNNING', 'RESIZING') ORDER BY job_id")]
        finally:
            db.close()
    except sqlite3.Error:
        return []


def is_full_error(exc: BaseException) -> bool:
    """Whether a failed write or read was the disk being full (SQLITE_FULL, ENOSPC, EDQUOT)."""
    import errno

    if isinstance(exc, sqlite3.Error):
        return getattr(exc, "sqlite_errorcode", None) == sqlite3.SQLITE_FULL
    return isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT)


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
    the last record it covers (`log_seq`, elasticd.daemon.service.Daemon._commit). So the
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


@dataclass
class Salvage:
    from_journal: list[int] = field(default_factory=list)
    from_log: list[int] = field(default_factory=list)
    lost: list[int] = field(default_factory=list)  # ids known to have existed, no record left
    next_job_id: int = 1
    kept_as: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def report(self) -> str:
        parts = [f"salvage: {len(self.from_journal)} job(s) from the journal's readable rows",
                 f"{len(self.from_log)} rebuilt from the event log"]
        if self.lost:
            parts.append(f"{len(self.lost)} lost (no readable record): {', '.join(map(str, self.lost[:20]))}"
                         + (" ..." if len(self.lost) > 20 else ""))
        parts.append(f"new job ids start at {self.next_job_id}")
        if self.kept_as:
            parts.append("damaged files kept as " + ", ".join(self.kept_as))
        return "; ".join(parts + self.notes)


def salvage(state_dir: Path) -> Salvage:
    """Rebuild journal.db from what can still be read, keeping the damaged files beside.

    Nothing is moved aside until the rebuilt journal is complete (written beside, under
    another name): a salvage that cannot write — a full disk above all — leaves the
    directory as it found it and raises StateDirFull, never an empty journal in place of
    the old one. A full disk is refused before anything is read: its journal is not
    damaged, and its readable rows could not be written anew anyway."""
    check_room(state_dir)
    out = Salvage()
    journal = state_dir / JOURNAL_FILE
    rows: dict[int, tuple[str, dict[str, Any]]] = {}
    secrets: dict[int, str] = {}
    values: list[tuple[int, str, str]] = []
    meta: dict[str, str] = {}
    if journal.exists() and journal.stat().st_size > 0:
        rows, secrets, values, meta = _read_what_can_be_read(journal, out)
    # Jobs the log knows better: the journal was set back behind events of theirs (an end, a
    # start) that the log holds; its rows of them are older than what was acknowledged.
    ahead = log_ahead(state_dir, meta, max(rows, default=0)) if meta or rows else None
    newer = ahead.jobs if ahead is not None else set()
    log_jobs, log_max = _from_log(state_dir, out)
    for jid, (spec, data) in log_jobs.items():
        if jid not in rows or jid in newer:
            rows[jid] = (spec, data)
            out.from_log.append(jid)
    out.from_journal = sorted(set(rows) - set(out.from_log))
    folders = {int(p.name) for p in (state_dir / "jobs").iterdir() if p.name.isdigit()} \
        if (state_dir / "jobs").is_dir() else set()
    known = set(rows) | folders | set(range(1, log_max + 1)) if log_max else set(rows) | folders
    out.lost = sorted(known - set(rows))
    out.next_job_id = max([int(meta.get("next_job_id", "1")), *(j + 1 for j in known), 1])
    rebuilt = journal.with_name(JOURNAL_FILE + ".salvage")
    for f in (rebuilt, Path(f"{rebuilt}-wal"), Path(f"{rebuilt}-shm")):
        f.unlink(missing_ok=True)  # a salvage interrupted before
    try:
        _write(rebuilt, rows, {j: s for j, s in secrets.items() if j in rows},
               [v for v in values if v[0] in rows],
               {**meta, "next_job_id": str(out.next_job_id),
                LOG_SEQ: str(max(int(meta.get(LOG_SEQ, "0")), last_seq(state_dir / LOG_FILE)))})
    except (sqlite3.Error, OSError) as exc:
        for f in (rebuilt, Path(f"{rebuilt}-wal"), Path(f"{rebuilt}-shm")):
            f.unlink(missing_ok=True)
        if is_full_error(exc) or (free_bytes(state_dir) or 0) < START_NEEDS:
            raise StateDirFull(full_message(state_dir, free_bytes(state_dir),
                                            f" (writing the salvaged journal: {exc}); nothing was moved aside")) \
                from None
        raise JournalError(f"salvage: cannot write the rebuilt journal in {state_dir}: {exc}; nothing was moved "
                           "aside") from None
    out.kept_as.extend(p.name for p in move_aside(journal_files(journal), "damaged"))
    rebuilt.rename(journal)  # checkpointed and closed by _write: one file, no WAL beside
    return out


def _read_what_can_be_read(journal: Path, out: Salvage) -> tuple[
        dict[int, tuple[str, dict[str, Any]]], dict[int, str], list[tuple[int, str, str]], dict[str, str]]:
    rows: dict[int, tuple[str, dict[str, Any]]] = {}
    secrets: dict[int, str] = {}
    values: list[tuple[int, str, str]] = []
    meta: dict[str, str] = {}
    try:
        db = sqlite3.connect(f"file:{journal}?mode=ro", uri=True)
    except sqlite3.Error as exc:
        out.notes.append(f"journal not readable at all ({exc})")
        return rows, secrets, values, meta
    try:
        queries: tuple[tuple[str, Callable[[Any], None]], ...] = (
            ("SELECT key, value FROM meta", lambda r: meta.__setitem__(r[0], r[1])),
            ("SELECT job_id, secret FROM secrets", lambda r: secrets.__setitem__(r[0], r[1])),
            ("SELECT job_id, key, value FROM job_values", lambda r: values.append((r[0], r[1], r[2]))),
        )
        for query, keep in queries:
            try:
                for r in db.execute(query):
                    keep(r)
            except sqlite3.Error:
                pass
        try:
            ids = [r[0] for r in db.execute("SELECT job_id FROM jobs")]
        except sqlite3.Error:
            ids = []
        for jid in ids:  # one by one: a damaged page loses its rows, not the others
            try:
                r = db.execute("SELECT spec, data FROM jobs WHERE job_id = ?", (jid,)).fetchone()
                rows[int(jid)] = (r[0], json.loads(r[1]))
            except (sqlite3.Error, ValueError, TypeError):
                continue
    finally:
        db.close()
    return rows, secrets, values, meta


def _from_log(state_dir: Path, out: Salvage) -> tuple[dict[int, tuple[str, dict[str, Any]]], int]:
    """Jobs as the event log rebuilds them (its events through the core), and the highest
    id it ever saw."""
    from elasticd.replay import replay

    log = state_dir / LOG_FILE
    if not log.exists():
        return {}, 0
    try:
        result = replay(log, strict=False)
    except Exception as exc:  # noqa: BLE001 - a damaged log, whatever it raises: salvage keeps what the journal gave
        out.notes.append(f"event log not replayable ({exc})")
        return {}, 0
    jobs = {jid: (j.spec.model_dump_json(), json.loads(json.dumps(job_state(j)))) for jid, j in result.jobs.items()}
    return jobs, max(result.jobs, default=0)


def _write(journal: Path, rows: dict[int, tuple[str, dict[str, Any]]], secrets: dict[int, str],
           values: list[tuple[int, str, str]], meta: dict[str, str]) -> None:
    from elasticd.daemon.journal import _SCHEMA, SCHEMA_VERSION

    fd = os.open(journal, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
    os.close(fd)
    db = sqlite3.connect(journal, isolation_level=None)
    try:
        # Written whole in one file (a rollback journal), then switched to WAL: it is renamed
        # into place after, and a WAL beside it would not follow the rename.
        db.execute("PRAGMA journal_mode=DELETE")
        db.executescript(_SCHEMA)
        db.execute("BEGIN")
        for jid, (spec, data) in sorted(rows.items()):
            db.execute("INSERT INTO jobs (job_id, spec, state, data) VALUES (?, ?, ?, ?)",
                       (jid, spec, data["state"], json.dumps(data, separators=(",", ":"))))
        db.executemany("INSERT INTO secrets (job_id, secret) VALUES (?, ?)", secrets.items())
        db.executemany("INSERT INTO job_values (job_id, key, value) VALUES (?, ?, ?)", values)
        db.executemany("INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)",
                       {**meta, "schema": meta.get("schema", SCHEMA_VERSION)}.items())
        db.execute("COMMIT")
        db.execute("PRAGMA journal_mode=WAL")
    finally:
        db.close()
    wal = Path(f"{journal}-wal")
    if wal.exists() and wal.stat().st_size > 0:
        raise OSError(f"{wal.name} was left after closing the rebuilt journal")
