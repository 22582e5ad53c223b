"""Local mode: each virtual host's process runs on this machine in its own process group,
inside its own cgroup where the machine allows one (elasticd.launch.contain).

The process group and the cgroup are what let a cancel or a shrink end exactly one job's
processes on exactly the hosts concerned, including the ones that detached (setsid,
double fork); hosts (and the job) are reported gone only once none of them is left. Ending
is one SIGTERM to each process, `kill_wait` seconds, then SIGKILL.

Each command runs under a small `sh` wrapper (the group leader) that writes its pid to
`proc-HOST.pid` in the job's directory when it starts and the command's exit status to
`proc-HOST.status` when it ends. Processes outlive the daemon (they are in their own
sessions), and a daemon started after a crash cannot wait() for processes that are not
its children: it finds them again through these files (`adopt`), learns of their end
from a pidfd (no polling) and of their exit status from the status file.

The daemon opens a job's output files itself (so a path it cannot open fails the launch,
naming it), without ever waiting on one: an open that would wait -- a FIFO no process reads
yet, a file under another process's lease -- is left to the job's own process, the wrapper's
child, which opens it before it execs the command. Only that job waits for its reader, as a
Slurm job step does; the daemon answers meanwhile and the job is RUNNING (and cancellable).
What a launch asks of the job's file system (working_dir, the command, the output files) is
asked from a thread, never on the event loop: a hung file system holds that thread, and the
launch fails after ELASTIC_FS_WAIT seconds naming the path, while the daemon goes on.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import os
import shutil
import signal
import stat
import threading
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import psutil

from elasticd import defaults
from elasticd.errors import LaunchError
from elasticd.launch.base import (
    ExitCallback,
    HostsGoneCallback,
    LaunchRequest,
    Start,
    StartsInFlight,
    call_back,
    job_environment,
    output_paths,
    write_hostfile,
)
from elasticd.launch.contain import Containment
from elasticd.launch.reap import reap_orphans, reap_orphans_every, spawn_session_leader

log = logging.getLogger("elasticd.launch.local")

_T = TypeVar("_T")


# $0 names the job and host (what `adopt` checks, so a reused pid is not taken for the job's);
# $1 the cgroup to join first ('' for none), $2 the pid file, $3 the status file, $4 and $5
# the output and error files the command's process opens itself ('' when the daemon opened
# it; $5 equal to $4: the same file), the rest the command. That process is the one the
# wrapper waits for, so a SIGTERM while it waits for a FIFO's reader ends it like the
# command. The wrapper outlives a SIGTERM and does not pass it on: the daemon's one SIGTERM
# to the process group has reached the command already, and a second one is, for many
# applications, "quit now, skip the checkpoint". So the status it records is the command's
# own: a command that ignores SIGTERM and is SIGKILLed after the kill-wait ends 0:9, not
# 0:15. A command killed by a signal is reported as that signal again: the wrapper
# re-raises it on itself (not the stop signals, 147-150, which would only suspend it). An
# output file the command's process cannot open after all ends it with status 2 (the
# shell's, for a failed redirection) before the command runs.
_WRAPPER = (
    '[ -n "$1" ] && echo $$ > "$1/cgroup.procs"; printf "%-10s\\n" $$ 1<>"$2"; s=$3; o=$4; e=$5; shift 5; '
    "trap : TERM HUP INT; "
    '{ if [ -n "$o" ]; then exec >>"$o"; fi; '
    'if [ -n "$e" ] && [ "$e" = "$o" ]; then exec 2>&1; elif [ -n "$e" ]; then exec 2>>"$e"; fi; '
    'exec "$@"; } & p=$!; wait $p; c=$?; '
    'while kill -0 $p 2>/dev/null; do wait $p; c=$?; done; printf "%-7s\\n" $c 1<>"$s"; trap - TERM HUP INT; '
    'if [ $c -gt 128 ] && [ $c -lt 160 ] && { [ $c -lt 147 ] || [ $c -gt 150 ]; }; then kill -$((c - 128)) $$; fi; '
    'exit $c'
)


def _marker(job_id: int, host: str) -> str:
    return f"elastic-job-{job_id}-{host}"


def proc_files(job_dir: Path, host: str) -> tuple[Path, Path]:
    return job_dir / f"proc-{host}.pid", job_dir / f"proc-{host}.status"


# Seconds a restarted daemon waits for a wrapper that runs but has not yet written its pid
# (it does so first thing; the daemon died just after launching it).
_PID_WAIT = 10.0

STATUS_BLANK = " " * 7 + "\n"
PID_BLANK = " " * 10 + "\n"  # a pid (at most 4194304 on Linux), left-aligned


def fresh_proc_files(job_dir: Path, host: str) -> tuple[Path, Path]:
    """The pid and status files of a process about to start on `host`, both written blank
    at their full size now, while there is room, for the wrapper to fill in place (`1<>`,
    no truncation; a stale pid of an earlier process on the host, shrunk and grown back, is
    blanked with it). On a file system that filled up while the job ran, a status written
    as a new file came out empty, and the job's end (FAILED 0:9) was read after a restart
    as processes lost (NODE_FAIL); a pid file written as a new file by a wrapper that ran
    just after the disk filled came out empty too, and a restart could not find the
    running process at all: NODE_FAIL, and the process ran on untracked."""
    pid_file, status_file = proc_files(job_dir, host)
    pid_file.write_text(PID_BLANK)
    status_file.write_text(STATUS_BLANK)
    return pid_file, status_file


def _status_code(path: Path) -> int | None:
    """The wrapper's record as a returncode (negative: a signal), None when it wrote none."""
    try:
        code = int(path.read_text().strip())
    except (OSError, ValueError):
        return None
    return -(code - 128) if 128 < code < 160 and not 147 <= code <= 150 else code


async def wait_pid_exit(pid: int) -> None:
    """Return once `pid` has ended; works for processes that are not our children."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return
    loop = asyncio.get_running_loop()
    done = loop.create_future()

    def readable() -> None:
        if not done.done():
            done.set_result(None)

    loop.add_reader(fd, readable)
    try:
        await done
    finally:
        loop.remove_reader(fd)
        os.close(fd)


@dataclass
class _HostProc:
    host: str
    proc: asyncio.subprocess.Process | None  # None: found again after a daemon restart
    pgid: int
    status_file: Path
    returncode: int | None = None
    # When it ended, for a process found ended after a daemon restart (its status file's
    # mtime: the wrapper fills the file in at exit); None for an exit seen as it happened.
    ended_at: float | None = None
    released: bool = False  # reclaimed by a shrink: its exit does not count for the job
    joining: bool = False  # started by a grow the application has not confirmed yet
    _waiter: asyncio.Future[int] | None = None

    async def wait(self) -> int:
        if self.returncode is not None:
            return self.returncode
        if self.proc is not None:
            self.returncode = await self.proc.wait()
            return self.returncode
        if self._waiter is None:
            self._waiter = asyncio.ensure_future(self._wait_adopted())
        return await asyncio.shield(self._waiter)

    async def _wait_adopted(self) -> int:
        await wait_pid_exit(self.pgid)
        code = _status_code(self.status_file)
        # No status: the wrapper itself was killed (a signal to the whole group).
        self.returncode = -signal.SIGKILL if code is None else code
        return self.returncode


@dataclass
class _LocalJob:
    job_id: int
    procs: dict[str, _HostProc] = field(default_factory=dict)
    starting: int = 0  # launches in progress (a grow): the job is not over meanwhile
    done: bool = False
    # When SIGTERM was sent to each host's processes (loop time): once per host, and
    # SIGKILL follows kill_wait after it.
    term_sent: dict[str, float] = field(default_factory=dict)
    # Ended (cancel, limit, stop) while a launch was still on its way (its file-system
    # checks run in a thread): the processes that launch starts are ended as they appear.
    terminating: bool = False
    # Its command passes a SIGTERM on to the processes it detached (Launcher.terminate).
    passes_on: bool = False


def group_members(pgids: set[int]) -> list[psutil.Process]:
    """Live (non-zombie) processes whose process group is one of `pgids`."""
    if not pgids:
        return []
    found = []
    for p in psutil.process_iter():
        try:
            if os.getpgid(p.pid) in pgids and p.status() != psutil.STATUS_ZOMBIE:
                found.append(p)
        except (ProcessLookupError, psutil.Error):
            continue
    return found


def signal_groups(pgids: set[int], sig: int) -> None:
    for pgid in pgids:
        try:
            os.killpg(pgid, sig)
        except (ProcessLookupError, PermissionError):
            pass


async def end_groups(pgids: set[int], grace: float) -> None:
    """SIGTERM, wait up to `grace`, SIGKILL whatever is left, and return once none is (for
    process groups the daemon knows only by number: MPI ranks, leftovers of lost jobs)."""
    if not group_members(pgids):
        return
    signal_groups(pgids, signal.SIGTERM)
    await _until(lambda: not group_members(pgids), grace)
    for _ in range(100):
        if not group_members(pgids):
            return
        signal_groups(pgids, signal.SIGKILL)
        await asyncio.sleep(0.02)
    log.error("process groups %s still have members after SIGKILL", sorted(pgids))


async def _until(done: Callable[[], bool], timeout: float) -> bool:
    """Poll `done` (quickly at first) until it holds or `timeout` seconds passed."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    delay = 0.005
    while not done():
        if loop.time() >= deadline:
            return False
        await asyncio.sleep(min(delay, max(0.0, deadline - loop.time())))
        delay = min(0.05, delay * 2)
    return True


async def wait_groups_gone(pgids: set[int], timeout: float) -> bool:
    return await _until(lambda: not group_members(pgids), timeout)


def fs_wait() -> float:
    """How long a launch waits for the file system of a job's paths (ELASTIC_FS_WAIT seconds,
    default defaults.FS_WAIT) before it fails, naming the path."""
    try:
        return max(0.1, float(os.environ.get("ELASTIC_FS_WAIT", defaults.FS_WAIT)))
    except ValueError:
        return defaults.FS_WAIT


async def on_job_fs(what: str, fn: Callable[[], _T], discard: Callable[[_T], None], wait: float) -> _T:
    """`fn` touches the job's own paths, which a hung file system (an NFS server gone) can hold
    for ever, even with O_NONBLOCK: it runs in a thread of its own, never on the event loop,
    and the launch waits for it at most `wait` seconds, then fails naming `what`. What `fn`
    returns after that (file descriptors) is given to `discard`, in its thread."""
    loop = asyncio.get_running_loop()
    done: asyncio.Future[None] = loop.create_future()
    lock = threading.Lock()
    outcome: list[tuple[bool, Any]] = []  # (returned, its value or exception), once
    abandoned = False

    def wake() -> None:
        if not done.done():
            done.set_result(None)

    def run() -> None:
        try:
            result: tuple[bool, Any] = (True, fn())
        except Exception as exc:  # noqa: BLE001 - raised in the launch
            result = (False, exc)
        with lock:
            if abandoned:
                if result[0]:
                    discard(result[1])
                return
            outcome.append(result)
        with contextlib.suppress(RuntimeError):  # the loop is closed: the daemon has stopped
            loop.call_soon_threadsafe(wake)

    def give_up() -> bool:
        """True if `fn` has not returned (its result will be discarded); else it is kept."""
        nonlocal abandoned
        with lock:
            abandoned = not outcome
            return abandoned

    threading.Thread(target=run, name="elastic-job-fs", daemon=True).start()
    try:
        await asyncio.wait_for(asyncio.shield(done), wait)
    except TimeoutError:
        if give_up():
            raise LaunchError(f"{what}: no answer from its file system within {wait:g} s") from None
    except asyncio.CancelledError:
        if not give_up() and outcome[0][0]:
            discard(outcome[0][1])
        raise
    returned, value = outcome[0]
    if not returned:
        raise value
    result: _T = value
    return result


class LocalLauncher:
    def __init__(self, on_exit: ExitCallback, on_hosts_gone: HostsGoneCallback, kill_wait: float = defaults.KILL_WAIT,
                 tag: str = "") -> None:
        self.on_exit = on_exit
        self.on_hosts_gone = on_hosts_gone
        # Told (job, host, code, signal) when a grow's process exits before the application
        # confirmed the grow (the daemon sets it: the grow is then void).
        self.on_join_failed: Callable[[int, str, int, int], object] | None = None
        self.kill_wait = kill_wait
        self._jobs: dict[int, _LocalJob] = {}
        self._starts = StartsInFlight()
        self._tasks: set[asyncio.Task[None]] = set()
        self.contain = Containment(tag or f"pid{os.getpid()}")
        self._reaping = False

    async def launch(self, req: LaunchRequest) -> None:
        """Start the command on req.hosts: a new job, or new hosts of a running one."""
        self._reap_from_now()
        # Recorded before the first await: a reclaim of these hosts from now on waits for
        # this launch, and ends what it started there (base.StartsInFlight).
        with self._starts.launching(req.job_id, req.hosts) as start:
            await self._launch(req, start)

    async def _launch(self, req: LaunchRequest, start: Start) -> None:
        workdir = Path(req.spec.working_dir or Path.home())
        try:
            hostfile = write_hostfile(req)
        except OSError as exc:
            raise LaunchError(f"cannot write the job's hostfile in {req.job_dir}: {exc.strerror}") from None
        search = job_environment(req, req.hosts[0], 0, hostfile)["PATH"]
        await on_job_fs(f"working_dir {workdir}", lambda: _check_start(req.spec.command[0], workdir, search),
                        lambda _: None, fs_wait())
        job = self._jobs.get(req.job_id)
        if req.joining and (job is None or job.done):
            # A job over, its exit on its way, too: processes started for it now would run on
            # untracked, on nodes about to be freed.
            raise LaunchError(f"job {req.job_id} has no running processes to join")
        if job is None:
            job = self._jobs[req.job_id] = _LocalJob(req.job_id)
        started: list[_HostProc] = []
        failed: LaunchError | OSError | None = None
        job.starting += 1
        try:
            for host in req.hosts:
                index = req.all_hosts.index(host)
                started.append(await self._start_one(req, host, index, hostfile, workdir))
        except (LaunchError, OSError) as exc:
            failed = exc
            await self._end(job, started)
        finally:
            job.starting -= 1
        if failed is not None:
            if not job.procs:
                self._jobs.pop(req.job_id, None)
            else:
                # Its other processes may have ended while this start was pending (a cancel,
                # its limit, its own end): their exits were heard when it could not be over.
                await self._settle(job)
            if isinstance(failed, LaunchError):
                raise failed
            raise LaunchError(_describe_spawn_error(failed, req.spec.command[0])) from None
        for hp in started:
            hp.joining = req.joining
            # Taken back while it started (a refused grow, a release answered at once): its
            # exit is not the job's, and the reclaim waiting for this launch ends it.
            hp.released = hp.host in start.reclaimed
            job.procs[hp.host] = hp
            self._spawn(self._watch(job, hp))
        if job.terminating:
            self._spawn(self._end(job, started))

    def confirm_joined(self, job_id: int, hosts: tuple[str, ...]) -> None:
        """The application took the grow's processes: their exits are the job's from now on."""
        job = self._jobs.get(job_id)
        for h in hosts:
            hp = job.procs.get(h) if job is not None else None
            if hp is not None:
                hp.joining = False

    async def _start_one(
        self, req: LaunchRequest, host: str, index: int, hostfile: Path, workdir: Path
    ) -> _HostProc:
        out_path, err_path = output_paths(req.spec, req.job_id, host, index, workdir)
        pid_file, status_file = fresh_proc_files(req.job_dir, host)
        env = job_environment(req, host, index, hostfile)
        env["ELASTIC_TAG"] = self.contain.env_tag(req.job_id, host)
        cgroup = self.contain.prepare(req.job_id, host)
        files = f"{out_path}" if err_path == out_path else f"{out_path} or {err_path}"
        out_fd, err_fd = await on_job_fs(f"cannot open output file {files}", lambda: _open_outputs(out_path, err_path),
                                         _close_outputs, fs_wait())
        try:
            # What the daemon could not open without waiting, the command's process opens.
            later_out = "" if out_fd is not None else str(out_path.absolute())
            later_err = "" if err_fd is not None else str(err_path.absolute())
            for path in filter(None, dict.fromkeys((later_out, later_err))):
                log.info("job %d on %s: opening %s would wait (a FIFO no process reads yet): the job's "
                         "process opens it", req.job_id, host, path)
            proc = await spawn_session_leader(
                "/bin/sh", "-c", _WRAPPER, _marker(req.job_id, host), cgroup, str(pid_file), str(status_file),
                later_out, later_err,
                *req.spec.command,
                cwd=workdir,
                env=env,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.DEVNULL if out_fd is None else out_fd,
                stderr=asyncio.subprocess.DEVNULL if err_fd is None else err_fd,
            )
        finally:
            _close_outputs((out_fd, err_fd))
        # A session leader is its group's leader: pgid == pid.
        return _HostProc(host, proc, proc.pid, status_file)

    def _reap_from_now(self) -> None:
        """Collect, from the first job on, the orphans its processes leave to the daemon
        (elasticd.launch.reap): a sweep every second for as long as the launcher runs."""
        if not self._reaping:
            self._reaping = True
            self._spawn(reap_orphans_every())

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def adopt(self, job_id: int, hosts: tuple[str, ...], job_dir: Path) -> list[str]:
        """Find a job's processes again after a daemon restart and watch them as if started here.

        Returns the hosts where the job has a process, running or ended with a recorded
        status. A wrapper that recorded its pid and died without a status (killed with its
        command) ended there too, as 0:9, when the job has a process on another host: so a
        watching daemon would have seen it end. A host whose pid file is missing or blank
        had none started: the start never got that far, or failed (the daemon's recovery
        gives such a host back). A wrapper that runs there but has not yet written its pid
        (the daemon died right after it launched it) is given `_PID_WAIT` seconds to;
        one that does not is ended, so that nothing of the job runs on a host reported
        without it.
        """
        self._reap_from_now()
        job = _LocalJob(job_id)
        killed: list[_HostProc] = []
        for host in hosts:
            pid_file, status_file = proc_files(job_dir, host)
            pid = await self._recorded_pid(job, host, pid_file)
            if pid is None:
                continue
            if _is_wrapper(pid, _marker(job_id, host)):
                job.procs[host] = _HostProc(host, None, pid, status_file)
            else:
                code = _status_code(status_file)
                if code is not None:
                    job.procs[host] = _HostProc(host, None, pid, status_file, returncode=code,
                                                ended_at=_mtime(status_file))
                else:
                    killed.append(_HostProc(host, None, -1, status_file, returncode=-signal.SIGKILL))
        if job.procs:
            # Not when every process is gone so: the job is lost then (NODE_FAIL), as with its node.
            job.procs.update((hp.host, hp) for hp in killed)
            self._jobs[job_id] = job
            for hp in job.procs.values():
                self._spawn(self._watch(job, hp))
        return list(job.procs)

    async def _recorded_pid(self, job: _LocalJob, host: str, pid_file: Path) -> int | None:
        """The pid the wrapper on `host` recorded; None if it recorded none, after waiting
        for (or else ending) a wrapper that runs there without having recorded it yet."""
        def read() -> int | None:
            try:
                return int(pid_file.read_text().strip())
            except (OSError, ValueError):
                return None

        pid = read()
        if pid is not None or not self.contain.members(job.job_id, host):
            return pid
        await _until(lambda: read() is not None, _PID_WAIT)
        pid = read()
        if pid is None:
            log.warning("job %d: a process of it on %s never recorded its pid in %s within %g s; ending it",
                        job.job_id, host, pid_file, _PID_WAIT)
            await self._end(job, [_HostProc(host, None, -1, Path("/nonexistent"))])
        return pid

    async def end_strays(self, running: set[int]) -> dict[int, int]:
        """Processes of jobs this daemon does not run (lost with a damaged journal, or left by
        a crash before their end was recorded), found by their tag or cgroup: ended. How many
        were ended, per job."""
        ended: dict[int, int] = {}
        for job_id, hosts in self.contain.live_jobs().items():
            if job_id in running or job_id in self._jobs:
                continue
            job = _LocalJob(job_id)
            procs = [_HostProc(h, None, -1, Path("/nonexistent")) for h in sorted(hosts)]
            n = len(self._pids(job, procs))
            if n:
                await self._end(job, procs)
                ended[job_id] = n
        return ended

    async def _watch(self, job: _LocalJob, hp: _HostProc) -> None:
        await hp.wait()
        if hp.joining and not hp.released and self.on_join_failed is not None:
            # A grow's process that died before the application took it: the grow is void,
            # its host goes back, and its exit is not the job's (an application that ended its
            # work as the grow was ordered refuses its new process, which then fails).
            hp.joining = False
            hp.released = True
            code, sig = _job_exit([hp])
            await call_back(self.on_join_failed, job.job_id, hp.host, code, sig)
        await self._settle(job)

    async def _settle(self, job: _LocalJob) -> None:
        """The job's exit, once every process it has ended and no start of more is on its way."""
        if job.done or job.starting or any(p.returncode is None for p in job.procs.values()):
            return
        job.done = True
        procs = list(job.procs.values())
        # A job's own background children, detached or not, must not outlive it on "freed" nodes.
        await self._end(job, procs)
        self._jobs.pop(job.job_id, None)
        counted = [p for p in procs if not p.released]
        code, sig = _job_exit(counted)
        # Every process ended while no daemon watched: the job ended with the last of them,
        # not at the restart that found it so (its accounting would count the downtime).
        ends = [p.ended_at for p in counted]
        ended_at = max(e for e in ends if e is not None) if ends and None not in ends else None
        await call_back(self.on_exit, job.job_id, code, sig, ended_at)

    def _pids(self, job: _LocalJob, procs: list[_HostProc]) -> set[int]:
        """Live processes of the job on those hosts: their groups, and what containment finds."""
        pids = {p.pid for p in group_members({hp.pgid for hp in procs if hp.pgid > 0})}
        for hp in procs:
            pids |= self.contain.members(job.job_id, hp.host)
        return pids

    async def _end(self, job: _LocalJob, procs: list[_HostProc]) -> None:
        """End whatever the job still runs on these hosts: SIGTERM once (a host already sent
        it is not sent it again), then SIGKILL `kill_wait` seconds after the first SIGTERM,
        and return once nothing is left."""
        if not self._pids(job, procs):
            self._forget(job, procs)
            return
        loop = asyncio.get_running_loop()
        for hp in procs:
            if hp.host not in job.term_sent:
                job.term_sent[hp.host] = loop.time()
                self._term_once(job, hp)
        first = min(job.term_sent[hp.host] for hp in procs)
        await _until(lambda: not self._pids(job, procs), first + self.kill_wait - loop.time())
        for _ in range(200):
            pids = self._pids(job, procs)
            if not pids:
                break
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
            for hp in procs:
                self.contain.signal(job.job_id, hp.host, signal.SIGKILL)
            await asyncio.sleep(0.02)
        else:
            log.error("job %d: processes %s still there after SIGKILL", job.job_id, sorted(self._pids(job, procs)))
        # Those of them the daemon adopted (detached, their parent gone) are its zombies now.
        reap_orphans()
        self._forget(job, procs)

    def _term_once(self, job: _LocalJob, hp: _HostProc) -> None:
        """One SIGTERM to each process of the job on that host. The process group, the cgroup
        (or tag) and the wrapper all reach the same processes: signalled through each, the
        command would get three or four (README: Containment). The group is signalled as
        one (a process it forks meanwhile gets it too), and of the cgroup's or tag's members
        only those outside the group (detached), one by one; none of those when the command
        passes its SIGTERM on to them (Launcher.terminate)."""
        detached = set() if job.passes_on else self.contain.members(job.job_id, hp.host)
        if hp.pgid > 0:
            detached = {pid for pid in detached if _pgid(pid) not in (hp.pgid, None)}
            signal_groups({hp.pgid}, signal.SIGTERM)
        for pid in detached:
            try:
                os.kill(pid, signal.SIGTERM)
            except (ProcessLookupError, PermissionError):
                pass

    def _forget(self, job: _LocalJob, procs: list[_HostProc]) -> None:
        for hp in procs:
            self.contain.forget(job.job_id, hp.host)

    async def reclaim(self, job_id: int, hosts: tuple[str, ...], grace: float) -> None:
        """Give the processes on `hosts` `grace` seconds to exit, end the rest, report. What
        a launch on its way starts there is among them: the report waits for it."""
        await self._starts.reclaiming(job_id, hosts)
        job = self._jobs.get(job_id)
        if job is not None:
            procs = [job.procs[h] for h in hosts if h in job.procs]
            for hp in procs:
                hp.released = True
            if grace > 0:
                await _until(lambda: not self._pids(job, procs), grace)
            await self._end(job, procs)
            for hp in procs:
                # The watcher of a reclaimed process may still be about to run; the job is
                # only over when the remaining hosts' processes end.
                job.procs.pop(hp.host, None)
                await hp.wait()
                # Its records go with it: after a restart, a start of the job there again
                # (a grow) that never happened must not be taken for this one, ended.
                for f in (hp.status_file.with_suffix(".pid"), hp.status_file):
                    with contextlib.suppress(OSError):
                        f.unlink()
                # A grow may bring the job back to this host: its new processes get their
                # own SIGTERM when the job ends.
                job.term_sent.pop(hp.host, None)
        await call_back(self.on_hosts_gone, job_id, list(hosts))

    async def terminate(self, job_id: int, hosts: tuple[str, ...], passes_on: bool = False) -> None:
        job = self._jobs.get(job_id)
        if job is None:
            return
        job.terminating = True
        job.passes_on = passes_on
        await self._end(job, [job.procs[h] for h in hosts if h in job.procs])

    def pgids(self, job_id: int) -> dict[str, int]:
        job = self._jobs.get(job_id)
        return {} if job is None else {h: hp.pgid for h, hp in job.procs.items()}

    async def close(self) -> None:
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self.contain.close()


def _pgid(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except ProcessLookupError:
        return None


def _open_output(path: Path) -> int:
    """A file of the daemon's own (in the job's directory): never one that could wait."""
    try:
        return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    except OSError as exc:
        raise LaunchError(f"cannot open output file {path}: {exc.strerror}") from None


def open_job_output(path: Path) -> int | None:
    """The job file's `output`/`error`, opened without waiting: None when the open would wait
    (a FIFO no process reads yet: ENXIO; a file another process holds a lease on: EAGAIN),
    for the job's own process to open, so that only it waits. O_NOCTTY: a terminal named as
    output must not become the daemon's controlling terminal. The descriptor is made
    blocking again once open: the job's writes to a full pipe wait, as they would anywhere."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NONBLOCK | os.O_NOCTTY, 0o644)
    except OSError as exc:
        if exc.errno == errno.EAGAIN or exc.errno == errno.ENXIO and _is_fifo(path):
            return None
        raise LaunchError(f"cannot open output file {path}: {exc.strerror}") from None
    os.set_blocking(fd, True)
    return fd


def _open_outputs(out: Path, err: Path) -> tuple[int | None, int | None]:
    """Both of a process's files (one descriptor if they are the same file); see open_job_output."""
    out_fd = open_job_output(out)
    if err == out:
        return out_fd, out_fd
    try:
        return out_fd, open_job_output(err)
    except BaseException:
        if out_fd is not None:
            os.close(out_fd)
        raise


def _close_outputs(fds: tuple[int | None, int | None]) -> None:
    for fd in set(fds):
        if fd is not None:
            os.close(fd)


def _is_fifo(path: Path) -> bool:
    try:
        return stat.S_ISFIFO(path.stat().st_mode)
    except OSError:
        return False


def _mtime(path: Path) -> float | None:
    try:
        return path.stat().st_mtime
    except OSError:
        return None


def _job_exit(procs: list[_HostProc]) -> tuple[int, int]:
    """Slurm's job exit: the first non-zero exit code, else the first terminating signal."""
    for hp in procs:
        if hp.returncode is not None and hp.returncode > 0:
            return hp.returncode, 0
    for hp in procs:
        if hp.returncode is not None and hp.returncode < 0:
            return 0, -hp.returncode
    return 0, 0


def _is_wrapper(pid: int, marker: str) -> bool:
    """Is `pid` alive and the wrapper of that job's process on that host (not a reused pid)?"""
    try:
        p = psutil.Process(pid)
        return p.status() != psutil.STATUS_ZOMBIE and marker in p.cmdline()
    except psutil.Error:
        return False


def _check_start(program: str, workdir: Path, path: str) -> None:
    if not workdir.is_dir():
        raise LaunchError(f"working_dir {workdir} is not a directory")
    _check_command(program, workdir, path)


def _check_command(program: str, workdir: Path, path: str) -> None:
    """Say what exec would say, before the wrapper starts: the wrapper itself always starts."""
    if "/" in program:
        target = workdir / program
        if not target.exists():
            raise LaunchError(f"command not found: {program}")
        if target.is_dir() or not os.access(target, os.X_OK):
            raise LaunchError(f"permission denied: {program}")
    elif shutil.which(program, path=path) is None:
        raise LaunchError(f"command not found: {program}")


def _describe_spawn_error(exc: BaseException, program: str) -> str:
    if isinstance(exc, FileNotFoundError):
        return f"command not found: {program}"
    if isinstance(exc, PermissionError):
        return f"permission denied: {exc.filename or program}"
    return str(exc)
