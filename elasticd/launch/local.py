"""Local mode: each virtual host's process runs on this machine in its own process group.

The process group is what lets a cancel or a shrink end exactly one job's processes on
exactly the hosts concerned; the job is reported gone only once no member of any of its
groups is left.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from elasticd.errors import LaunchError
from elasticd.launch.base import (
    ExitCallback,
    LaunchRequest,
    job_environment,
    output_paths,
    write_hostfile,
)

log = logging.getLogger("elasticd.launch.local")


@dataclass
class _HostProc:
    host: str
    proc: asyncio.subprocess.Process
    pgid: int
    returncode: int | None = None


@dataclass
class _LocalJob:
    job_id: int
    procs: dict[str, _HostProc] = field(default_factory=dict)
    watcher: asyncio.Task[None] | None = None


def group_members(pgids: set[int]) -> list[psutil.Process]:
    """Live (non-zombie) processes whose process group is one of `pgids`."""
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
    while group_members(pgids) and loop.time() < deadline:
        await asyncio.sleep(0.05)
    for _ in range(100):
        if not group_members(pgids):
            return
        signal_groups(pgids, signal.SIGKILL)
        await asyncio.sleep(0.02)
    log.error("process groups %s still have members after SIGKILL", sorted(pgids))


class LocalLauncher:
    def __init__(self, on_exit: ExitCallback, kill_wait: float = 5.0) -> None:
        self.on_exit = on_exit
        self.kill_wait = kill_wait
        self._jobs: dict[int, _LocalJob] = {}

    async def launch(self, req: LaunchRequest) -> None:
        workdir = Path(req.spec.working_dir or Path.home())
        if not workdir.is_dir():
            raise LaunchError(f"working_dir {workdir} is not a directory")
        hostfile = write_hostfile(req)
        job = _LocalJob(req.job_id)
        try:
            for index, host in enumerate(req.hosts):
                job.procs[host] = await self._start_one(req, host, index, hostfile, workdir)
        except LaunchError:
            await end_groups({hp.pgid for hp in job.procs.values()}, 0.5)
            raise
        except OSError as exc:
            await end_groups({hp.pgid for hp in job.procs.values()}, 0.5)
            raise LaunchError(_describe_spawn_error(exc, req.spec.command[0])) from None
        self._jobs[req.job_id] = job
        job.watcher = asyncio.create_task(self._watch(job), name=f"watch-job-{req.job_id}")

    async def _start_one(
        self, req: LaunchRequest, host: str, index: int, hostfile: Path, workdir: Path
    ) -> _HostProc:
        out_path, err_path = output_paths(req.spec, req.job_id, host, index, workdir)
        out_fd = _open_output(out_path)
        try:
            err_fd = out_fd if err_path == out_path else _open_output(err_path)
            try:
                proc = await asyncio.create_subprocess_exec(
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
        return _HostProc(host, proc, proc.pid)

    async def _watch(self, job: _LocalJob) -> None:
        procs = list(job.procs.values())
        codes = await asyncio.gather(*(hp.proc.wait() for hp in procs))
        for hp, rc in zip(procs, codes):
            hp.returncode = rc
        # A job's own background children must not outlive it on "freed" nodes.
        await end_groups({hp.pgid for hp in procs}, min(self.kill_wait, 2.0))
        self._jobs.pop(job.job_id, None)
        code, sig = _job_exit(procs)
        result = self.on_exit(job.job_id, code, sig)
        if asyncio.iscoroutine(result):
            await result

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
        for job in list(self._jobs.values()):
            if job.watcher is not None:
                job.watcher.cancel()


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


def _describe_spawn_error(exc: BaseException, program: str) -> str:
    if isinstance(exc, FileNotFoundError):
        return f"command not found: {program}"
    if isinstance(exc, PermissionError):
        return f"permission denied: {exc.filename or program}"
    return str(exc)
