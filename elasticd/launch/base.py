"""What every launcher provides to the daemon, and the per-process environment it sets."""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import os
import pwd
import sys
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from elastic_protocol.jobspec import JobSpec

# Called once per job when all of its processes are gone: (job_id, exit_code, signal,
# ended_at). ended_at is when they ended, if that was before the launcher could see it (they
# ended while no daemon watched them, found so after a restart); None: they ended just now.
ExitCallback = Callable[[int, "int | None", "int | None", "float | None"], Awaitable[None] | None]
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


@dataclass(eq=False)
class Start:
    """A launch on its way: the hosts it starts processes on, and those of them taken back
    (reclaimed) meanwhile, whose processes are the job's no more once they exist."""

    hosts: frozenset[str]
    reclaimed: set[str] = field(default_factory=set)
    over: asyncio.Event = field(default_factory=asyncio.Event)


class StartsInFlight:
    """The launches on their way, per job. A launch records its hosts before its first
    await; a reclaim of any of them waits until that launch is over, so that what it started
    there is among the job's processes (and so ended) before the hosts are reported gone.
    A launch fills in the job's processes only once every host's start is done (a thread hop
    for the file system, a process start or an ssh round trip each): a reclaim that came
    meanwhile (a refused grow, a release or shrink answered at once) found none there, and
    the daemon freed the hosts with them running on."""

    def __init__(self) -> None:
        self._open: dict[int, list[Start]] = {}

    @contextlib.contextmanager
    def launching(self, job_id: int, hosts: tuple[str, ...]) -> Iterator[Start]:
        """The launch of `hosts`, recorded until it is over (entered before its first await)."""
        start = Start(frozenset(hosts))
        starts = self._open.setdefault(job_id, [])
        starts.append(start)
        try:
            yield start
        finally:
            starts.remove(start)
            if not starts and self._open.get(job_id) is starts:
                del self._open[job_id]
            start.over.set()

    async def reclaiming(self, job_id: int, hosts: tuple[str, ...]) -> None:
        """Mark `hosts` taken back in the launches on their way there, and return once those
        launches are over (whatever they started on the hosts is then the job's, released)."""
        waits = []
        for start in self._open.get(job_id, []):
            mine = start.hosts.intersection(hosts)
            if mine:
                start.reclaimed.update(mine)
                waits.append(start.over.wait())
        if waits:
            await asyncio.gather(*waits)


class Launcher(Protocol):
    async def launch(self, req: LaunchRequest) -> None: ...

    async def reclaim(self, job_id: int, hosts: tuple[str, ...], grace: float) -> None: ...

    async def terminate(self, job_id: int, hosts: tuple[str, ...], passes_on: bool = False) -> None:
        """End the job's processes on `hosts`: one SIGTERM each, SIGKILL after the kill-wait.
        `passes_on`: the command passes its SIGTERM on to the processes it detached (mpirun
        to its ranks), so they are not sent one of their own (a second SIGTERM is, for many
        applications, "quit now, skip the checkpoint"); what is left at the kill-wait is
        killed all the same."""
        ...

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


# What the daemon's own environment holds for itself, never a job's (README: what a job
# sees): the allocation's SLURM_* variables (Open MPI would take them for its own job and
# start its daemons as Slurm steps on the allocation's CPUs) and the daemon's ELASTIC_*
# settings (a job's ELASTIC_* are set below, for it). A launcher that needs some passes them
# on purpose (`keep`).
DAEMON_ONLY_PREFIXES = ("SLURM_", "SLURMD_", "ELASTIC_")


def job_environment(req: LaunchRequest, host: str, index: int, hostfile: Path,
                    keep: frozenset[str] = frozenset()) -> dict[str, str]:
    """What a process learns about its job; the names are the documented interface."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(DAEMON_ONLY_PREFIXES) or k in keep}
    # The interpreter and packages that run `python3 -m elastic_apps...` are the daemon's
    # (its virtualenv, say), first on PATH whatever the user's shell put before it — or the
    # job file's own `python`.
    python = req.spec.python or sys.executable
    bin_dir = os.path.dirname(python)
    parts = [p for p in env.get("PATH", "").split(os.pathsep) if p and p != bin_dir]
    env["PATH"] = os.pathsep.join([bin_dir, *parts])
    env.update(req.spec.env)  # the job file's own variables, PATH included, win
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


async def call_back(cb: Callable[..., object], *args: object) -> None:
    """Call a launcher's callback, which the daemon may give as a plain function or a coroutine."""
    result = cb(*args)
    if inspect.isawaitable(result):
        await result
