"""Room on the state directory's disk: what a start needs, and the reserve to start on.

Why a module of its own: a full disk is not damage. The start checks (statecheck) and the
salvage refuse a full disk before they read anything (a WAL journal needs room for its index
just to be read), and the daemon keeps a reserve file so that it can be started again on a
full disk, take its running jobs back and record their ends; while it runs (DiskRoom), it
takes no submission and starts no job without room. What is in here reads sizes and writes
only the reserve; it never reads the journal but for a message.
"""

from __future__ import annotations

import logging
import os
import sqlite3
from pathlib import Path

from elasticd.daemon.journal import JOURNAL_FILE
from elasticd.errors import JournalError

log = logging.getLogger("elasticd")


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



class DiskRoom:
    """While the daemon runs: whether the state directory's disk has room to take
    submissions and start jobs. Neither waits when it has not: what the daemon holds stays
    recordable, and the jobs' own output is not the next write to fail."""

    def __init__(self, state_dir: Path, min_free_space: int, reserve: bool) -> None:
        self.state_dir = state_dir
        self.min_free_space = min_free_space
        # Set while the state directory has no reserve (given up to start on a full disk:
        # room_to_start) and no room to make it again: what room there is records the jobs
        # the daemon holds; it takes no submission and starts nothing meanwhile.
        self.reserve_missing: str | None = None
        self.space_warning: str | None = None
        if reserve and not make_reserve(state_dir):
            self.reserve_missing = reserve_note(state_dir)
            log.warning("%s", self.reserve_missing)

    def without_reserve(self) -> str | None:
        """Why submissions and starts wait: the state directory's reserve is missing and
        cannot be made yet (make_reserve). Once it can, they are taken again."""
        if self.reserve_missing is None or not make_reserve(self.state_dir):
            return self.reserve_missing
        log.warning("state directory has room again: its reserve is made again; taking submissions")
        self.reserve_missing = None
        return None

    def short_of_space(self) -> bool:
        """No job starts while the state directory's file system is nearly full: its journal,
        event log and the jobs' own output would be the next to fail."""
        if self.without_reserve() is not None:
            self.space_warning = self.reserve_missing
            return True
        try:
            st = os.statvfs(self.state_dir)
        except OSError:
            return False
        free = st.f_bavail * st.f_frsize
        if free >= self.min_free_space:
            if self.space_warning is not None:
                log.warning("state directory has room again (%d MiB free); starting jobs", free >> 20)
                self.space_warning = None
            return False
        has = f"{free >> 20} MiB" if free >= 1 << 20 else f"{free} bytes"
        msg = (f"not starting jobs: state directory {self.state_dir} is short of space: {has} free on its file "
               f"system, less than --min-free-space ({self.min_free_space >> 20} MiB)")
        if self.space_warning is None:
            log.error(msg)  # once, not at every byte the disk loses
        self.space_warning = msg
        return True
