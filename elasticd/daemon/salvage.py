"""`elasticd start --salvage`: a damaged state directory rebuilt from what can still be read.

Every record that can be read is kept: rows of the damaged journal, else the jobs the event
log rebuilds (the journal's rows of jobs the log knows better too), and ids above everything
ever given out, so that no id is given twice. The damaged files are kept beside the new
journal, never deleted; nothing is moved aside before the rebuilt journal is complete.
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
from elasticd.daemon.room import START_NEEDS, StateDirFull, check_room, free_bytes, full_message, is_full_error
from elasticd.daemon.statecheck import log_ahead
from elasticd.errors import JournalError
from elasticd.eventlog import LOG_FILE, last_seq
from elasticd.statedir import move_aside


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
