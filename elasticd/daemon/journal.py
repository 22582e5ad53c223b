"""The daemon's journal: every job's state, saved before any change is acknowledged or acted on.

Why SQLite in WAL mode: one file in the state directory, atomic multi-row commits, and a
reader (a later daemon) that sees exactly the last committed transaction even after the
writer was killed mid-write.

What is written: one row per job (its spec once, at submission; its changing state as a
JSON document, rewritten whenever the core reports the job changed), the job secrets and
rendezvous values applications depend on to reconnect, and a few daemon-wide values (the
next order id, the channel ports, the number of the last event-log record a commit covers). Rows are state, not a log of events to replay: replaying
would re-run policies, whose decisions depend on the clock. Recovery reads the rows back
into the core (see Daemon.recover).

When it is written (the durability rule): the daemon calls `commit` before it writes any
reply on either channel and before it carries out any action (launching, signalling,
sending an order). All changes made in one event-loop turn share a commit, so a burst of
submissions from many connections costs one transaction per turn, not per job.

Durability chosen: `synchronous=NORMAL` in WAL mode. A commit is then a write() into the
WAL file without fsync, which survives the daemon being killed (SIGKILL, a crash, an OOM
kill): the data is in the kernel's page cache and reaches the file regardless of the
process. It does not survive the machine losing power before the next checkpoint; that
loss takes every job process with it anyway, and fsync per commit (synchronous=FULL)
would cost a disk flush per submission on the shared file systems HPC login nodes have
(milliseconds each), below the 500 submissions/s target. Set ELASTIC_JOURNAL_SYNC=FULL
to trade that speed for power-loss safety.
"""

from __future__ import annotations

import json
import os
import sqlite3
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from elasticd.core.job import Job
from elasticd.core.record import job_state
from elasticd.errors import JournalError, StateWriteError

JOURNAL_FILE = "journal.db"
SCHEMA_VERSION = "1"
# The meta key of the event log's last record a commit covers (elasticd.eventlog): how far
# the journal is, to compare with the log at a start.
LOG_SEQ = "log_seq"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS jobs (job_id INTEGER PRIMARY KEY, spec TEXT NOT NULL,
                                 state TEXT NOT NULL, data TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS secrets (job_id INTEGER PRIMARY KEY, secret TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS job_values (job_id INTEGER NOT NULL, key TEXT NOT NULL, value TEXT NOT NULL,
                                       PRIMARY KEY (job_id, key));
"""


@dataclass
class Saved:
    """What a previous daemon left: rows as stored, for the daemon to rebuild from."""

    meta: dict[str, str] = field(default_factory=dict)
    jobs: list[tuple[int, str, dict[str, Any]]] = field(default_factory=list)  # id, spec JSON, state
    secrets: dict[int, str] = field(default_factory=dict)
    values: dict[int, dict[str, str]] = field(default_factory=dict)

    @property
    def empty(self) -> bool:
        return not self.jobs


class Journal:
    def __init__(self, state_dir: Path) -> None:
        self.path = state_dir / JOURNAL_FILE
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)  # secrets inside: owner only
        os.close(fd)
        try:
            # isolation_level=None: transactions are begun and committed here, explicitly.
            self._db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
            self._db.execute("PRAGMA journal_mode=WAL")
            sync = os.environ.get("ELASTIC_JOURNAL_SYNC", "NORMAL").upper()
            if sync not in ("NORMAL", "FULL"):
                raise JournalError(f"ELASTIC_JOURNAL_SYNC must be NORMAL or FULL, not {sync!r}")
            self._db.execute(f"PRAGMA synchronous={sync}")
            self._db.executescript(_SCHEMA)
        except sqlite3.Error as exc:
            raise JournalError(f"cannot open the journal {self.path}: {exc}") from None
        self._known: set[int] = set()  # job ids whose spec is stored
        self._meta: dict[str, str] = {}
        self._in_tx = False
        self._saved: tuple[set[int], dict[str, str]] = (set(), {})

    def load(self) -> Saved:
        db = self._db
        try:
            saved = Saved(meta=dict(db.execute("SELECT key, value FROM meta")))
            version = saved.meta.get("schema")
            if version is not None and version != SCHEMA_VERSION:
                raise JournalError(f"{self.path}: journal schema {version}, this daemon reads {SCHEMA_VERSION}")
            loads = json.loads
            saved.jobs = [(jid, spec, loads(data))
                          for jid, spec, data in db.execute("SELECT job_id, spec, data FROM jobs ORDER BY job_id")]
            saved.secrets = dict(db.execute("SELECT job_id, secret FROM secrets"))
            for jid, key, value in db.execute("SELECT job_id, key, value FROM job_values"):
                saved.values.setdefault(jid, {})[key] = value
        except sqlite3.Error as exc:
            raise JournalError(f"cannot read the journal {self.path}: {exc}") from None
        self._known = {jid for jid, _, _ in saved.jobs}
        self._meta = dict(saved.meta)
        return saved

    def _begin(self) -> sqlite3.Connection:
        if not self._in_tx:
            self._db.execute("BEGIN")
            self._in_tx = True
            self._saved = (set(self._known), dict(self._meta))
        return self._db

    def save_jobs(self, jobs: Iterable[Job]) -> None:
        db = self._begin()
        dumps = json.dumps
        for job in jobs:
            data = dumps(job_state(job), separators=(",", ":"))
            if job.job_id in self._known:
                db.execute("UPDATE jobs SET state = ?, data = ? WHERE job_id = ?",
                           (job.state.value, data, job.job_id))
            else:
                db.execute("INSERT INTO jobs (job_id, spec, state, data) VALUES (?, ?, ?, ?)",
                           (job.job_id, job.spec.model_dump_json(), job.state.value, data))
                self._known.add(job.job_id)

    def save_meta(self, values: dict[str, str]) -> None:
        changed = {k: v for k, v in values.items() if self._meta.get(k) != v}
        if not changed:
            return
        db = self._begin()
        db.executemany("INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)", changed.items())
        self._meta.update(changed)

    def save_secret(self, job_id: int, secret: str | None) -> None:
        db = self._begin()
        if secret is None:
            db.execute("DELETE FROM secrets WHERE job_id = ?", (job_id,))
        else:
            db.execute("INSERT OR REPLACE INTO secrets (job_id, secret) VALUES (?, ?)", (job_id, secret))

    def save_value(self, job_id: int, key: str | None, value: str | None) -> None:
        """One value of a job (value None: it is gone); key None drops all of the job's
        values (it ended)."""
        db = self._begin()
        if key is None:
            db.execute("DELETE FROM job_values WHERE job_id = ?", (job_id,))
        elif value is None:
            db.execute("DELETE FROM job_values WHERE job_id = ? AND key = ?", (job_id, key))
        else:
            db.execute("INSERT OR REPLACE INTO job_values (job_id, key, value) VALUES (?, ?, ?)",
                       (job_id, key, value))

    def commit(self) -> bool:
        """Make the open transaction durable; StateWriteError (naming the state directory and
        why: disk full, I/O error, read-only, file too large) when it cannot be. True when
        something was written: only that shows the state directory takes writes again."""
        if not self._in_tx:
            return False
        try:
            self._db.execute("COMMIT")
        except sqlite3.Error as exc:
            self.rollback()
            raise StateWriteError(f"cannot save to {self.path.parent}: {exc}") from None
        self._in_tx = False
        return True

    def rollback(self) -> None:
        """Drop what was written since the last commit (a commit that failed, or an event the
        daemon could not save)."""
        if not self._in_tx:
            return
        self._in_tx = False
        self._known, self._meta = self._saved
        try:
            self._db.execute("ROLLBACK")
        except sqlite3.Error:
            pass  # SQLite rolls back on its own when a COMMIT fails with no space

    def close(self, finished: bool = False) -> None:
        """finished=True after a clean stop: every job was ended, so their rows go; the
        daemon-wide values stay (the next job id above all: ids are never reused in a state
        directory). A journal that cannot be written now is closed as it is."""
        try:
            if finished:
                db = self._begin()
                for table in ("jobs", "secrets", "job_values"):
                    db.execute(f"DELETE FROM {table}")
            self.commit()
        except (sqlite3.Error, StateWriteError):
            self.rollback()
        finally:
            self._db.close()
