"""Collecting the orphans the daemon adopts as a child subreaper (elasticd.launch.contain).

Where no cgroup holds a job (sweep containment) the daemon is a child subreaper: a job's
process that detached (setsid, a double fork, setpgid) and lost its parent becomes the
daemon's child, and the kernel keeps its exit status for the daemon to collect. Until it
does, the process is a zombie that holds its pid and counts against RLIMIT_NPROC: a daemon
whose jobs daemonize helpers would pile them up until it could no longer fork. Ending the
job's processes (`LocalLauncher._end`) cannot collect them: containment lists live
processes only, and an orphan that ends by itself is never among a job's processes ended.

How they are collected, and why so:

- **Never a wait for any child** (waitpid(-1), or a pid not known to be an orphan). The
  daemon's own subprocesses are waited for by the event loop, each by its pid, and a status
  taken from under it is lost to it. uvloop (the daemon's loop) has libuv call
  waitpid(pid, WNOHANG) for each process it started when SIGCHLD comes, and skips one that
  answers ECHILD for good: its `Process.wait()` would never return, and a job whose wrapper
  it was would never end. Plain asyncio (in-process use; Python 3.11's ThreadedChildWatcher
  waits in a thread per process, 3.12's pidfd watcher on the pidfd) reports it as exit 255.
- **Not on SIGCHLD.** uvloop owns SIGCHLD (`add_signal_handler(SIGCHLD)` raises) and a
  handler installed beside the loop would replace libuv's and stop its reaping. Nor is an
  orphan's end announced otherwise: it became the daemon's child without the daemon knowing
  (no pidfd is open for it).
- **A sweep** instead, every `INTERVAL` seconds and at once after a job's processes were
  ended (its detached ones have just died): the daemon lists its children
  (/proc/PID/task/*/children) and collects those that are zombies and adopted orphans. An
  orphan is told from a child of the daemon's own by its session, which a process can only
  leave for one it leads (setsid). A child the daemon starts either shares the daemon's
  session (squeue, scancel, ssh, sbatch, scontrol: never touched here) or leads one of its
  own: the launchers' wrappers, which are started through `spawn_session_leader` so that
  the sweep knows them until the event loop has collected them. A zombie child in a third
  session (its job's: a double fork, a setpgid) is an orphan for sure; one leading its own
  session (a setsid) is one unless it is such a wrapper, or a wrapper's start is on its way
  (its pid is only known once `create_subprocess_exec` returns).

A sweep reads a few /proc files; an orphan stays a zombie at most `INTERVAL` seconds. It
only runs where the daemon is a subreaper: elsewhere (cgroup containment) a detached process
whose parent dies goes to init, and every child of the daemon is one it started.
"""

from __future__ import annotations

import asyncio
import logging
import os
from typing import Any

from elasticd.launch.contain import is_subreaper

log = logging.getLogger("elasticd.launch.reap")

INTERVAL = 1.0

# The session leaders this process started and the event loop has not collected yet (their
# returncode is None until it has), by pid; and how many such starts are on their way.
# Process-wide, as the children are: two launchers in one process must not take each
# other's wrappers for orphans.
_own: dict[int, asyncio.subprocess.Process] = {}
_starting = 0


async def spawn_session_leader(program: str, *args: str, **kwargs: Any) -> asyncio.subprocess.Process:
    """`asyncio.create_subprocess_exec` with start_new_session, the child known to the sweep
    as the daemon's own (not an orphan) from its fork until the event loop collects it.
    Every child the daemon starts in a session of its own must be started through here."""
    global _starting
    _starting += 1
    try:
        proc = await asyncio.create_subprocess_exec(program, *args, start_new_session=True, **kwargs)
        _own[proc.pid] = proc
        return proc
    finally:
        # A start that failed or was cancelled after its fork has had asyncio collect the
        # child before it raised (it closes the transport and waits for it).
        _starting -= 1


def reap_orphans() -> int:
    """Collect every adopted orphan that has ended (see the module's docstring for which
    children those are); how many were."""
    for pid in [pid for pid, proc in _own.items() if proc.returncode is not None]:
        del _own[pid]
    if not is_subreaper():
        return 0
    me, session = os.getpid(), os.getsid(0)
    reaped = 0
    for pid in _children(me):
        stat = _stat(pid)
        if stat is None:
            continue
        state, ppid, sid = stat
        if state != b"Z" or ppid != me or sid == session:
            continue
        if sid == pid and (pid in _own or _starting):
            continue
        try:
            if os.waitpid(pid, os.WNOHANG)[0] == pid:
                reaped += 1
        except ChildProcessError:
            pass
    if reaped:
        log.debug("collected %d orphan(s) adopted as subreaper", reaped)
    return reaped


async def reap_orphans_every(interval: float = INTERVAL) -> None:
    """`reap_orphans` every `interval` seconds, for as long as the daemon runs."""
    while True:
        await asyncio.sleep(interval)
        reap_orphans()


def _children(me: int) -> set[int]:
    """The pids of this process's children: the kernel's list per thread (an orphan is
    given to any thread of its subreaper), or a scan of /proc where the kernel keeps none
    (built without CONFIG_PROC_CHILDREN). A child that comes or goes while a list is read
    may be missed: the next sweep finds it."""
    task = f"/proc/{me}/task"
    if not os.path.exists(f"{task}/{me}/children"):
        return {pid for pid in _all_pids() if (_stat(pid) or (b"", -1, -1))[1] == me}
    pids: set[int] = set()
    try:
        tids = os.listdir(task)
    except OSError:
        return pids
    for tid in tids:
        try:
            with open(f"{task}/{tid}/children", "rb") as f:
                pids.update(int(x) for x in f.read().split())
        except (OSError, ValueError):
            continue  # a thread that ended meanwhile
    return pids


def _all_pids() -> list[int]:
    return [int(e.name) for e in os.scandir("/proc") if e.name.isdigit()]


def _stat(pid: int) -> tuple[bytes, int, int] | None:
    """(state, parent, session) of `pid`, from /proc/PID/stat (a zombie keeps all three)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
        return fields[0], int(fields[1]), int(fields[3])
    except (OSError, IndexError, ValueError):
        return None
