"""MPI jobs (`launcher = "mpi"`): one `mpirun` per job, started through the daemon's host
launcher on the job's first host, with a hostfile for the job's hosts.

Every other job passes straight through to the host launcher; this layer only sees MPI jobs.
What it adds, and why:

- Placement. Local mode has no real hosts, so `mpirun` reaches each virtual host through a
  small rsh agent that runs Open MPI's daemon (orted) on this machine, in that host's name
  (ELASTIC_MPI_NODE, ELASTIC_HOST) and its own TMPDIR, also for shared-memory segments
  (virtual hosts sharing one collide in PMIx's store and in /dev/shm: seen as crashes). In cluster mode the agent is ssh with the daemon's ssh_config, telling
  each node which host it is (CLUSTER_AGENT).
- Accounting. Open MPI puts every rank in a process group of its own, so the host launcher's
  process group covers only mpirun. Every process of the run carries ELASTIC_MPI_TAG (a
  value unique to the run); ranks also carry OMPI_COMM_WORLD_RANK. That is how the daemon
  finds the ranks on a host (locally: from /proc and the ELASTIC_MPI_NODE the agent set;
  in cluster mode: over ssh, on the node itself) and ends strays that a killed mpirun
  leaves spinning.
- Malleability. "spawn": the application spawns ranks itself on the hosts a grow names, so
  a grow starts nothing here and only verifies that ranks appeared there; a shrink waits
  until no rank is left on the released hosts (ending any that stay) before the hosts are
  reported free. Open MPI 4.1 cannot add daemons to a running job (the `add-host` spawn
  key breaks its PMIx fence and `--novm` crashes, seen with 4.1.4), so the hostfile of a
  spawn-mode job also lists every other node of the cluster with no rank placed there:
  an idle orted runs on each for the job's lifetime. "restart": the application writes a
  checkpoint, answers, writes ELASTIC_MPI_RESTART_FILE and exits 0; mpirun is then started
  again on the job's new host set and the application resumes from its checkpoint.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import secrets
import shlex
import shutil
import signal
import sys
from collections.abc import Callable, Collection
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import psutil

from elastic_protocol.jobspec import JobSpec
from elasticd.errors import LaunchError
from elasticd.launch.base import ExitCallback, HostsGoneCallback, Launcher, LaunchRequest, call_back

log = logging.getLogger("elasticd.launch.mpi")

# The rsh agent of local mode: `AGENT HOST COMMAND...` runs COMMAND here as HOST.
LOCAL_AGENT = """#!/bin/sh
host="$1"; shift
ELASTIC_MPI_NODE="$host"; ELASTIC_HOST="$host"; TMPDIR="$ELASTIC_MPI_TMP/$host"
OMPI_MCA_btl_vader_backing_directory="$TMPDIR"
export ELASTIC_MPI_NODE ELASTIC_HOST TMPDIR OMPI_MCA_btl_vader_backing_directory
mkdir -p "$TMPDIR"
exec sh -c "$*"
"""

# The rsh agent of cluster mode: `AGENT HOST COMMAND...` runs COMMAND on HOST over ssh,
# telling it which host it is and its place in the job (ranks inherit both from the orted it
# starts): ELASTIC_HOST, and ELASTIC_NODE_INDEX where the host is one of the job's (a host
# listed only for later spawns has none yet).
CLUSTER_AGENT = """#!/bin/sh
host="$1"; shift
index=""; i=0
old_ifs="$IFS"; IFS=,
for h in $ELASTIC_JOB_HOSTS; do
    if [ "$h" = "$host" ] && [ -z "$index" ]; then index=$i; fi
    i=$((i + 1))
done
IFS="$old_ifs"
exec {ssh} "$host" "ELASTIC_HOST=$host ELASTIC_NODE_INDEX=$index; export ELASTIC_HOST ELASTIC_NODE_INDEX;" "$@"
"""

# Run on a node over ssh (cluster mode): list the run's ranks in this node's network
# namespace (the node itself on a real cluster), or signal every process of the run there.
REMOTE_SCAN = r"""
import os, sys
tag = ("ELASTIC_MPI_TAG=" + sys.argv[1]).encode()
sig = int(sys.argv[2])
me = os.stat("/proc/self/ns/net").st_ino
for d in os.listdir("/proc"):
    if not d.isdigit() or int(d) == os.getpid():
        continue
    try:
        if os.stat(f"/proc/{d}/ns/net").st_ino != me:
            continue
        env = open(f"/proc/{d}/environ", "rb").read().split(b"\0")
    except OSError:
        continue
    if tag not in env:
        continue
    if sig:
        try: os.kill(int(d), sig)
        except OSError: pass
    elif any(e.startswith(b"OMPI_COMM_WORLD_RANK=") for e in env):
        print(d)
"""

# The daemon's own Open MPI settings go on to remote ranks (what the README tells operators
# to set to choose the network); a job's own variables are forwarded by name.
FORWARDED_PREFIXES = ("OMPI_MCA_", "PMIX_MCA_")


@dataclass
class _MpiRun:
    job_id: int
    req: LaunchRequest  # the first launch: spec, secret, job_dir
    hosts: list[str]
    tag: str
    tmp: Path
    ending: bool = False
    restarts: int = 0
    checks: set[asyncio.Task[None]] = field(default_factory=set)

    @property
    def mode(self) -> str:
        return self.req.spec.mpi_settings.malleability

    @property
    def restart_file(self) -> Path:
        return self.req.job_dir / "mpi-restart"

    @property
    def record_file(self) -> Path:
        return self.req.job_dir / "mpi-run.json"

    def save(self) -> None:
        """What a restarted daemon needs to take the run over (`MpiLauncher.adopt`); beside
        the journal, which holds the same secret."""
        r = self.req
        data = {"tag": self.tag, "tmp": str(self.tmp), "hosts": self.hosts, "restarts": self.restarts,
                "spec": r.spec.model_dump(mode="json"), "app_address": r.app_address, "secret": r.job_secret}
        tmp = self.record_file.with_suffix(".tmp")
        try:
            tmp.write_text(json.dumps(data))
            tmp.replace(self.record_file)
        except OSError as exc:
            log.error("job %d: cannot record the run in %s (%s): a restarted daemon could not take it over",
                      self.job_id, self.record_file, exc.strerror or exc)

    @classmethod
    def load(cls, job_id: int, job_dir: Path) -> _MpiRun | None:
        try:
            data = json.loads((job_dir / "mpi-run.json").read_text())
            spec = JobSpec.model_validate(data["spec"])
            hosts = [str(h) for h in data["hosts"]]
            req = LaunchRequest(job_id, spec, tuple(hosts[:1]), tuple(hosts), str(data["app_address"]),
                                str(data["secret"]), job_dir)
            return cls(job_id, req, hosts, str(data["tag"]), Path(data["tmp"]), restarts=int(data["restarts"]))
        except FileNotFoundError:
            return None
        except (OSError, ValueError, KeyError, TypeError) as exc:
            log.error("job %d: cannot read %s/mpi-run.json (%s): its ranks are not taken over", job_id, job_dir, exc)
            return None


class MpiLauncher:
    """The daemon's launcher: MPI jobs here, every other job to the host launcher."""

    def __init__(
        self,
        make_base: Callable[[ExitCallback, HostsGoneCallback], Launcher],
        on_exit: ExitCallback,
        on_hosts_gone: HostsGoneCallback,
        kill_wait: float,
        cluster: bool,
        ssh_config: Path | None = None,
        remote_python: str = sys.executable,
    ) -> None:
        self.on_exit = on_exit
        self.on_hosts_gone = on_hosts_gone
        self.kill_wait = kill_wait
        self.cluster = cluster
        self.ssh_config = ssh_config or _env_path("ELASTIC_SSH_CONFIG")
        self.remote_python = remote_python
        self.nodes: list[str] = []
        self.runs: dict[int, _MpiRun] = {}
        # Host -> ranks found there at the last check after a grow (for status and tests).
        self.verified: dict[int, dict[str, int]] = {}
        # Host -> tags of runs whose processes there could not be verified gone (the node did
        # not answer): ended once it answers again, before it is used (the host launcher's
        # clear hooks). Ranks on a job's other hosts carry the run's tag, not the host
        # launcher's, so its own sweep of a node reached again never finds them.
        self.leftovers: dict[str, set[str]] = {}
        self.base = make_base(self._base_exit, self._base_hosts_gone)
        base: Any = self.base
        if isinstance(getattr(base, "clear_hooks", None), list):  # the SSH launcher's
            base.clear_hooks.append(self._end_leftovers)
            base.pending_jobs.append(self._leftover_jobs)
            base.running_elsewhere = lambda: list(self.runs)
        # What the host launcher's sweeps find a run's ranks by, on any host, once the run is
        # over (a node reached again, a restarted daemon): ELASTIC_MPI_OWNER=TAG/JOB.
        self.owner = str(getattr(self.base, "tag", "") or "")

    def __getattr__(self, name: str) -> Any:
        # What only some host launchers have (node_states, pgids) comes from the base.
        if name == "base":
            raise AttributeError(name)
        return getattr(self.base, name)

    async def start(self, hosts: list[str]) -> None:
        self.nodes = list(hosts)
        start = getattr(self.base, "start", None)
        if start is not None:
            await start(hosts)

    async def add_hosts(self, hosts: list[str], slurm_job: str | None = None) -> list[str]:
        add = getattr(self.base, "add_hosts", None)
        added: list[str] = list(hosts) if add is None else await add(hosts, slurm_job)
        self.nodes += [h for h in added if h not in self.nodes]
        return added

    async def remove_hosts(self, hosts: list[str]) -> None:
        self.nodes = [n for n in self.nodes if n not in hosts]
        remove = getattr(self.base, "remove_hosts", None)
        if remove is not None:
            await remove(hosts)

    async def close(self) -> None:
        for run in self.runs.values():
            for t in run.checks:
                t.cancel()
        await self.base.close()

    async def adopt(self, job_id: int, hosts: tuple[str, ...], job_dir: Path) -> list[str]:
        """After a daemon restart: mpirun found again by the host launcher (on the job's
        first host) and the run's record is the whole job, its ranks on every host."""
        adopt = getattr(self.base, "adopt", None)
        if adopt is None:
            return []
        found: list[str] = await adopt(job_id, hosts, job_dir)
        run = _MpiRun.load(job_id, job_dir)
        if run is None or not found:
            return found
        self.runs[job_id] = run
        return [h for h in hosts if h in run.hosts]

    # ---- launch ----------------------------------------------------------------------------
    async def launch(self, req: LaunchRequest) -> None:
        if req.spec.launcher != "mpi":
            await self.base.launch(req)
            return
        if req.joining:
            self._grown(req)
            return
        if shutil.which("mpirun", path=_job_path(req)) is None:
            raise LaunchError("mpirun not found on PATH: install Open MPI (Debian: openmpi-bin libopenmpi-dev)")
        tag = f"{req.job_id}-{secrets.token_hex(4)}"
        tmp = Path("/tmp") / f"elastic-mpi-{os.getuid()}" / tag
        run = _MpiRun(req.job_id, req, list(req.all_hosts), tag, tmp)
        self.runs[req.job_id] = run
        try:
            await self._start_mpirun(run)
        except BaseException:
            self.runs.pop(req.job_id, None)
            shutil.rmtree(tmp, ignore_errors=True)
            raise

    async def _start_mpirun(self, run: _MpiRun) -> None:
        req = run.req
        job_dir = req.job_dir
        job_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        run.tmp.mkdir(parents=True, exist_ok=True, mode=0o700)
        settings = req.spec.mpi_settings
        hostfile = job_dir / "mpi-hostfile"
        listed = list(run.hosts)
        if run.mode == "spawn" and req.spec.resolved_kind.value == "malleable":
            # Idle orteds on the other nodes: where a later Spawn may place ranks.
            listed += [n for n in self.nodes if n not in run.hosts]
        hostfile.write_text("".join(f"{h} slots={settings.ranks_per_node}\n" for h in listed))
        checkpoint = job_dir / "checkpoint"
        checkpoint.mkdir(exist_ok=True)
        run.restart_file.unlink(missing_ok=True)
        env = {
            **req.spec.env,
            **({"ELASTIC_MPI_OWNER": f"{self.owner}/{run.job_id}"} if self.cluster and self.owner else {}),
            "ELASTIC_MPI_TAG": run.tag,
            "ELASTIC_MPI_MODE": run.mode,
            "ELASTIC_MPI_RANKS_PER_NODE": str(settings.ranks_per_node),
            "ELASTIC_MPI_RESTART_FILE": str(run.restart_file),
            "ELASTIC_MPI_CHECKPOINT_DIR": str(checkpoint),
            "ELASTIC_MPI_RESTARTS": str(run.restarts),
            "ELASTIC_MPI_TMP": str(run.tmp),
        }
        argv = self._mpirun_argv(run, hostfile, env)
        spec = req.spec.model_copy(update={"command": argv, "env": env})
        all_hosts = tuple(run.hosts)
        run.save()
        await self.base.launch(replace(req, spec=spec, hosts=all_hosts[:1], all_hosts=all_hosts, joining=False))
        log.info("job %d: mpirun (%s) on %s: %d ranks on %s", run.job_id, run.tag, all_hosts[0],
                 len(all_hosts) * settings.ranks_per_node, ",".join(all_hosts))

    def _mpirun_argv(self, run: _MpiRun, hostfile: Path, env: dict[str, str]) -> list[str]:
        settings = run.req.spec.mpi_settings
        argv = ["mpirun", "--hostfile", str(hostfile), "-np", str(len(run.hosts) * settings.ranks_per_node),
                "--oversubscribe", "--bind-to", "none"]
        if os.geteuid() == 0:
            argv.append("--allow-run-as-root")
        if self.cluster:
            ssh = "ssh" if self.ssh_config is None else f"ssh -F {shlex.quote(str(self.ssh_config))}"
            # Beside the hostfile, in the job's folder: where mpirun's node reads it too.
            agent = hostfile.parent / "mpi-agent"
            agent.write_text(CLUSTER_AGENT.replace("{ssh}", ssh))
            agent.chmod(0o700)
            argv += ["--mca", "plm_rsh_agent", str(agent)]
            # Over ssh, remote ranks get only what mpirun forwards.
            names = set(env) | set(run.req.spec.env) | {k for k in os.environ if k.startswith(FORWARDED_PREFIXES)}
            names |= {"PATH", "ELASTIC_JOB_ID", "ELASTIC_JOB_NAME", "ELASTIC_JOB_HOSTS", "ELASTIC_JOB_NUM_NODES",
                      "ELASTIC_APP_ADDRESS", "ELASTIC_JOB_SECRET", "ELASTIC_HOSTFILE"}
            for name in sorted(names - {"ELASTIC_HOST", "ELASTIC_NODE_INDEX", "ELASTIC_MPI_TMP"}):
                argv += ["-x", name]
        else:
            agent = run.tmp / "agent"
            agent.write_text(LOCAL_AGENT)
            agent.chmod(0o700)
            # Virtual hosts share this machine's cores: ranks waiting in MPI must yield.
            argv += ["--mca", "plm_rsh_agent", str(agent), "--mca", "mpi_yield_when_idle", "1",
                     "--mca", "btl_tcp_if_include", "lo", "--mca", "oob_tcp_if_include", "lo"]
        return [*argv, *settings.mpirun_args, *run.req.spec.command]

    def _grown(self, req: LaunchRequest) -> None:
        """A grow: spawn mode starts nothing (the application spawns), restart mode waits
        for the application to exit for a restart; both take the new host list."""
        run = self.runs.get(req.job_id)
        if run is None:
            raise LaunchError(f"job {req.job_id} has no running mpirun to grow")
        run.hosts = list(req.all_hosts)
        run.save()
        if run.mode == "spawn":
            task = asyncio.ensure_future(self._verify_grow(run, list(req.hosts)))
            run.checks.add(task)
            task.add_done_callback(run.checks.discard)

    async def _verify_grow(self, run: _MpiRun, new: list[str], timeout: float = 60.0) -> None:
        want = run.req.spec.mpi_settings.ranks_per_node
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            found = await self.ranks(run, run.hosts + [n for n in self.nodes if n not in run.hosts])
            # The grow's hosts may have left the run meanwhile (a node lost under the open
            # order voids it): they are counted all the same, and the check ends with them.
            counts = {h: len(found.get(h, [])) for h in dict.fromkeys(run.hosts + new)}
            stray = sorted(h for h in found if h not in run.hosts and found[h])
            if (all(counts[h] >= want for h in new) or loop.time() > deadline or run.ending
                    or any(h not in run.hosts for h in new)):
                break
            await asyncio.sleep(0.2)
        self.verified[run.job_id] = counts
        missing = [h for h in new if counts[h] < want]
        if missing or stray:
            log.warning("job %d: after the grow, ranks per host %s; missing on %s; outside the job on %s",
                        run.job_id, counts, ",".join(missing) or "-", ",".join(stray) or "-")
        else:
            log.info("job %d: verified MPI ranks on new hosts %s (ranks per host %s)",
                     run.job_id, ",".join(new), counts)

    # ---- where the ranks are --------------------------------------------------------------
    async def ranks(self, run: _MpiRun, hosts: list[str]) -> dict[str, list[int]]:
        """Pids of the run's ranks on each of `hosts` (none on a host that did not answer)."""
        found, _ = await self._scan(run.tag, hosts)
        return found

    async def _scan(self, tag: str, hosts: list[str]) -> tuple[dict[str, list[int]], list[str]]:
        """Pids of the ranks of run TAG on each host that answered, and the hosts that did not."""
        if not self.cluster:
            return await asyncio.to_thread(_local_ranks, tag, set(hosts)), []
        # A node the host launcher has down is not tried (each try waits the connect timeout).
        down = self._down()
        tried = [h for h in hosts if h not in down]
        results = await asyncio.gather(*(self._remote_scan(tag, h, 0) for h in tried))
        return ({h: pids for h, pids in zip(tried, results, strict=True) if pids is not None},
                [h for h in hosts if h in down] + [h for h, pids in zip(tried, results, strict=True) if pids is None])

    def _down(self) -> set[str]:
        states = getattr(self.base, "node_states", None)
        return set() if states is None else {h for h, up in states().items() if not up}

    async def _signal(self, run: _MpiRun, hosts: list[str], sig: int, ranks_only: bool) -> list[str]:
        """Signal the run's processes on `hosts`; the hosts that could not be reached."""
        if not self.cluster:
            await asyncio.to_thread(_local_signal, run.tag, set(hosts), sig, ranks_only)
            return []
        down = self._down()
        tried = [h for h in hosts if h not in down]
        results = await asyncio.gather(*(self._remote_scan(run.tag, h, sig) for h in tried))
        return [h for h in hosts if h in down] + [h for h, r in zip(tried, results, strict=True) if r is None]

    async def _remote_scan(self, tag: str, host: str, sig: int) -> list[int] | None:
        """Ranks of run TAG on HOST (or signal every process of it there); None when the node
        could not be reached or the scan failed: nothing is known of it then."""
        argv = ["ssh", *(["-F", str(self.ssh_config)] if self.ssh_config else []),
                "-o", "BatchMode=yes", "-o", "ConnectTimeout=10", host,
                shlex.join([self.remote_python, "-I", "-S", "-c", REMOTE_SCAN, tag, str(sig)])]
        proc = await asyncio.create_subprocess_exec(*argv, stdin=asyncio.subprocess.DEVNULL,
                                                    stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        try:
            out, err = await asyncio.wait_for(proc.communicate(), 30)
        except TimeoutError:
            proc.kill()
            await proc.wait()
            log.warning("MPI rank scan on %s timed out", host)
            return None
        if proc.returncode != 0:
            log.warning("MPI rank scan on %s failed: %s", host, err.decode(errors="replace").strip()[-200:])
            return None
        return [int(x) for x in out.split()]

    async def _clear(self, run: _MpiRun, hosts: list[str], wait: float, ranks_only: bool = True,
                     term: bool = True, verify: Collection[str] | None = None) -> bool:
        """Give the ranks on `hosts` `wait` seconds to leave, end what stays; True if none is left
        and every host of `verify` (default: all of `hosts`; those the run's ranks may be on)
        answered. Those that did not, or kept ranks through SIGKILL, are kept down until what
        the run left there is ended (`_unclean`).

        With `term` False what stays is killed without a SIGTERM first: mpirun passed its own
        on to them, and a second one is where a checkpointing application gives up its
        checkpoint and quits at once."""
        loop = asyncio.get_running_loop()
        stages = ((0, wait), (signal.SIGTERM, self.kill_wait), (signal.SIGKILL, 5.0)) if term \
            else ((0, wait), (signal.SIGKILL, 5.0))
        left: dict[str, list[int]] = {}
        unreached: list[str] = []
        for sig, patience in stages:
            if sig:
                await self._signal(run, hosts, sig, ranks_only)
            deadline = loop.time() + patience
            while True:
                found, unreached = await self._scan(run.tag, hosts)
                unreached = [h for h in unreached if verify is None or h in verify]
                left = {h: p for h, p in found.items() if p}
                if not left and not unreached:
                    return True
                # Only nodes known down left to verify: waiting cannot help, they wait for the node.
                only_down = not left and set(unreached) <= self._down()
                if only_down or loop.time() > deadline:
                    break
                if sig == signal.SIGKILL and left:
                    # A node that did not answer the first SIGKILL may answer now.
                    await self._signal(run, list(left), sig, ranks_only)
                await asyncio.sleep(0.1)
            if only_down:
                break
            if sig == 0 and wait > 0:
                log.warning("job %d: ranks still on %s after %.1f s: %s%s; ending them",
                            run.job_id, "released hosts" if term else "its hosts after mpirun's SIGTERM", wait, left,
                            f" (not reached: {','.join(unreached)})" if unreached else "")
        if left:
            log.error("job %d: ranks left on %s after SIGKILL", run.job_id, left)
        for h in [*left, *unreached]:
            self._unclean(run, h, "ranks left after SIGKILL" if h in left else "the node did not answer")
        return False

    def _unclean(self, run: _MpiRun, host: str, why: str) -> None:
        """Processes of RUN on HOST could not be verified gone: the node is not used again
        until they are (the host launcher keeps it down and calls `_end_leftovers` once the
        node answers)."""
        self.leftovers.setdefault(host, set()).add(run.tag)
        log.warning("job %d: cannot verify that the processes of its MPI run on %s are gone (%s); the node is "
                    "kept down until they are ended there", run.job_id, host, why)
        cannot_verify = getattr(self.base, "cannot_verify", None)
        if cannot_verify is not None:
            cannot_verify(host, f"cannot verify that the MPI ranks of job {run.job_id} are gone ({why})")

    def _leftover_jobs(self, host: str) -> list[int]:
        return sorted({int(t.split("-", 1)[0]) for t in self.leftovers.get(host, set())})

    async def _end_leftovers(self, host: str) -> bool:
        """On a node reached again: end what runs recorded as unverified there left (SIGTERM,
        SIGKILL after the kill-wait); whether none is left."""
        loop = asyncio.get_running_loop()
        for tag in sorted(self.leftovers.get(host, set())):
            if any(r.tag == tag and host in r.hosts for r in self.runs.values()):
                # The run holds the node again (it cannot while the node is down; kept safe).
                self.leftovers[host].discard(tag)
                continue
            for sig, patience in ((signal.SIGTERM, self.kill_wait), (signal.SIGKILL, 5.0)):
                if await self._remote_scan(tag, host, sig) is None:
                    return False
                deadline = loop.time() + patience
                while (pids := await self._remote_scan(tag, host, 0)) and loop.time() < deadline:
                    await asyncio.sleep(0.1)
                if pids is None:
                    return False
                if not pids:
                    break
            else:
                log.error("node %s: processes of MPI run %s survive SIGKILL; keeping it down", host, tag)
                return False
            log.info("node %s: ended what MPI run %s left there", host, tag)
            self.leftovers[host].discard(tag)
        self.leftovers.pop(host, None)
        return True

    # ---- shrink, end -----------------------------------------------------------------------
    async def reclaim(self, job_id: int, hosts: tuple[str, ...], grace: float) -> None:
        run = self.runs.get(job_id)
        if run is None:
            await self.base.reclaim(job_id, hosts, grace)
            return
        run.hosts = [h for h in run.hosts if h not in hosts]  # before any await: a restart must not use them
        run.save()
        # The application leaves the hosts itself (spawn: its ranks disconnect and exit;
        # restart: the whole run exits): wait for that before ending anything.
        if await self._clear(run, list(hosts), max(grace, 10.0)):
            log.info("job %d: verified no MPI rank left on %s", job_id, ",".join(hosts))
        await call_back(self.on_hosts_gone, job_id, list(hosts))

    async def terminate(self, job_id: int, hosts: tuple[str, ...], passes_on: bool = False) -> None:
        run = self.runs.get(job_id)
        if run is None:
            await self.base.terminate(job_id, hosts, passes_on)
            return
        run.ending = True
        # mpirun passes its SIGTERM on to every rank, those beside it included.
        await self.base.terminate(job_id, tuple(run.hosts[:1]), passes_on=True)
        # A killed mpirun may leave ranks spinning: every process of the run still there once
        # the ranks had kill_wait to act on the SIGTERM mpirun passed on to them is killed.
        await self._clear(run, self._all_hosts(run), self.kill_wait, ranks_only=False, term=False,
                          verify=list(run.hosts))

    def _all_hosts(self, run: _MpiRun) -> list[str]:
        return run.hosts + [n for n in self.nodes if n not in run.hosts]

    async def _base_hosts_gone(self, job_id: int, hosts: list[str]) -> None:
        await call_back(self.on_hosts_gone, job_id, hosts)

    async def _base_exit(self, job_id: int, code: int | None, sig: int | None, ended_at: float | None) -> None:
        run = self.runs.get(job_id)
        if run is None:
            await call_back(self.on_exit, job_id, code, sig, ended_at)
            return
        # Nothing of the run may outlive mpirun (orteds, ranks of a killed run). Where its
        # ranks may be and the node did not answer, that waits for the node.
        unreached = await self._signal(run, self._all_hosts(run), signal.SIGKILL, ranks_only=False)
        for h in unreached:
            if h in run.hosts:
                self._unclean(run, h, "the node did not answer")
        if not run.ending and code == 0 and not sig and run.restart_file.exists():
            run.restarts += 1
            log.info("job %d: restarting mpirun on %s (restart %d)", job_id, ",".join(run.hosts), run.restarts)
            try:
                await self._start_mpirun(run)
                return
            except LaunchError as exc:
                log.warning("job %d: restart failed: %s", job_id, exc)
                code = 1
        self.runs.pop(job_id, None)
        for t in run.checks:
            t.cancel()
        shutil.rmtree(run.tmp, ignore_errors=True)
        await call_back(self.on_exit, job_id, code, sig, ended_at)


def _env_path(name: str) -> Path | None:
    v = os.environ.get(name)
    return Path(v) if v else None


def _job_path(req: LaunchRequest) -> str:
    return req.spec.env.get("PATH") or os.environ.get("PATH", "")


def _tagged(tag: str) -> list[tuple[psutil.Process, dict[str, str]]]:
    found = []
    for p in psutil.process_iter():
        try:
            env = p.environ()
        except (psutil.Error, OSError):
            continue
        if env.get("ELASTIC_MPI_TAG") == tag and p.status() != psutil.STATUS_ZOMBIE:
            found.append((p, env))
    return found


def _local_ranks(tag: str, hosts: set[str]) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {h: [] for h in hosts}
    for p, env in _tagged(tag):
        host = env.get("ELASTIC_MPI_NODE")
        if host in hosts and "OMPI_COMM_WORLD_RANK" in env:
            out[host].append(p.pid)
    return out


def _local_signal(tag: str, hosts: set[str], sig: int, ranks_only: bool) -> None:
    for p, env in _tagged(tag):
        if env.get("ELASTIC_MPI_NODE") not in hosts or (ranks_only and "OMPI_COMM_WORLD_RANK" not in env):
            continue
        try:
            p.send_signal(sig)
        except psutil.Error:
            pass
