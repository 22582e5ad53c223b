"""The journal writer: what the core changed, saved before it is acknowledged or acted on.

Owns the journal (journal.db, the state: elasticd.daemon.journal), the event log writer
(events.jsonl, the history, written right after each commit and never ahead of it), the
jobs' secrets and rendezvous values (saved beside their rows), and the last write that
failed. Every other part saves through `persist` (or `commit`, inside CoreFeed's
transaction for a decision); none touches the journal itself. It decides nothing: it never
hands the core an event.

A commit has three steps: `_gather` (on the loop: what changed since the last one, read from
the core and from the secrets and values marked since), `_write` (the journal's own calls
and nothing else: the one step that waits on the disk) and the bookkeeping of its outcome
(`_written`: the history flushed after it; `_not_written`: every change put back for the
next commit). A writer thread with group commit replaces `_write`'s caller, not the steps.
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from elasticd.core.actions import Action
from elasticd.core.engine import Core
from elasticd.core.events import Event
from elasticd.core.job import Job
from elasticd.daemon.clock import Clock
from elasticd.daemon.config import DaemonConfig
from elasticd.daemon.journal import LOG_SEQ, Journal, Saved
from elasticd.daemon.metrics import DaemonMetrics
from elasticd.errors import StateWriteError
from elasticd.eventlog import EventLogError, EventLogWriter

log = logging.getLogger("elasticd")


@dataclass
class _Batch:
    """What one commit writes, gathered on the loop before anything is written."""

    changed: list[Job]
    meta: list[dict[str, str]]  # written in this order (save_meta skips what did not change)
    secrets: list[tuple[int, str | None]] = field(default_factory=list)
    values: list[tuple[int, str | None, str | None]] = field(default_factory=list)


class Persistence:
    def __init__(self, config: DaemonConfig, core: Core, clock: Clock, metrics: DaemonMetrics | None) -> None:
        self.config = config
        self.core = core
        self.clock = clock
        self.metrics = metrics
        self.journal: Journal | None = Journal(config.state_dir) if config.journal else None
        # The history (events.jsonl), kept where the journal is and written after its commits.
        self.event_log: EventLogWriter | None = EventLogWriter(config.state_dir) if config.journal else None
        self.job_secrets: dict[int, str] = {}
        # Job-scoped rendezvous values (put/get on the application channel).
        self.job_values: dict[int, dict[str, str]] = {}
        # The last failed write to the state directory, until one succeeds (elasticd status).
        self.write_error: str | None = None
        self._write_error_logged = 0.0
        self._persist_pending = False
        # Secrets and rendezvous values changed since the last commit that saved them: written
        # from memory at each commit, so that one that failed loses none of them (the journal's
        # rollback drops what it held).
        self._dirty_secrets: set[int] = set()
        self._dirty_values: set[tuple[int, str | None]] = set()

    @property
    def enabled(self) -> bool:
        """Whether this daemon keeps a journal (`--no-journal`: it does not)."""
        return self.journal is not None

    @property
    def journal_path(self) -> Path | None:
        return None if self.journal is None else self.journal.path

    # ---- saving ----------------------------------------------------------------------------
    def persist(self) -> None:
        """Save what changed (facts the daemon learned: exits, hosts gone, ...); called before
        any reply is written or any action carried out. A failed save is logged and retried
        at the next one: the facts stay in memory, the journal is behind until it heals."""
        self._persist_pending = False
        try:
            self.commit()
        except StateWriteError as exc:
            self.write_failed(exc)

    def persist_soon(self) -> None:
        """Save at the end of this loop turn the changes that have no reply or action."""
        if not self._persist_pending:
            self._persist_pending = True
            asyncio.get_running_loop().call_soon(self.persist)

    def commit(self) -> None:
        """Save what changed, or raise StateWriteError with nothing saved."""
        j = self.journal
        if j is None:
            self.core.take_changed()
            return
        batch = self._gather()
        try:
            wrote = self._write(j, batch)
        except (sqlite3.Error, StateWriteError) as exc:
            raise self._not_written(j, batch, exc) from None
        self._written(batch, wrote)

    def _gather(self) -> _Batch:
        batch = _Batch(self.core.take_changed(),
                       [{"next_order": str(self.core.next_order_id), "next_job_id": str(self.core.next_job_id)}])
        if self.event_log is not None:
            # The last record this commit covers: written to the log only after it, so
            # the log never goes past it, and a journal behind its log was set back
            # (statecheck.check refuses it).
            batch.meta.append({LOG_SEQ: str(self.event_log.seq)})
        if self.write_error is not None:
            # After a failed write, one that reaches the disk is the only proof it takes
            # writes again (there may be nothing else to save).
            batch.meta.append({"last_write_check": repr(self.clock.now())})
        batch.secrets = [(jid, self.job_secrets.get(jid)) for jid in sorted(self._dirty_secrets)]
        batch.values = [(jid, key, None if key is None else self.job_values.get(jid, {}).get(key))
                        for jid, key in sorted(self._dirty_values, key=lambda k: (k[0], k[1] is not None, k[1] or ""))]
        return batch

    def _write(self, j: Journal, batch: _Batch) -> bool:
        """The journal's calls for one commit; True when something reached the disk."""
        restored = j.ensure_in_place()
        if restored is not None:
            log.error("the journal %s was %s while the daemon ran: written again from the daemon's copy of "
                      "it (%d job(s))", j.path, restored, len(self.core.jobs))
        if batch.changed:
            j.save_jobs(batch.changed)
        for meta in batch.meta:
            j.save_meta(meta)
        for jid, secret in batch.secrets:
            j.save_secret(jid, secret)
        for jid, key, value in batch.values:
            j.save_value(jid, key, value)
        t0 = time.monotonic()
        wrote = j.commit()
        if self.metrics is not None:
            self.metrics.commit_seconds.observe(time.monotonic() - t0)
        return wrote

    def _not_written(self, j: Journal, batch: _Batch, exc: Exception) -> StateWriteError:
        """Everything of a failed commit is put back for the next one; the error to raise."""
        j.rollback()
        self.core.requeue_changed(batch.changed)
        failed = exc if isinstance(exc, StateWriteError) else \
            StateWriteError(f"cannot save to {self.config.state_dir}: {exc}")
        self.write_failed(failed)
        return failed

    def _written(self, batch: _Batch, wrote: bool) -> None:
        self._dirty_secrets.clear()
        self._dirty_values.clear()
        flushed = self._flush_event_log()
        if self.write_error is not None and wrote and flushed:
            # Only a write that reached the disk says so (a commit with nothing to write
            # proves nothing while the disk is still full).
            log.warning("state directory writable again%s; journal up to date",
                        f": {len(batch.changed)} job change(s) held in memory saved" if batch.changed else "")
            self.write_error = None

    def write_failed(self, exc: StateWriteError) -> None:
        """Remember (for `elasticd status`) and log, once per distinct error and minute."""
        now = self.clock.now()
        if self.write_error != str(exc) or now - self._write_error_logged > 60:
            log.error("%s; until a write succeeds, what the daemon learns (exits, cancels) is kept in memory and "
                      "saved at the next write, and decisions (submissions, answers, starts) are refused", exc)
            self._write_error_logged = now
        self.write_error = str(exc)

    def _flush_event_log(self) -> bool:
        """The history of what was just committed; late (kept and retried), never ahead.
        False when it could not be written."""
        if self.event_log is None:
            return True
        try:
            self.event_log.flush()
        except EventLogError as exc:
            log.error("%s (%d record(s) kept, retried at the next commit)", exc, self.event_log.pending)
            return False
        finally:
            if self.event_log.lost is not None:
                log.error("%s", self.event_log.lost)
                self.event_log.lost = None
        return True

    # ---- the history -----------------------------------------------------------------------
    def log_start(self, header: dict[str, Any]) -> None:
        """Open the log's segment for this daemon start: what a replay needs to build the
        same core (see elasticd.replay)."""
        if self.event_log is not None:
            self.event_log.start(header)

    def log_event(self, event: Event, actions: list[Action]) -> bool:
        """Buffer the event's record, written with the next commit; False with no log."""
        if self.event_log is None:
            return False
        self.event_log.add(event, actions)
        return True

    def withdraw_event(self) -> None:
        """The record `log_event` just buffered: its decision was rolled back."""
        if self.event_log is not None:
            self.event_log.withdraw()

    # ---- secrets and values ----------------------------------------------------------------
    def job_secret(self, job_id: int) -> str | None:
        return self.job_secrets.get(job_id)

    def set_secret(self, job_id: int, secret: str | None) -> None:
        if secret is None:
            if self.job_secrets.pop(job_id, None) is None:
                return
        else:
            self.job_secrets[job_id] = secret
        if self.journal is not None:
            self._dirty_secrets.add(job_id)

    def values(self, job_id: int) -> Mapping[str, str]:
        return self.job_values.get(job_id, {})

    def put_value(self, job_id: int, key: str, value: str) -> None:
        """Saved before it is acknowledged (another process of the job may `get` it after a
        restart); StateWriteError, with the value as it was, when it cannot be."""
        values = self.job_values.setdefault(job_id, {})
        old = values.get(key)
        values[key] = value
        if self.journal is None:
            return
        self._dirty_values.add((job_id, key))
        try:
            self.commit()
        except StateWriteError:
            if old is None:
                values.pop(key, None)
            else:
                values[key] = old
            raise

    def forget_job(self, job_id: int) -> None:
        """The job ended: its secret authenticates nothing more, its values go."""
        self.set_secret(job_id, None)
        if self.job_values.pop(job_id, None) is not None and self.journal is not None:
            self._dirty_values.add((job_id, None))

    # ---- start and stop ----------------------------------------------------------------------
    def load(self) -> Saved | None:
        """What the previous daemon saved (None without a journal); the event log numbers its
        records on from it."""
        if self.journal is None:
            return None
        saved = self.journal.load()
        if self.event_log is not None:
            self.event_log.resume(int(saved.meta.get(LOG_SEQ, "0")))
        return saved

    def keep_saved(self, saved: Saved, active: set[int]) -> None:
        """The secrets and values of the jobs taken back (their applications reconnect with them)."""
        self.job_secrets = {j: s for j, s in saved.secrets.items() if j in active}
        self.job_values = {j: v for j, v in saved.values.items() if j in active}

    def save_ports(self, control_port: int, app_port: int) -> None:
        """Applications of running jobs reconnect to the same address after a restart."""
        if self.journal is not None:
            self.journal.save_meta({"control_port": str(control_port), "app_port": str(app_port)})

    def close(self, finished: bool) -> None:
        """The last events and their history saved; `finished`: every job ended, nothing is
        left for a later daemon to recover."""
        if self.journal is None:
            return
        self.persist()
        self.journal.close(finished=finished)
        self.journal = None
