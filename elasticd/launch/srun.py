"""Cluster mode through Slurm itself: each host's process is a job step of the allocation.

A thin launcher on top of the local one: for every host the daemon runs, on its own node,
`srun --jobid=$SLURM_JOB_ID --overlap -N1 -n1 -w HOST ... COMMAND` in a process group of
its own. Slurm starts the process on HOST under slurmstepd and tracks it (with
proctrack/cgroup, every descendant); ending the local srun's group (SIGTERM, SIGKILL after
the kill-wait) makes srun cancel the step. Before hosts (or the job) are reported gone
the daemon also checks that Slurm no longer lists the step -- it cancels a step that
outlived its srun -- so freed nodes are verified free at Slurm's level.

Output goes to the job's files through srun's --output/--error, written by slurmstepd on
the node: a shared file system, as with the SSH launcher. srun's own messages go to
`srun-HOST.log` in the job's directory under the daemon's state dir. Unlike the SSH
launcher, this one does not watch nodes: a node Slurm loses fails its step, and the job
ends as its processes do.
"""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
from pathlib import Path

from elasticd import defaults
from elasticd.errors import ElasticError, LaunchError
from elasticd.launch.base import (
    ExitCallback,
    HostsGoneCallback,
    LaunchRequest,
    call_back,
    job_environment,
    output_paths,
)
from elasticd.launch.local import _WRAPPER, LocalLauncher, _HostProc, _marker, _open_output, fresh_proc_files
from elasticd.launch.reap import spawn_session_leader

# srun itself needs the cluster's configuration and the allocation it runs steps in.
SRUN_NEEDS = frozenset({"SLURM_CONF", "SLURM_JOB_ID", "SLURM_JOBID"})

log = logging.getLogger("elasticd.launch.srun")


class SrunLauncher(LocalLauncher):
    def __init__(self, on_exit: ExitCallback, on_hosts_gone: HostsGoneCallback, kill_wait: float = defaults.KILL_WAIT,
                 slurm_job: str | None = None, tag: str = "") -> None:
        job = slurm_job or os.environ.get("SLURM_JOB_ID")
        if not job:
            raise ElasticError("--launcher srun works inside a Slurm allocation (no SLURM_JOB_ID here)")
        srun, squeue, scancel = (shutil.which(t) for t in ("srun", "squeue", "scancel"))
        if not (srun and squeue and scancel):
            raise ElasticError("--launcher srun needs srun, squeue and scancel on the PATH")
        self.slurm_job, self.srun, self.squeue, self.scancel = job, srun, squeue, scancel
        self._user_on_exit, self._user_on_hosts_gone = on_exit, on_hosts_gone
        super().__init__(self._exit_verified, self._hosts_gone_verified, kill_wait=kill_wait, tag=tag)
        # Nodes of companion allocations (the daemon's allocation grew): their steps run in
        # that Slurm job, not in the daemon's own.
        self.host_jobs: dict[str, str] = {}

    async def add_hosts(self, hosts: list[str], slurm_job: str | None = None) -> list[str]:
        """Nodes of a companion allocation: their steps run in that Slurm job."""
        for h in hosts:
            if slurm_job is not None and slurm_job != self.slurm_job:
                self.host_jobs[h] = slurm_job
        return list(hosts)

    async def remove_hosts(self, hosts: list[str]) -> None:
        for h in hosts:
            self.host_jobs.pop(h, None)

    def job_of(self, host: str) -> str:
        return self.host_jobs.get(host, self.slurm_job)

    def step_name(self, job_id: int, host: str) -> str:
        return f"elastic.{job_id}.{host}"

    async def _start_one(self, req: LaunchRequest, host: str, index: int, hostfile: Path,
                         workdir: Path) -> _HostProc:
        out, err = output_paths(req.spec, req.job_id, host, index, workdir)
        argv = [
            self.srun, f"--jobid={self.job_of(host)}", "--nodes=1", "--ntasks=1", f"--nodelist={host}",
            "--overlap", f"--job-name={self.step_name(req.job_id, host)}", "--quiet",
            "--kill-on-bad-exit=0", "--open-mode=append", f"--chdir={workdir}",
            # srun reads % patterns in file names: the paths are already expanded.
            f"--output={_literal(out)}", f"--error={_literal(err)}",
            *req.spec.command,
        ]
        pid_file, status_file = fresh_proc_files(req.job_dir, host)
        env = job_environment(req, host, index, hostfile, keep=SRUN_NEEDS)
        env["SLURM_JOB_ID"] = env["SLURM_JOBID"] = self.job_of(host)
        env["ELASTIC_TAG"] = self.contain.env_tag(req.job_id, host)
        fd = _open_output(req.job_dir / f"srun-{host}.log")
        try:
            # srun runs under the local launcher's wrapper, which records its exit status
            # (the step's): a restarted daemon finds it again (`adopt`) and learns how it ended.
            proc = await spawn_session_leader(
                "/bin/sh", "-c", _WRAPPER, _marker(req.job_id, host), "", str(pid_file), str(status_file), "", "",
                *argv,
                env=env, stdin=asyncio.subprocess.DEVNULL, stdout=fd, stderr=fd,
            )
        except OSError as exc:
            raise LaunchError(f"cannot run srun: {exc}") from None
        finally:
            os.close(fd)
        return _HostProc(host, proc, proc.pid, status_file)

    async def end_strays(self, running: set[int]) -> dict[int, int]:
        """The srun clients of jobs this daemon does not run (found by their tag), then any
        step of such a job that Slurm still lists (named elastic.JOB.HOST): ended."""
        ended = await super().end_strays(running)
        keep = running | set(self._jobs)
        for sid, name in (await self._steps()).items():
            parts = name.split(".")
            if len(parts) >= 3 and parts[0] == "elastic" and parts[1].isdigit() and int(parts[1]) not in keep:
                log.warning("step %s (%s) belongs to no running job: cancelling it", sid, name)
                await self._run(self.scancel, "--quiet", sid)
                ended[int(parts[1])] = ended.get(int(parts[1]), 0) + 1
        return ended

    # ---- verification at Slurm's level ----------------------------------------------------
    async def _hosts_gone_verified(self, job_id: int, hosts: list[str]) -> None:
        await self._steps_gone({self.step_name(job_id, h) for h in hosts})
        await call_back(self._user_on_hosts_gone, job_id, hosts)

    async def _exit_verified(self, job_id: int, code: int | None, sig: int | None, ended_at: float | None) -> None:
        await self._steps_gone(None, prefix=f"elastic.{job_id}.")
        await call_back(self._user_on_exit, job_id, code, sig, ended_at)

    async def _steps_gone(self, names: set[str] | None, prefix: str = "") -> None:
        """Wait until Slurm lists none of these steps; cancel those that outlived srun."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.kill_wait + 15
        cancelled: set[str] = set()
        while True:
            left = {sid: name for sid, name in (await self._steps()).items()
                    if (name in names if names is not None else name.startswith(prefix))}
            if not left:
                return
            if loop.time() > deadline:
                log.error("Slurm still lists steps %s after cancelling them", sorted(left.values()))
                return
            for sid in set(left) - cancelled:
                log.warning("step %s (%s) outlived its srun: cancelling it", sid, left[sid])
                await self._run(self.scancel, "--quiet", sid)
                cancelled.add(sid)
            await asyncio.sleep(0.2)

    async def _steps(self) -> dict[str, str]:
        jobs = ",".join(sorted({self.slurm_job, *self.host_jobs.values()}))
        out = await self._run(self.squeue, "-h", "-s", "-j", jobs, "-o", "%i|%j")
        steps = {}
        for line in out.splitlines():
            sid, _, name = line.strip().partition("|")
            if sid:
                steps[sid] = name
        return steps

    async def _run(self, *argv: str) -> str:
        proc = await asyncio.create_subprocess_exec(*argv, stdin=asyncio.subprocess.DEVNULL,
                                                    stdout=asyncio.subprocess.PIPE,
                                                    stderr=asyncio.subprocess.DEVNULL)
        try:
            out, _ = await asyncio.wait_for(proc.communicate(), 30)
        except TimeoutError:
            proc.kill()
            await proc.wait()
            return ""
        return out.decode(errors="replace")


def _literal(path: Path) -> str:
    return str(path).replace("%", "%%")
