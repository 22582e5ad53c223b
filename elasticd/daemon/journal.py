"""The daemon's journal: every job's state, saved before any change is acknowledged or acted on.

Why SQLite in WAL mode: one file in the state directory, atomic multi-row commits, and a
reader (a later daemon) that sees exactly the last committed transaction even after the
writer was killed mid-write.

What is written: one row per job (its spec once, at submission; its changing state as a
JSON document, rewritten whenever the core reports the job changed), the job secrets and
rendezvous values applications depend on to reconnect, and a few daemon-wide values (the
next order id, the channel ports, the number of the last event-log record a commit covers). Rows are state, not a log of events to replay: replaying
would re-run policies, whose decisions depend on the clock. Recovery reads the rows back
into the core (see elasticd.daemon.recovery).

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

import contextlib
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
from elasticd.statedir import move_aside

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


_UNSEEN = (-1, -1)


def journal_files(path: Path) -> list[Path]:
    """The journal and the files SQLite keeps beside it (its WAL and the WAL's index)."""
    return [path, *(path.with_name(path.name + suffix) for suffix in ("-wal", "-shm"))]


def _file_id(path: Path) -> tuple[int, int] | None:
    """Which file is at `path` (None: none); one that cannot be looked at is taken to be in
    place (the commit then says what is wrong, if anything)."""
    try:
        st = os.stat(path)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError:
        return _UNSEEN
    return (st.st_dev, st.st_ino)


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
        self._db = self._connect()
        self._file = _file_id(self.path)  # the file the connection writes: still at the path?
        self._known: set[int] = set()  # job ids whose spec is stored
        self._meta: dict[str, str] = {}
        self._in_tx = False
        self._saved: tuple[set[int], dict[str, str]] = (set(), {})

    def _connect(self) -> sqlite3.Connection:
        try:
            # isolation_level=None: transactions are begun and committed here, explicitly.
            db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
            db.execute("PRAGMA journal_mode=WAL")
            sync = os.environ.get("ELASTIC_JOURNAL_SYNC", "NORMAL").upper()
            if sync not in ("NORMAL", "FULL"):
                raise JournalError(f"ELASTIC_JOURNAL_SYNC must be NORMAL or FULL, not {sync!r}")
            db.execute(f"PRAGMA synchronous={sync}")
            db.executescript(_SCHEMA)
        except sqlite3.Error as exc:
            raise JournalError(f"cannot open the journal {self.path}: {exc}") from None
        return db

    def ensure_in_place(self) -> str | None:
        """Before a commit: the journal file the connection writes must still be the one at
        its path. One removed (by hand, a cleanup, the state directory removed or moved away)
        or replaced while the daemon runs took every commit since into a file no later start
        reads: submissions were acknowledged and lost at the next restart. Written again here
        from the connection's own copy (every committed row; the file it replaced, if any, is
        moved aside as journal.db.replaced-TIME), and what was done is returned for the log;
        StateWriteError when it cannot be (nothing is committed until it can)."""
        if self._in_tx:
            return None
        found = _file_id(self.path)
        if found == self._file or found == _UNSEEN:
            return None
        what = "removed" if found is None else "replaced"
        folder = self.path.parent
        tmp = folder / (JOURNAL_FILE + ".restore")
        try:
            folder.mkdir(mode=0o700, parents=True, exist_ok=True)
            tmp.unlink(missing_ok=True)
            self._db.execute("VACUUM INTO ?", (str(tmp),))  # the rows as committed, WAL included
            os.chmod(tmp, 0o600)
            aside = move_aside(journal_files(self.path), "replaced")[0] if found is not None else None
        except (OSError, sqlite3.Error) as exc:
            tmp.unlink(missing_ok=True)
            raise StateWriteError(f"cannot save to {folder}: its journal {self.path} was {what} while the daemon "
                                  f"ran and cannot be written again: {getattr(exc, 'strerror', None) or exc}") from None
        # The old connection's close checkpoints into the file no one reads now and removes
        # its WAL by name: done before the new journal is put in place, so it is not the new
        # one's WAL that goes.
        self._db.close()
        for f in journal_files(self.path)[1:]:
            # Any WAL left at the path now is not the new journal's: SQLite would apply it
            # to it (a WAL does not name its database).
            with contextlib.suppress(OSError):
                os.unlink(f)
        try:
            os.replace(tmp, self.path)
        except OSError as exc:  # in the folder VACUUM INTO just wrote: not seen to happen
            raise StateWriteError(f"cannot save to {folder}: its journal {self.path} was {what} while the daemon "
                                  f"ran and cannot be put back: {exc.strerror or exc}") from None
        self._db = self._connect()
        self._file = _file_id(self.path)
        return f"{what}{f' (kept as {aside})' if aside is not None else ''}"

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
