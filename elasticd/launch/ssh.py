"""Cluster mode: a job's processes on the allocation's nodes, started over SSH with fabric.

Each node gets one SSH connection, opened at daemon start and reused for every call, with
keepalive on. fabric/paramiko are synchronous and a connection must be used from one
thread at a time, so each node has a one-thread executor; the event loop only awaits.

On the node, a small agent (remote_agent.py, standard library only, sent with each call)
starts the job's command as the leader of a new session -- its pid is the process-group
id the daemon records -- under a monitor in a session of its own that records the exit
status in a node-local file. Neither is tied to the SSH connection: a dropped connection
leaves the job running. A long-lived `watch` channel per node reports those exit
statuses as they appear, and a heartbeat; a node silent for `node_timeout` seconds, or
one a call cannot reach, is reported down (the daemon then ends or shrinks its jobs) and
retried every `retry_interval` seconds. Before a node that comes back is used again, the
process groups of its lost jobs are ended there.

The status files live in a directory named after the state directory's tag, and a token
starts with its job's id: a daemon restarted after kill -9 lists a job's records on each
node (`procs`) and takes the processes over (`adopt`) — watched, ended and reported as if
it had started them.

Ending processes (shrink, cancel, time limit) is one `end` call per node: wait for the
grace period, SIGTERM to -PGID, SIGKILL after the kill-wait, then a /proc scan on that
node verifies that no member of the groups is left; only then are hosts reported gone.

Job output files and the job's hostfile are written at the same paths as in local mode,
so they must be on a file system the nodes share with the daemon (home or a project
directory on a real cluster; on the single-machine virtual cluster every namespace sees
the one file system).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import math
import os
import secrets
import shlex
import socket
import sys
import threading
import time
from collections.abc import Awaitable, Callable, Collection, Coroutine
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import paramiko

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

log = logging.getLogger("elasticd.launch.ssh")

# The agent's source goes down each channel's stdin; this bootstrap reads and runs it.
_BOOTSTRAP = "import sys;n=int(sys.argv.pop(1));exec(sys.stdin.buffer.read(n))"
_AGENT = Path(__file__).with_name("remote_agent.py").read_bytes()

# Variables that describe the daemon's own host or terminal, not the job's.
_NOT_FORWARDED = frozenset(
    {"HOSTNAME", "PWD", "OLDPWD", "SHLVL", "_", "SSH_CLIENT", "SSH_CONNECTION", "SSH_TTY",
     "SSH_AUTH_SOCK", "DISPLAY", "XAUTHORITY", "TMUX", "STY"}
)

# What paramiko and sockets raise when a node cannot be reached or a channel breaks.
_SSH_FAILURES = (OSError, EOFError, paramiko.SSHException)

# The exit code reported for a process whose exit status could not be learnt.
UNKNOWN_EXIT = 255

# Exit records kept for tokens nobody holds (a restarted daemon's, until it adopts them).
_MAX_UNCLAIMED = 10_000

HostDownCallback = Callable[[str, str], None]
HostUpCallback = Callable[[str], None]


@dataclass(frozen=True)
class SSHOptions:
    ssh_config: Path | None = None  # None: ~/.ssh/config and /etc/ssh/ssh_config, as ssh
    connect_timeout: float = 10.0
    node_timeout: float = 10.0  # silence after which a node is declared down
    heartbeat: float = 1.0
    retry_interval: float = 10.0
    # The nodes share the daemon's file system, so its Python is at the same path there.
    remote_python: str = sys.executable
    call_timeout: float = 30.0


class HostUnreachable(Exception):
    """The node could not be reached (connect, channel or read failed or timed out)."""


class RemoteError(Exception):
    """The node answered, but the agent failed (no Python there, say)."""


class _HostLink:
    """One node's SSH connection and watch channel. Methods without a leading underscore
    run in the node's own executor thread; `abort` may run in any thread."""

    def __init__(self, name: str, options: SSHOptions, fabric_config: Any, status_dir: str,
                 post: Callable[..., None]) -> None:
        self.name = name
        self.options = options
        self.fabric_config = fabric_config
        self.status_dir = status_dir
        self.post = post  # thread-safe: schedule a callback on the event loop
        self.executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"ssh-{name}")
        self._lock = threading.Lock()
        self._conn: Any = None
        self.generation = 0
        # Loop-side state.
        self.up = False
        self.last_heard = 0.0
        self.orphans: dict[str, int] = {}  # token -> pgid of processes lost with the node
        # Processes of an earlier run may be left here and could not be verified gone: the
        # node is not used until a sweep succeeds.
        self.needs_sweep = False
        self.retry_task: asyncio.Task[None] | None = None
        # Given back with the allocation (elasticd.daemon.allocation_resize): not watched,
        # not retried, until it is added again.
        self.retired = False

    # ---- executor thread ----------------------------------------------------------------
    def connect(self, timeout: float | None = None) -> None:
        """Open the connection if it is not open, and a new watch channel on it; raises
        HostUnreachable. A live connection is kept: calls running on it go on. `timeout`
        (default the connect timeout) bounds the connect: this thread cannot be interrupted."""
        import fabric

        timeout = timeout or self.options.connect_timeout
        with self._lock:
            conn = self._conn
        fresh = conn is None or conn.transport is None or not conn.transport.is_active()
        if fresh:
            self.abort()
            conn = fabric.Connection(self.name, config=self.fabric_config,
                                     connect_timeout=max(1, math.ceil(timeout)))
            if conn.ssh_config.get("stricthostkeychecking", "yes").lower() != "no":
                # fabric trusts any key; with strict checking wanted, known keys must match.
                with contextlib.suppress(OSError):
                    conn.client.load_system_host_keys()
        try:
            if fresh:
                conn.open()
                conn.transport.set_keepalive(15)
            chan = conn.transport.open_session(timeout=timeout)
            chan.exec_command(self._command("watch", self.status_dir, str(self.options.heartbeat)))
            chan.sendall(_AGENT)
        except _SSH_FAILURES as exc:
            if fresh:
                _close_quietly(conn)
            else:
                self.abort()
            raise HostUnreachable(_describe(exc)) from None
        with self._lock:
            self._conn = conn
            self.generation += 1  # the previous watch channel's end is no news
            gen = self.generation
        threading.Thread(target=self._read_watch, args=(chan, gen), daemon=True,
                         name=f"ssh-watch-{self.name}").start()

    def exec(self, role: str, args: list[str], stdin: bytes, timeout: float) -> list[str]:
        """Run the agent in ROLE; its stdout lines. Reconnects once if the link dropped."""
        with self._lock:
            conn = self._conn
        if conn is None or conn.transport is None or not conn.transport.is_active():
            self.connect()
            with self._lock:
                conn = self._conn
        chan = None
        try:
            chan = conn.transport.open_session(timeout=timeout)
            chan.settimeout(timeout)
            chan.exec_command(self._command(role, *args))
            chan.sendall(_AGENT + stdin)
            chan.shutdown_write()
            out = bytearray()
            deadline = time.monotonic() + timeout
            while True:
                chunk = chan.recv(65536)
                if not chunk:
                    break
                out += chunk
                if time.monotonic() > deadline:
                    raise TimeoutError(f"no end of output within {timeout:.0f} s")
            if not chan.status_event.wait(max(0.1, deadline - time.monotonic())):
                raise TimeoutError("no exit status")
            status = chan.exit_status
            err = bytearray()
            while chan.recv_stderr_ready():
                err += chan.recv_stderr(65536)
        except _SSH_FAILURES as exc:
            raise HostUnreachable(_describe(exc)) from None
        finally:
            if chan is not None:
                chan.close()
        if status != 0:
            tail = err.decode(errors="replace").strip().splitlines()[-3:]
            raise RemoteError(f"agent exited with status {status}: {' | '.join(tail) or 'no message'}")
        return out.decode(errors="replace").splitlines()

    def abort(self) -> None:
        """Drop the connection; a call blocked on it fails at once."""
        with self._lock:
            conn, self._conn = self._conn, None
            self.generation += 1
        if conn is not None:
            _close_quietly(conn)

    def _command(self, role: str, *args: str) -> str:
        words = [self.options.remote_python, "-I", "-S", "-c", _BOOTSTRAP, str(len(_AGENT)), role, *args]
        return " ".join(shlex.quote(w) for w in words)

    def _read_watch(self, chan: Any, gen: int) -> None:
        buf = b""
        try:
            chan.settimeout(None)
            while True:
                chunk = chan.recv(65536)
                if not chunk:
                    break
                buf += chunk
                *lines, buf = buf.split(b"\n")
                for line in lines:
                    self.post(self.name, gen, line.decode(errors="replace"))
        except _SSH_FAILURES as exc:
            log.debug("%s: watch channel: %s", self.name, _describe(exc))
        self.post(self.name, gen, None)


@dataclass
class _RemoteProc:
    host: str
    token: str
    pgid: int
    finished: bool = False
    code: int | None = None
    signal: int | None = None
    lost: bool = False  # its node went down: its fate is unknown
    released: bool = False  # reclaimed by a shrink: its exit does not count for the job
    joining: bool = False  # started by a grow the application has not confirmed yet


@dataclass
class _SSHJob:
    job_id: int
    procs: dict[str, _RemoteProc] = field(default_factory=dict)
    starting: int = 0
    done: bool = False
    # Ended (cancel, limit, failure) while some of its processes were still being started:
    # those are ended as soon as they exist, or they would run on untracked.
    terminating: bool = False
    # Started by a launch still waiting for its other hosts (a node that does not answer):
    # by host, ended at once by a terminate, not once the whole launch is settled (a stop
    # does not wait for that, and left them running).
    early: dict[str, _RemoteProc] = field(default_factory=dict)


class SSHLauncher:
    def __init__(
        self,
        on_exit: ExitCallback,
        on_hosts_gone: HostsGoneCallback,
        on_host_down: HostDownCallback,
        on_host_up: HostUpCallback,
        kill_wait: float = defaults.KILL_WAIT,
        options: SSHOptions | None = None,
        tag: str = "",
    ) -> None:
        self.on_exit = on_exit
        # Told (job, host, code, signal) when a grow's process exits before the application
        # confirmed the grow (the daemon sets it: the grow is then void).
        self.on_join_failed: Callable[[int, str, int, int], object] | None = None
        # What every job process carries (ELASTIC_TAG=tag/job/host) to be found on its node
        # after a daemon restart, when nothing else tracks it (elasticd.launch.contain).
        self.tag = tag
        self.on_hosts_gone = on_hosts_gone
        self.on_host_down = on_host_down
        self.on_host_up = on_host_up
        self.kill_wait = kill_wait
        self.options = options or SSHOptions()
        # Node-local status files: per state directory (its tag), so a daemon restarted on
        # it finds the records of the processes it started before (`adopt`), and two
        # daemons sharing a node (or all the virtual nodes sharing one /tmp) never mix.
        self.run_dir = (f"/tmp/elastic-{os.getuid()}-{tag}" if tag
                        else f"/tmp/elastic-{os.getuid()}-{os.getpid()}-{secrets.token_hex(4)}")
        # Tokens name a job first (`procs` finds a job's records by it) and this run next,
        # so a restarted daemon never reuses an earlier run's token.
        self._run_id = secrets.token_hex(3)
        # Exits reported for tokens nobody holds yet: a restarted daemon's watch channels
        # report the records of processes it has not taken over yet (`adopt` claims them).
        self._unclaimed: dict[str, tuple[str, str]] = {}
        self._links: dict[str, _HostLink] = {}
        self._fabric_config: Any = None
        self._jobs: dict[int, _SSHJob] = {}
        self._starts = StartsInFlight()
        self._tokens: dict[str, tuple[int, str]] = {}
        self._spawning: set[str] = set()
        self._early_exits: dict[str, tuple[int | None, int | None]] = {}
        self._seq = 0
        self._tasks: set[asyncio.Task[None]] = set()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._closing = False
        # What else must be ended on a node reached again before it is used (the MPI layer:
        # ranks, found by their run's tag, that it could not verify gone while the node was
        # out of reach); each says whether that is done.
        self.clear_hooks: list[Callable[[str], Awaitable[bool]]] = []
        # The jobs whose processes those hooks are still to end on a node (named by a stop
        # that cannot reach it), and the jobs a sweep keeps besides those with a process of
        # this launcher on the node: the MPI layer's running runs, whose ranks carry
        # ELASTIC_MPI_OWNER=tag/job on whatever host they run (swept once the run is over).
        self.pending_jobs: list[Callable[[str], Collection[int]]] = []
        self.running_elsewhere: Callable[[], Collection[int]] = tuple

    # ---- life cycle ---------------------------------------------------------------------
    async def start(self, hosts: list[str]) -> None:
        """Connect to every node at once; those that cannot be reached start out down."""
        import fabric

        self._loop = asyncio.get_running_loop()
        cfg = self.options.ssh_config
        self._fabric_config = fabric.Config(runtime_ssh_path=str(cfg)) if cfg else fabric.Config()
        for h in hosts:
            self._links[h] = _HostLink(h, self.options, self._fabric_config, f"{self.run_dir}/{h}", self._post)
        results = await asyncio.gather(*(self._connect(h) for h in hosts), return_exceptions=True)
        for h, r in zip(hosts, results):
            if isinstance(r, BaseException):
                self._host_failed(h, f"cannot connect: {r}")
        up = [h for h in hosts if self._links[h].up]
        log.info("ssh: %d of %d nodes reachable%s", len(up), len(hosts),
                 "" if len(up) == len(hosts) else f"; down: {','.join(h for h in hosts if h not in up)}")
        self._spawn(self._watch_heartbeats())

    async def close(self) -> None:
        self._closing = True
        for task in list(self._tasks):
            task.cancel()
        for link in self._links.values():
            if link.retry_task is not None:
                link.retry_task.cancel()
        # The nodes' records of the processes are what a restarted daemon takes them over
        # by: those of a job not seen ending stay; the others go, and the directory with them.
        up = [h for h, link in self._links.items() if link.up]
        await asyncio.gather(*(self._cleanup(h, 5) for h in up), return_exceptions=True)
        loop = asyncio.get_running_loop()
        await asyncio.gather(*(loop.run_in_executor(None, link.abort) for link in self._links.values()))
        for link in self._links.values():
            link.executor.shutdown(wait=False, cancel_futures=True)

    async def add_hosts(self, hosts: list[str], slurm_job: str | None = None) -> list[str]:
        """Nodes joining (the allocation grew): connected and watched; the ones reachable."""
        for h in hosts:
            link = self._links.get(h)
            if link is None:
                self._links[h] = _HostLink(h, self.options, self._fabric_config, f"{self.run_dir}/{h}", self._post)
            else:
                link.retired = False
        results = await asyncio.gather(*(self._connect(h) for h in hosts), return_exceptions=True)
        added = []
        for h, r in zip(hosts, results):
            if isinstance(r, BaseException):
                log.warning("node %s cannot join: %s", h, r)
                self._links[h].retired = True
            else:
                added.append(h)
        return added

    async def remove_hosts(self, hosts: list[str]) -> None:
        """Nodes leaving (given back): no job runs there; their link and records go."""
        loop = asyncio.get_running_loop()
        for h in hosts:
            link = self._links.get(h)
            if link is None:
                continue
            link.retired = True
            if link.retry_task is not None:
                link.retry_task.cancel()
                link.retry_task = None
            if link.up:
                with contextlib.suppress(HostUnreachable, RemoteError):
                    await self._cleanup(h, 5)
            link.up = False
            await loop.run_in_executor(None, link.abort)

    def node_states(self) -> dict[str, bool]:
        return {h: link.up for h, link in self._links.items()}

    def pgids(self, job_id: int) -> dict[str, int]:
        job = self._jobs.get(job_id)
        return {} if job is None else {h: p.pgid for h, p in job.procs.items()}

    # ---- launching ----------------------------------------------------------------------
    async def launch(self, req: LaunchRequest) -> None:
        """Start the command on req.hosts: a new job, or new hosts of a running one."""
        # Recorded before the first await: a reclaim of these hosts from now on waits for
        # this launch, and ends what it started there (base.StartsInFlight).
        with self._starts.launching(req.job_id, req.hosts) as start:
            await self._launch(req, start)

    async def _launch(self, req: LaunchRequest, start: Start) -> None:
        hostfile = write_hostfile(req)
        workdir = Path(req.spec.working_dir or Path.home())
        job = self._jobs.get(req.job_id)
        if req.joining and (job is None or job.done):
            # A job over, its exit on its way, too: processes started for it now would run on
            # untracked, on nodes about to be freed.
            raise LaunchError(f"job {req.job_id} has no running processes to join")
        if job is None:
            job = self._jobs[req.job_id] = _SSHJob(req.job_id)
        down = [h for h in req.hosts if not self._links[h].up]
        if down:
            if not job.procs:
                self._jobs.pop(req.job_id, None)
            raise LaunchError(f"node(s) down: {','.join(down)}")
        job.starting += 1

        async def spawn(h: str) -> _RemoteProc:
            p = await self._spawn_one(req, h, req.all_hosts.index(h), hostfile, workdir)
            job.early[h] = p
            if job.terminating:
                await self._end_procs([p], 0.0, self.kill_wait)
            return p

        try:
            results = await asyncio.gather(*(spawn(h) for h in req.hosts), return_exceptions=True)
        finally:
            job.starting -= 1
            for h in req.hosts:
                job.early.pop(h, None)
        started = [r for r in results if isinstance(r, _RemoteProc)]
        failed = [(h, r) for h, r in zip(req.hosts, results) if not isinstance(r, _RemoteProc)]
        if failed:
            await self._end_procs([p for p in started if not p.finished], 0.0, 0.5)
            for p in started:
                self._tokens.pop(p.token, None)
                self._spawning.discard(p.token)
                self._early_exits.pop(p.token, None)
            if not job.procs:
                self._jobs.pop(req.job_id, None)
            else:
                # Its other processes may have ended while this start was pending (a cancel,
                # its limit, its own end): their exits were heard when it could not be over.
                self._maybe_done(job)
            for h, exc in failed:
                if isinstance(exc, HostUnreachable):
                    self._host_failed(h, str(exc))
            h, exc = failed[0]
            if isinstance(exc, (HostUnreachable, RemoteError, LaunchError)):
                raise LaunchError(f"{h}: {exc}" if not isinstance(exc, LaunchError) else str(exc))
            raise exc
        for p in started:
            p.joining = req.joining
            # Taken back while it started (a refused grow, a release answered at once): its
            # exit is not the job's, and the reclaim waiting for this launch ends it.
            p.released = p.host in start.reclaimed
            job.procs[p.host] = p
            self._spawning.discard(p.token)
            early = self._early_exits.pop(p.token, None)
            if early is not None and not p.finished:  # (finished: ended here, by a terminate)
                p.finished, p.code, p.signal = True, early[0], early[1]
                self._join_failed(job, p)
        if job.terminating:
            await self._end_procs([p for p in started if not p.finished], 0.0, self.kill_wait)
        self._maybe_done(job)

    async def _spawn_one(self, req: LaunchRequest, host: str, index: int, hostfile: Path, workdir: Path) -> _RemoteProc:
        out, err = output_paths(req.spec, req.job_id, host, index, workdir)
        self._seq += 1
        token = f"{req.job_id}.{self._run_id}{self._seq}"
        env = {k: v for k, v in job_environment(req, host, index, hostfile).items() if k not in _NOT_FORWARDED}
        if self.tag:
            env["ELASTIC_TAG"] = f"{self.tag}/{req.job_id}/{host}"
        payload = json.dumps({
            "argv": list(req.spec.command), "cwd": str(workdir), "env": env, "out": str(out),
            "err": str(err), "status_dir": self._links[host].status_dir, "token": token,
        }).encode()
        self._spawning.add(token)
        self._tokens[token] = (req.job_id, host)
        try:
            lines = await self._call(host, "spawn", [], payload)
        except BaseException:
            self._tokens.pop(token, None)
            self._spawning.discard(token)
            self._early_exits.pop(token, None)
            raise
        answer = lines[-1] if lines else ""
        if answer.startswith("ok "):
            # Still "spawning" until launch() has placed it among the job's processes: an
            # exit reported while the other hosts' spawns are pending is kept, not lost.
            return _RemoteProc(host, token, int(answer[3:]))
        self._spawning.discard(token)
        self._tokens.pop(token, None)
        self._early_exits.pop(token, None)
        if answer.startswith("error "):
            raise LaunchError(answer[6:])
        raise RemoteError(f"unexpected answer {answer!r}")

    # ---- ending -------------------------------------------------------------------------
    async def reclaim(self, job_id: int, hosts: tuple[str, ...], grace: float) -> None:
        """Give the processes on `hosts` `grace` seconds to exit, end the rest, report. What
        a launch on its way starts there is among them: the report waits for it."""
        await self._starts.reclaiming(job_id, hosts)
        job = self._jobs.get(job_id)
        if job is not None:
            procs = [job.procs[h] for h in hosts if h in job.procs]
            for p in procs:
                p.released = True
            await self._end_procs(procs, grace, self.kill_wait)
            for p in procs:
                job.procs.pop(p.host, None)
                self._tokens.pop(p.token, None)
        await call_back(self.on_hosts_gone, job_id, list(hosts))
        if job is not None:
            self._maybe_done(job)

    async def terminate(self, job_id: int, hosts: tuple[str, ...], passes_on: bool = False) -> None:
        job = self._jobs.get(job_id)
        if job is None:
            return
        job.terminating = True
        procs = [job.procs[h] for h in hosts if h in job.procs]
        procs += [p for h, p in job.early.items() if h in hosts and h not in job.procs and not p.finished]
        await self._end_procs(procs, 0.0, self.kill_wait, passes_on)
        self._maybe_done(job)

    async def _end_procs(self, procs: list[_RemoteProc], grace: float, wait: float, passes_on: bool = False) -> None:
        by_host: dict[str, list[_RemoteProc]] = {}
        for p in procs:
            by_host.setdefault(p.host, []).append(p)
        await asyncio.gather(*(self._end_on_host(h, ps, grace, wait, passes_on) for h, ps in by_host.items()))

    async def _end_on_host(self, host: str, procs: list[_RemoteProc], grace: float, wait: float,
                           passes_on: bool = False) -> None:
        """End the groups on one node, and the job's processes that left them (by their tag),
        and verify there that none of them is left."""
        link = self._links[host]
        if not link.up:
            for p in procs:
                self._lose(link, p)
            return
        args = [f"{grace:g}", f"{wait:g}", link.status_dir]
        jobs = {self._tokens[p.token][0] for p in procs if p.token in self._tokens}
        if self.tag and len(jobs) == 1:
            args.append(f"tag={self.tag}/{jobs.pop()}/{host}")
        if passes_on:
            args.append("passes-on")
        args += [f"{p.token}:{p.pgid}" for p in procs]
        try:
            lines = await self._call(host, "end", args, timeout=grace + wait + self.options.call_timeout)
        except HostUnreachable as exc:
            self._host_failed(host, str(exc))
            return
        except RemoteError as exc:
            log.error("%s: could not end process groups %s: %s", host, [p.pgid for p in procs], exc)
            return
        by_token = {p.token: p for p in procs}
        for line in lines:
            words = line.split()
            if len(words) == 4 and words[0] == "st" and words[1] in by_token:
                self._finished(by_token[words[1]], words[2], words[3])
        if not lines or lines[-1] != "gone":
            log.error("%s: process groups %s still have members after SIGKILL: %s",
                      host, [p.pgid for p in procs], lines[-1] if lines else "no answer")

    def _finished(self, p: _RemoteProc, code: str, sig: str) -> None:
        if p.finished:
            return
        p.finished = True
        if code.isdigit() and sig.isdigit():
            p.code, p.signal = int(code), int(sig)
        else:
            # Its monitor died without recording it (killed by hand, out of memory): the
            # job must not pass for completed.
            log.warning("%s: exit status of process group %d is unknown", p.host, p.pgid)
            p.code, p.signal = UNKNOWN_EXIT, 0

    def _maybe_done(self, job: _SSHJob) -> None:
        if job.done or job.starting or any(not p.finished for p in job.procs.values()):
            return
        job.done = True
        self._spawn(self._job_done(job))

    async def _job_done(self, job: _SSHJob) -> None:
        procs = list(job.procs.values())
        # A job's own background children must not outlive it on "freed" nodes.
        await self._end_procs([p for p in procs if not p.lost], 0.0, min(self.kill_wait, 2.0))
        self._jobs.pop(job.job_id, None)
        for p in procs:
            self._tokens.pop(p.token, None)
        code, sig = _job_exit([p for p in procs if not p.released])
        # The node monitors record no end time (and nodes' clocks differ): an end found
        # after a restart is dated at the restart.
        await call_back(self.on_exit, job.job_id, code, sig, None)

    # ---- node health --------------------------------------------------------------------
    async def _connect(self, host: str) -> None:
        link = self._links[host]
        await self._in_thread(host, link.connect)
        link.up = True
        link.last_heard = time.monotonic()

    def _post(self, host: str, gen: int, line: str | None) -> None:
        """From a watch thread: hand a line (None: the channel closed) to the loop."""
        loop = self._loop
        if loop is None or loop.is_closed():
            return
        try:
            loop.call_soon_threadsafe(self._on_watch, host, gen, line)
        except RuntimeError:
            pass  # the loop is closing

    def _on_watch(self, host: str, gen: int, line: str | None) -> None:
        link = self._links[host]
        if gen != link.generation or self._closing or link.retired:
            return
        if line is None:
            if link.up:
                self._spawn(self._recheck(host))
            return
        link.last_heard = time.monotonic()
        words = line.split()
        if len(words) == 4 and words[0] == "exit":
            self._exit_reported(words[1], words[2], words[3])

    def _exit_reported(self, token: str, code: str, sig: str) -> None:
        where = self._tokens.get(token)
        if where is None:
            if len(self._unclaimed) >= _MAX_UNCLAIMED:
                self._unclaimed.pop(next(iter(self._unclaimed)))
            self._unclaimed[token] = (code, sig)
            return
        job = self._jobs.get(where[0])
        p = job.procs.get(where[1]) if job is not None else None
        if p is None or p.token != token:
            if token in self._spawning:
                # Reported before the spawn call returned: a command that ends at once.
                self._early_exits[token] = (int(code) if code.isdigit() else None,
                                            int(sig) if sig.isdigit() else None)
            return
        self._finished(p, code, sig)
        if job is not None:
            self._join_failed(job, p)
            self._maybe_done(job)

    def _join_failed(self, job: _SSHJob, p: _RemoteProc) -> None:
        if p.joining and not p.released and self.on_join_failed is not None:
            # Void grow: its host goes back and its exit is not the job's (local.py alike).
            p.joining = False
            p.released = True
            self._spawn(call_back(self.on_join_failed, job.job_id, p.host, p.code or 0, p.signal or 0))

    def confirm_joined(self, job_id: int, hosts: tuple[str, ...]) -> None:
        """The application took the grow's processes: their exits are the job's from now on."""
        job = self._jobs.get(job_id)
        for h in hosts:
            p = job.procs.get(h) if job is not None else None
            if p is not None:
                p.joining = False

    async def _recheck(self, host: str) -> None:
        """The watch channel closed while the node was up: reconnect, or declare it down."""
        try:
            await self._connect(host)
        except (HostUnreachable, RemoteError) as exc:
            self._host_failed(host, f"connection lost: {exc}")

    async def _watch_heartbeats(self) -> None:
        step = max(0.2, min(self.options.heartbeat, self.options.node_timeout / 4))
        last_tick = time.monotonic()
        while True:
            await asyncio.sleep(step)
            now = time.monotonic()
            unheard = now - last_tick - step
            last_tick = now
            if unheard > step:
                # The daemon itself was not running (SIGSTOP, a swapped or overloaded node):
                # no heartbeat could be read meanwhile, and the ones the nodes sent are still
                # in the sockets. That silence is the daemon's, not the nodes': it does not
                # count, or a pause longer than node_timeout ends every job as NODE_FAIL.
                if unheard > 1.0:
                    log.warning("ssh: the daemon did not run for %.1f s; the nodes' silence meanwhile is not "
                                "counted against them", unheard)
                for link in self._links.values():
                    link.last_heard += unheard
            for host, link in self._links.items():
                if link.up and now - link.last_heard > self.options.node_timeout:
                    self._host_failed(host, f"no heartbeat for {now - link.last_heard:.1f} s")

    def _lose(self, link: _HostLink, p: _RemoteProc) -> None:
        if not p.finished:
            p.finished = True
            p.lost = True
        link.orphans[p.token] = p.pgid

    def _host_failed(self, host: str, why: str) -> None:
        """Mark the node down, tell the daemon, and settle the jobs that ran there."""
        link = self._links[host]
        if self._closing or link.retired or (not link.up and link.retry_task is not None):
            return
        link.up = False
        # Whatever ran there may run on unseen: swept (if this daemon tags its jobs) before
        # the node is used again.
        link.needs_sweep = link.needs_sweep or bool(self.tag)
        log.warning("node %s down: %s", host, why)
        loop = asyncio.get_running_loop()
        loop.run_in_executor(None, link.abort)
        affected = []
        for job in self._jobs.values():
            p = job.procs.get(host)
            if p is not None and not p.released:
                self._lose(link, p)
                affected.append(job)
        self.on_host_down(host, why)
        for job in affected:
            self._maybe_done(job)
        link.retry_task = asyncio.ensure_future(self._retry(host))

    async def _retry(self, host: str) -> None:
        link = self._links[host]
        while not self._closing:
            await asyncio.sleep(self.options.retry_interval)
            try:
                await self._in_thread(host, link.connect)
            except (HostUnreachable, RemoteError) as exc:
                log.debug("node %s still unreachable: %s", host, exc)
                continue
            if not await self._clear_lost(host):
                link.abort()
                continue
            link.up = True
            link.last_heard = time.monotonic()
            link.retry_task = None
            log.info("node %s is back", host)
            self.on_host_up(host)
            return

    async def _clear_lost(self, host: str) -> bool:
        """On a node reached again: end what the jobs lost with it left running there (swept
        by their tag, and their process groups ended and their records read and removed);
        whether that is verified done."""
        link = self._links[host]
        if link.needs_sweep and await self._sweep(host) is None:
            return False
        if link.orphans:
            # The processes of jobs lost with the node may have run on meanwhile.
            items = [f"{t}:{g}" for t, g in link.orphans.items()]
            try:
                lines = await self._call(host, "end", ["0", f"{self.kill_wait:g}", link.status_dir, *items],
                                         timeout=self.kill_wait + self.options.call_timeout)
            except (HostUnreachable, RemoteError) as exc:
                log.warning("node %s: could not end the processes left there: %s", host, exc)
                return False
            if not lines or lines[-1] != "gone":
                log.error("node %s: processes of lost jobs survive SIGKILL; keeping it down", host)
                return False
            log.info("node %s: ended the processes of lost jobs (groups %s)", host, sorted(link.orphans.values()))
            link.orphans.clear()
        for hook in self.clear_hooks:
            if not await hook(host):
                return False
        return True

    def cannot_verify(self, host: str, why: str) -> None:
        """Something of a job may run on HOST, which could not be verified gone (the node did
        not answer): the node is down until it answers and the `clear_hooks` end it, as for a
        sweep that fails."""
        link = self._links.get(host)
        if link is None or link.retired:
            return
        if link.up:
            self._host_failed(host, why)
        else:
            log.warning("node %s stays down: %s", host, why)

    async def reach_lost(self, within: float, skip: Collection[str] = ()) -> dict[str, list[int]]:
        """At a stop: the nodes that went down under jobs, whose processes there are ended only
        once the node answers again (every retry_interval, which the stop cancels), are tried
        once more now and what the jobs left there is ended. The jobs whose processes may still
        run, by node, where that could not be done within WITHIN seconds: the next start on the
        state directory ends them (its sweep, by their tag) once it reaches the node. Not the
        nodes in SKIP (tried already by this stop)."""
        lost = [h for h, link in self._links.items()
                if not link.up and not link.retired and (link.orphans or self._pending(h)) and h not in skip]
        if not lost:
            return {}
        # The connect is bounded on its own (its thread cannot be interrupted, and the daemon
        # exits only once it returns), within WITHIN: a node that came back answers at once,
        # and what the jobs left there dies at its SIGTERM unless it ignores it.
        connect = max(1.0, min(self.options.connect_timeout, within - 1.0))
        results = await asyncio.gather(*(asyncio.wait_for(self._reach_at_stop(h, connect), within) for h in lost),
                                       return_exceptions=True)
        unreached: dict[str, list[int]] = {}
        for host, r in zip(lost, results):
            if r is True:
                continue
            link = self._links[host]
            why = ("timed out" if isinstance(r, TimeoutError) else str(r) if isinstance(r, BaseException)
                   else "what is left there could not be verified ended")
            unreached[host] = sorted({int(t.split(".", 1)[0]) for t in link.orphans} | set(self._pending(host)))
            log.error("stopping: could not reach node %s (%s): the processes of job(s) %s there (process groups %s) "
                      "may still run; the next start on this state directory ends them once it reaches the node",
                      host, why, ",".join(map(str, unreached[host])), ",".join(map(str, sorted(link.orphans.values()))))
        return unreached

    def _pending(self, host: str) -> set[int]:
        return {j for f in self.pending_jobs for j in f(host)}

    async def _reach_at_stop(self, host: str, connect_timeout: float) -> bool:
        link = self._links[host]
        if link.retry_task is not None:
            link.retry_task.cancel()
            link.retry_task = None
        await self._in_thread(host, link.connect, connect_timeout)
        if not await self._clear_lost(host):
            return False
        log.info("stopping: node %s answered again; ended what its lost jobs left there", host)
        with contextlib.suppress(HostUnreachable, RemoteError):
            await self._cleanup(host, 5)
        return True

    async def _cleanup(self, host: str, timeout: float) -> None:
        """Remove the node's records of jobs the daemon no longer tracks there (their ends are
        settled), and the status directory once empty."""
        link = self._links[host]
        keep = [str(j) for j, job in sorted(self._jobs.items()) if host in job.procs and not job.procs[host].lost]
        await self._call(host, "cleanup", [link.status_dir, *keep], timeout=timeout)

    # ---- after a daemon restart -------------------------------------------------------------
    async def adopt(self, job_id: int, hosts: tuple[str, ...], job_dir: Path) -> list[str]:
        """Take over a job's processes after a daemon restart, from their monitors' records
        on each node: watched again, ended and reported as if started here. The hosts where
        the job has a process, running or ended with a record; a node that cannot be reached
        is left out (the daemon has it down: a node failure for the job)."""
        reachable = [h for h in hosts if h in self._links and self._links[h].up]
        results = await asyncio.gather(
            *(self._call(h, "procs", [self._links[h].status_dir, str(job_id)]) for h in reachable),
            return_exceptions=True)
        job = _SSHJob(job_id)
        for host, r in zip(reachable, results):
            if isinstance(r, BaseException) and not isinstance(r, HostUnreachable):
                log.error("%s: cannot list the processes of job %d (%s): trying once more", host, job_id, r)
                try:
                    r = await self._call(host, "procs", [self._links[host].status_dir, str(job_id)])
                except Exception as exc:  # noqa: BLE001 - whatever it is, the node could not be looked at
                    r = exc
            if isinstance(r, BaseException):
                # Not looked at: a process of the job may run there unwatched. Skipped, the host
                # read as one where nothing was ever started (and was given back, the process
                # running on untracked); down, it goes the way of a node out of reach: the job
                # goes on without it, and the node is swept clean before it is used again.
                self._host_failed(host, f"cannot take over the processes of job {job_id}: {r}")
                continue
            records = [ln.split() for ln in r if ln.startswith("proc ")]
            records = [w for w in records if len(w) == 5]
            if not records:
                continue
            # The newest record that still runs, else the newest: an earlier one on this host
            # (shrunk off, grown back) was ended and reported before.
            running = [w for w in records if w[3] == "-"]
            _, token, pgid, code, sig = (running or records)[-1]
            p = _RemoteProc(host, token, int(pgid))
            job.procs[host] = p
            self._tokens[token] = (job_id, host)
            if code != "-":
                self._finished(p, code, sig)
        if not job.procs:
            return []
        self._jobs[job_id] = job
        for p in job.procs.values():
            early = self._unclaimed.pop(p.token, None)
            if early is not None and not p.finished:
                self._finished(p, *early)
        self._maybe_done(job)
        return list(job.procs)

    async def end_strays(self, running: set[int]) -> dict[int, int]:
        """End, on every reachable node, the processes of jobs this daemon does not run there
        (a lost journal's, or on a node a job went on without), verified gone before the
        node is used again; a node where that fails is marked down and swept again when it
        is retried. How many were ended, per job."""
        if not self.tag:
            return {}
        hosts = [h for h, link in self._links.items() if link.up]
        results = await asyncio.gather(*(self._sweep(h) for h in hosts))
        ended: dict[int, int] = {}
        for counts in results:
            for job, n in (counts or {}).items():
                ended[job] = ended.get(job, 0) + n
        return ended

    async def _sweep(self, host: str) -> dict[int, int] | None:
        """Sweep one node of the processes of every job that has no live process of its own
        there; None (and the node down) when it cannot be verified clean."""
        link = self._links[host]
        ids = [str(j) for j, job in sorted(self._jobs.items())
               if host in job.procs and not job.procs[host].lost and not job.procs[host].released]
        ids += [f"mpi={j}" for j in sorted(self.running_elsewhere())]
        try:
            lines = await self._call(host, "sweep", [self.tag, host, f"{self.kill_wait:g}", f"dir={link.status_dir}", *ids],
                                     timeout=self.kill_wait + 5 + self.options.call_timeout)
        except (HostUnreachable, RemoteError) as exc:
            why = f"cannot verify that the processes of lost jobs are gone: {exc}"
        else:
            if lines and lines[-1] == "gone":
                link.needs_sweep = False
                counts = {int(w[1]): int(w[2]) for w in (ln.split() for ln in lines[:-1]) if w[0] == "ended"}
                if counts:
                    log.warning("node %s: ended the processes of lost jobs %s", host, counts)
                return counts
            why = f"processes of lost jobs survive SIGKILL: {lines[-1] if lines else 'no answer'}"
        link.needs_sweep = True
        if link.up:
            self._host_failed(host, why)
        else:
            log.warning("node %s stays down: %s", host, why)
        return None

    # ---- plumbing -----------------------------------------------------------------------
    async def _call(self, host: str, role: str, args: list[str], stdin: bytes = b"",
                    timeout: float | None = None) -> list[str]:
        link = self._links[host]
        lines: list[str] = await self._in_thread(host, link.exec, role, args, stdin,
                                                 timeout or self.options.call_timeout)
        return lines

    async def _in_thread(self, host: str, fn: Callable[..., Any], *args: Any) -> Any:
        loop = asyncio.get_running_loop()
        try:
            return await loop.run_in_executor(self._links[host].executor, fn, *args)
        except RuntimeError as exc:  # executor shut down: the launcher is closing
            raise HostUnreachable(str(exc)) from None

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._task_done)

    def _task_done(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("ssh launcher task failed", exc_info=task.exception())


def _job_exit(procs: list[_RemoteProc]) -> tuple[int, int]:
    """Slurm's job exit: the first non-zero exit code, else the first terminating signal."""
    for p in procs:
        if p.code:
            return p.code, 0
    for p in procs:
        if p.signal:
            return 0, p.signal
    return 0, 0


def _close_quietly(conn: Any) -> None:
    """Closing a connection whose peer vanished may itself fail; it is closed either way."""
    try:
        conn.close()
    except _SSH_FAILURES as exc:
        log.debug("closing %s: %s", getattr(conn, "host", "?"), _describe(exc))


def _describe(exc: BaseException) -> str:
    if isinstance(exc, socket.timeout | TimeoutError):
        return f"timed out ({exc})" if str(exc) else "timed out"
    text = str(exc) or type(exc).__name__
    return text if type(exc).__name__ in text else f"{type(exc).__name__}: {text}"
