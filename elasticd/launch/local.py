"""Local mode: each virtual host's process runs on this machine in its own process group.

The process group is what lets a cancel or a shrink end exactly one job's processes on
exactly the hosts concerned; hosts (and the job) are reported gone only once no member of
the groups concerned is left.

Each command runs under a small `sh` wrapper (the group leader) that writes its pid to
`proc-HOST.pid` in the job's directory when it starts and the command's exit status to
`proc-HOST.status` when it ends. Processes outlive the daemon (they are in their own
sessions), and a daemon started after a crash cannot wait() for processes that are not
its children: it finds them again through these files (`adopt`), learns of their end
from a pidfd (no polling) and of their exit status from the status file.
"""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import signal
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from elasticd.errors import LaunchError
from elasticd.launch.base import (
    ExitCallback,
    HostsGoneCallback,
    LaunchRequest,
    job_environment,
    output_paths,
    write_hostfile,
)

log = logging.getLogger("elasticd.launch.local")


# $0 names the job and host (what `adopt` checks, so a reused pid is not taken for the job's);
# $1 the pid file, $2 the status file, the rest the command. A command killed by a signal
# is reported as that signal again: the wrapper re-raises it on itself (not the stop
# signals, 147-150, which would only suspend it).
_WRAPPER = (
    'echo $$ > "$1"; s=$2; shift 2; "$@"; c=$?; echo $c > "$s"; '
    'if [ $c -gt 128 ] && [ $c -lt 160 ] && { [ $c -lt 147 ] || [ $c -gt 150 ]; }; then kill -$((c - 128)) $$; fi; '
    'exit $c'
)


def _marker(job_id: int, host: str) -> str:
    return f"elastic-job-{job_id}-{host}"


def proc_files(job_dir: Path, host: str) -> tuple[Path, Path]:
    return job_dir / f"proc-{host}.pid", job_dir / f"proc-{host}.status"


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
    loop.add_reader(fd, lambda: done.done() or done.set_result(None))
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
    released: bool = False  # reclaimed by a shrink: its exit does not count for the job
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
    """SIGTERM, wait up to `grace`, SIGKILL whatever is left, and return once none is."""
    if not group_members(pgids):
        return
    signal_groups(pgids, signal.SIGTERM)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + grace
    delay = 0.005
    while group_members(pgids) and loop.time() < deadline:
        await asyncio.sleep(delay)
        delay = min(0.05, delay * 2)
    for _ in range(100):
        if not group_members(pgids):
            return
        signal_groups(pgids, signal.SIGKILL)
        await asyncio.sleep(0.02)
    log.error("process groups %s still have members after SIGKILL", sorted(pgids))


async def wait_groups_gone(pgids: set[int], timeout: float) -> bool:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    delay = 0.005
    while group_members(pgids):
        if loop.time() >= deadline:
            return False
        await asyncio.sleep(delay)
        delay = min(0.05, delay * 2)
    return True


class LocalLauncher:
    def __init__(self, on_exit: ExitCallback, on_hosts_gone: HostsGoneCallback, kill_wait: float = 5.0) -> None:
        self.on_exit = on_exit
        self.on_hosts_gone = on_hosts_gone
        self.kill_wait = kill_wait
        self._jobs: dict[int, _LocalJob] = {}
        self._tasks: set[asyncio.Task[None]] = set()

    async def launch(self, req: LaunchRequest) -> None:
        """Start the command on req.hosts: a new job, or new hosts of a running one."""
        workdir = Path(req.spec.working_dir or Path.home())
        if not workdir.is_dir():
            raise LaunchError(f"working_dir {workdir} is not a directory")
        hostfile = write_hostfile(req)
        job = self._jobs.get(req.job_id)
        if job is None:
            if req.joining:
                raise LaunchError(f"job {req.job_id} has no running processes to join")
            job = self._jobs[req.job_id] = _LocalJob(req.job_id)
        _check_command(req.spec.command[0], workdir, job_environment(req, req.hosts[0], 0, hostfile)["PATH"])
        started: list[_HostProc] = []
        job.starting += 1
        try:
            for host in req.hosts:
                index = req.all_hosts.index(host)
                started.append(await self._start_one(req, host, index, hostfile, workdir))
        except (LaunchError, OSError) as exc:
            await end_groups({hp.pgid for hp in started}, 0.5)
            if not job.procs:
                self._jobs.pop(req.job_id, None)
            if isinstance(exc, LaunchError):
                raise
            raise LaunchError(_describe_spawn_error(exc, req.spec.command[0])) from None
        finally:
            job.starting -= 1
        for hp in started:
            job.procs[hp.host] = hp
            self._spawn(self._watch(job, hp))

    async def _start_one(
        self, req: LaunchRequest, host: str, index: int, hostfile: Path, workdir: Path
    ) -> _HostProc:
        out_path, err_path = output_paths(req.spec, req.job_id, host, index, workdir)
        pid_file, status_file = proc_files(req.job_dir, host)
        for stale in (pid_file, status_file):  # a host the job had before (shrunk, grown back)
            stale.unlink(missing_ok=True)
        out_fd = _open_output(out_path)
        try:
            err_fd = out_fd if err_path == out_path else _open_output(err_path)
            try:
                proc = await asyncio.create_subprocess_exec(
                    "/bin/sh", "-c", _WRAPPER, _marker(req.job_id, host), str(pid_file), str(status_file),
                    *req.spec.command,
                    cwd=workdir,
                    env=job_environment(req, host, index, hostfile),
                    stdin=asyncio.subprocess.DEVNULL,
                    stdout=out_fd,
                    stderr=err_fd,
                    start_new_session=True,
                )
            finally:
                if err_fd != out_fd:
                    os.close(err_fd)
        finally:
            os.close(out_fd)
        # start_new_session makes the child a session and group leader: pgid == pid.
        return _HostProc(host, proc, proc.pid, status_file)

    def _spawn(self, coro) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def adopt(self, job_id: int, hosts: tuple[str, ...], job_dir: Path) -> list[str]:
        """Find a job's processes again after a daemon restart and watch them as if started here.

        Returns the hosts where the job has a process, running or ended with a recorded
        status; a host without either has none (never started, or killed with its wrapper).
        """
        job = _LocalJob(job_id)
        for host in hosts:
            pid_file, status_file = proc_files(job_dir, host)
            try:
                pid = int(pid_file.read_text().strip())
            except (OSError, ValueError):
                continue
            if _is_wrapper(pid, _marker(job_id, host)):
                job.procs[host] = _HostProc(host, None, pid, status_file)
            else:
                code = _status_code(status_file)
                if code is not None:
                    job.procs[host] = _HostProc(host, None, pid, status_file, returncode=code)
        if job.procs:
            self._jobs[job_id] = job
            for hp in job.procs.values():
                self._spawn(self._watch(job, hp))
        return list(job.procs)

    async def _watch(self, job: _LocalJob, hp: _HostProc) -> None:
        await hp.wait()
        if job.done or job.starting or any(p.returncode is None for p in job.procs.values()):
            return
        job.done = True
        procs = list(job.procs.values())
        # A job's own background children must not outlive it on "freed" nodes.
        await end_groups({p.pgid for p in procs}, min(self.kill_wait, 2.0))
        self._jobs.pop(job.job_id, None)
        code, sig = _job_exit([p for p in procs if not p.released])
        await _call(self.on_exit, job.job_id, code, sig)

    async def reclaim(self, job_id: int, hosts: tuple[str, ...], grace: float) -> None:
        """Give the processes on `hosts` `grace` seconds to exit, end the rest, report."""
        job = self._jobs.get(job_id)
        if job is not None:
            procs = [job.procs[h] for h in hosts if h in job.procs]
            for hp in procs:
                hp.released = True
            pgids = {hp.pgid for hp in procs}
            if grace <= 0 or not await wait_groups_gone(pgids, grace):
                await end_groups(pgids, self.kill_wait)
            for hp in procs:
                # The watcher of a reclaimed process may still be about to run; the job is
                # only over when the remaining hosts' processes end.
                job.procs.pop(hp.host, None)
                await hp.wait()
        await _call(self.on_hosts_gone, job_id, list(hosts))

    async def terminate(self, job_id: int, hosts: tuple[str, ...]) -> None:
        job = self._jobs.get(job_id)
        if job is None:
            return
        pgids = {job.procs[h].pgid for h in hosts if h in job.procs}
        await end_groups(pgids, self.kill_wait)

    def pgids(self, job_id: int) -> dict[str, int]:
        job = self._jobs.get(job_id)
        return {} if job is None else {h: hp.pgid for h, hp in job.procs.items()}

    async def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()


async def _call(cb, *args) -> None:
    result = cb(*args)
    if asyncio.iscoroutine(result):
        await result


def _open_output(path: Path) -> int:
    try:
        return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    except OSError as exc:
        raise LaunchError(f"cannot open output file {path}: {exc.strerror}") from None


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
