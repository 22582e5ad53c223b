"""What every launcher provides to the daemon, and the per-process environment it sets."""

from __future__ import annotations

import os
import pwd
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Awaitable, Callable, Protocol

from elastic_protocol.jobspec import JobSpec

# Called once per job when all of its processes are gone: (job_id, exit_code, signal).
ExitCallback = Callable[[int, "int | None", "int | None"], Awaitable[None] | None]
# Called when no process of the job is left on these hosts after a reclaim.
HostsGoneCallback = Callable[[int, "list[str]"], Awaitable[None] | None]


@dataclass(frozen=True)
class LaunchRequest:
    job_id: int
    spec: JobSpec
    hosts: tuple[str, ...]  # where to start the command now
    all_hosts: tuple[str, ...]  # the job's whole host list (differs from hosts on a grow)
    app_address: str
    job_secret: str
    job_dir: Path  # daemon-owned scratch for the job (hostfile)
    joining: bool = False  # started by a grow: joins a running job


class Launcher(Protocol):
    async def launch(self, req: LaunchRequest) -> None: ...

    async def reclaim(self, job_id: int, hosts: tuple[str, ...], grace: float) -> None: ...

    async def terminate(self, job_id: int, hosts: tuple[str, ...]) -> None: ...

    async def close(self) -> None: ...


def expand_pattern(pattern: str, job_id: int, name: str, host: str, index: int) -> str:
    """Slurm's filename patterns: %j job id, %x name, %N host, %t task index, %u user, %%."""
    out = []
    i = 0
    while i < len(pattern):
        c = pattern[i]
        if c == "%" and i + 1 < len(pattern):
            k = pattern[i + 1]
            rep = {
                "j": str(job_id),
                "x": name,
                "N": host,
                "t": str(index),
                "u": _user(),
                "%": "%",
            }.get(k)
            if rep is not None:
                out.append(rep)
                i += 2
                continue
        out.append(c)
        i += 1
    return "".join(out)


def _user() -> str:
    try:
        return pwd.getpwuid(os.getuid()).pw_name
    except KeyError:
        return str(os.getuid())


def output_paths(spec: JobSpec, job_id: int, host: str, index: int, workdir: Path) -> tuple[Path, Path]:
    out = workdir / expand_pattern(spec.output, job_id, spec.name, host, index)
    err_pat = spec.error if spec.error is not None else spec.output
    err = workdir / expand_pattern(err_pat, job_id, spec.name, host, index)
    return out, err


def job_environment(req: LaunchRequest, host: str, index: int, hostfile: Path) -> dict[str, str]:
    """What a process learns about its job; the names are the documented interface."""
    env = dict(os.environ)
    # Jobs see the Python environment elastic runs in first (its virtualenv, say), so that
    # `python3 -m elastic_apps...` in a job file finds the client library.
    bin_dir = os.path.dirname(sys.executable)
    path = env.get("PATH", "")
    if bin_dir not in path.split(os.pathsep):
        env["PATH"] = bin_dir + (os.pathsep + path if path else "")
    env.update(req.spec.env)
    env.update(
        {
            "ELASTIC_JOB_ID": str(req.job_id),
            "ELASTIC_JOB_NAME": req.spec.name,
            "ELASTIC_JOB_HOSTS": ",".join(req.all_hosts),
            "ELASTIC_JOB_NUM_NODES": str(len(req.all_hosts)),
            "ELASTIC_HOSTFILE": str(hostfile),
            "ELASTIC_HOST": host,
            "ELASTIC_NODE_INDEX": str(index),
            "ELASTIC_APP_ADDRESS": req.app_address,
            "ELASTIC_JOB_SECRET": req.job_secret,
            "ELASTIC_JOINING": "1" if req.joining else "0",
        }
    )
    return env


def write_hostfile(req: LaunchRequest) -> Path:
    req.job_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    path = req.job_dir / "hostfile"
    # Written anew on every grow; processes read it at start, so rewriting is safe.
    tmp = req.job_dir / "hostfile.tmp"
    tmp.write_text("".join(f"{h}\n" for h in req.all_hosts))
    tmp.replace(path)
    return path
