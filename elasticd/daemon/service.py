"""The daemon: turns sockets, process exits and timers into core events, and core actions
into processes.

Everything that changes job state runs on the event loop thread, one event at a time, so
the core needs no locks. Scheduling is coalesced: many events in one loop iteration (a
burst of submissions) cost one policy call.
"""

from __future__ import annotations

import asyncio
import logging
import os
import secrets
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from elastic_protocol.jobspec import JobSpec
from elastic_protocol.version import MAX_APP_LINE_BYTES, MAX_LINE_BYTES

from elasticd import __version__
from elasticd.core.actions import Action, Launch, LaunchJoining, Reclaim, SendOrder, Terminate
from elasticd.core.engine import Core
from elasticd.errors import LaunchError, OrderRejected, QueueFull
from elasticd.launch.base import LaunchRequest
from elasticd.launch.choose import make_launcher
from elasticd.policies.config import build_policy, policy_params
from elasticd.statedir import DaemonRecord, new_secret, remove_record, write_record

log = logging.getLogger("elasticd")


@dataclass
class DaemonConfig:
    state_dir: Path
    node_names: list[str]
    policy: str = "easy"
    mode: str = "local"
    listen_host: str = "127.0.0.1"
    app_host: str = "127.0.0.1"
    control_port: int = 0
    app_port: int = 0
    kill_wait: float = 5.0
    order_deadline: float = 30.0
    min_resize_interval: float = 10.0
    # Policies are also run this often while jobs exist, so that time-based conditions
    # (a resize interval passing) are acted on without waiting for the next event.
    schedule_interval: float = 5.0
    policy_params: list[str] = field(default_factory=list)  # KEY=VALUE, as on the command line
    policy_config: str | None = None
    # Limits that keep a misbehaving client from exhausting the daemon (README: Limits).
    max_connections: int = 256  # per channel (control, application)
    max_unauthenticated: int = 32  # per channel, before their hello; the oldest is dropped
    hello_timeout: float = 10.0
    max_line_bytes: int = MAX_LINE_BYTES  # control-channel requests
    max_app_line_bytes: int = MAX_APP_LINE_BYTES
    max_queued_jobs: int = 100_000  # PENDING jobs; a submit past it is refused (queue_full)
    # Cluster mode: how processes reach the nodes (local | ssh | srun), and its settings.
    launcher: str = "local"
    launcher_options: dict[str, Any] = field(default_factory=dict)


@dataclass
class _Timers:
    limits: dict[int, asyncio.TimerHandle] = field(default_factory=dict)
    orders: dict[int, asyncio.TimerHandle] = field(default_factory=dict)


class AppLink(Protocol):
    """The registered application connection of a job, as the daemon sees it."""

    def send(self, line: bytes) -> bool: ...


class Daemon:
    def __init__(self, config: DaemonConfig) -> None:
        self.config = config
        self.core = Core(
            config.node_names,
            build_policy(config.policy, config.policy_config, config.policy_params,
                         min_resize_interval=config.min_resize_interval),
            order_deadline=config.order_deadline,
        )
        # Effective parameter values, shown by `elasticd status`.
        self.policy_settings = {
            k: v for k, v in policy_params(config.policy, config.policy_config, config.policy_params,
                                           config.min_resize_interval).items()
        }
        self.launcher = make_launcher(
            config.launcher,
            on_exit=self._on_exit,
            on_hosts_gone=self._on_hosts_gone,
            on_host_down=self.node_down,
            on_host_up=self.node_up,
            kill_wait=config.kill_wait,
            options=config.launcher_options,
        )
        self.app_links: dict[int, AppLink] = {}
        # Job-scoped rendezvous values (put/get on the application channel).
        self.job_values: dict[int, dict[str, str]] = {}
        self.secret = new_secret()
        self.job_secrets: dict[int, str] = {}
        self.started_at = time.time()
        self._timers = _Timers()
        self._schedule_pending = False
        self._changed = asyncio.Condition()
        self._stopping = asyncio.Event()
        self._stopped = asyncio.Event()
        self._tasks: set[asyncio.Task[None]] = set()
        self._tick_handle: asyncio.TimerHandle | None = None
        self.control_address = ""
        self.app_address = ""

    @staticmethod
    def now() -> float:
        return time.time()

    # ---- life cycle ----------------------------------------------------------------
    async def serve(self, ready: asyncio.Future[None] | None = None) -> None:
        # Imported here: the servers need the daemon, and the daemon hands itself over.
        from elasticd.daemon.app_server import AppServer
        from elasticd.daemon.control_server import ControlServer

        cfg = self.config
        control = ControlServer(self)
        app = AppServer(self)
        csrv = await control.start(cfg.listen_host, cfg.control_port)
        asrv = await app.start(cfg.app_host, cfg.app_port)
        start_launcher = getattr(self.launcher, "start", None)
        if start_launcher is not None:
            # Cluster mode: reach every node before taking jobs; unreachable ones start down.
            await start_launcher(list(self.core.nodes.names))
        chost, cport = csrv.sockets[0].getsockname()[:2]
        ahost, aport = asrv.sockets[0].getsockname()[:2]
        self.control_address = f"{chost}:{cport}"
        self.app_address = f"{ahost}:{aport}"
        write_record(
            cfg.state_dir,
            DaemonRecord(
                pid=os.getpid(),
                control_host=chost,
                control_port=cport,
                app_host=ahost,
                app_port=aport,
                secret=self.secret,
                version=__version__,
                started_at=self.started_at,
            ),
        )
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, lambda: self._spawn(self.stop()))
        log.info(
            "elasticd %s listening: control %s, applications %s; %d nodes, policy %s",
            __version__, self.control_address, self.app_address,
            self.core.nodes.total, cfg.policy,
        )
        self._tick_handle = loop.call_later(cfg.schedule_interval, self._tick)
        if ready is not None:
            ready.set_result(None)
        try:
            await self._stopped.wait()
        finally:
            if self._tick_handle is not None:
                self._tick_handle.cancel()
            csrv.close()
            asrv.close()
            await app.close_all()
            await control.close_all()
            await self.launcher.close()
            remove_record(cfg.state_dir, os.getpid())
            log.info("elasticd stopped")

    async def stop(self) -> list[int]:
        """End every running job cleanly (and report which), cancel the queue, exit."""
        if self._stopping.is_set():
            await self._stopped.wait()
            return []
        self._stopping.set()
        now = self.now()
        running = self.core.active_ids
        log.info("stopping: ending %d running job(s) %s", len(running), running)
        self._execute(self.core.stop_all(now))
        async with self._changed:
            await asyncio.wait_for(
                self._changed.wait_for(lambda: not self.core.active_ids),
                timeout=self.config.kill_wait + 30,
            )
        self._stopped.set()
        return running

    @property
    def stopping(self) -> bool:
        return self._stopping.is_set()

    def _spawn(self, coro) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._task_done)

    def _task_done(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("internal task failed", exc_info=task.exception())

    # ---- events into the core ------------------------------------------------------
    def submit(self, spec: JobSpec) -> int:
        if self.core.pending_count >= self.config.max_queued_jobs:
            raise QueueFull(f"the queue holds {self.config.max_queued_jobs} pending jobs, its limit; "
                            "submit again once some have started")
        job = self.core.submit(spec, self.now())
        log.info("job %d submitted: %s, nodes %s", job.job_id, spec.name, spec.nodes)
        self._schedule_soon()
        return job.job_id

    def cancel(self, job_id: int) -> str:
        actions = self.core.cancel(job_id, self.now())
        self._execute(actions)
        self._notify()
        self._schedule_soon()
        return self.core.job(job_id).state.value

    def resize(self, job_id: int, nodes: int) -> None:
        self._execute(self.core.resize(job_id, nodes, self.now()))
        self._notify()

    def _tick(self) -> None:
        loop = asyncio.get_running_loop()
        self._tick_handle = loop.call_later(self.config.schedule_interval, self._tick)
        if self.core.pending_ids or self.core.active_ids:
            self._schedule_soon()

    # ---- nodes (cluster mode) ------------------------------------------------------------
    def node_down(self, host: str, why: str) -> None:
        """The launcher cannot reach the node: its job ends (NODE_FAIL) or goes on without it."""
        owner = self.core.nodes.owner_of(host)
        log.warning("node %s down (%s)%s", host, why, "" if owner is None else f"; it runs job {owner}")
        self._execute(self.core.node_down(host, self.now()))
        self._notify()
        self._schedule_soon()

    def node_up(self, host: str) -> None:
        log.info("node %s is up again", host)
        self.core.node_up(host, self.now())
        self._notify()
        self._schedule_soon()

    # ---- the application channel -------------------------------------------------------
    def app_register(self, job_id: int, link: AppLink) -> None:
        self.app_links[job_id] = link
        self.core.set_registered(job_id, True, self.now())
        self._schedule_soon()

    def app_deregister(self, job_id: int) -> None:
        self.core.set_registered(job_id, False, self.now(), final=True)
        self.app_links.pop(job_id, None)

    def app_lost(self, job_id: int, link: AppLink) -> None:
        """The registered connection closed: the job runs on as rigid, an open order fails."""
        if self.app_links.get(job_id) is not link:
            return
        del self.app_links[job_id]
        job = self.core.jobs.get(job_id)
        if job is None or not job.state.holds_nodes:
            return
        now = self.now()
        if job.malleable_ready:
            self.core.set_registered(job_id, False, now)
        if job.order is not None:
            self._execute(self.core.order_undeliverable(job_id, job.order.order_id, now))
        self._schedule_soon()

    def app_answer(self, job_id: int, verb: str, order_id: int, hosts: list[str], text: str) -> None:
        """shrunk / grown / refuse / defer; raises OrderRejected for the application."""
        now = self.now()
        if verb == "shrunk":
            actions = self.core.answer_shrink(job_id, order_id, hosts, now)
        elif verb == "grown":
            self.core.answer_grow(job_id, order_id, hosts, now)
            actions = []
        elif verb == "refuse":
            actions = self.core.refuse_order(job_id, order_id, now, reason=text)
        else:  # defer
            try:
                seconds = float(text)
            except ValueError:
                raise OrderRejected("malformed", f"defer: {text[:32]!r} is not a number of seconds") from None
            if not 0 < seconds <= 86400:
                raise OrderRejected("malformed", "defer: seconds must be in (0, 86400]")
            actions = self.core.refuse_order(job_id, order_id, now, defer=seconds)
        self._order_settled(order_id)
        self._execute(actions)
        self._notify()
        self._schedule_soon()

    def app_request(self, job_id: int, count: int) -> None:
        self.core.request_nodes(job_id, count, self.now())
        self._schedule_soon()

    def app_release(self, job_id: int, hosts: list[str]) -> None:
        self._execute(self.core.release_hosts(job_id, hosts, self.now()))

    def _schedule_soon(self) -> None:
        if self._schedule_pending or self.stopping:
            return
        self._schedule_pending = True
        asyncio.get_running_loop().call_soon(self._run_schedule)

    def _run_schedule(self) -> None:
        self._schedule_pending = False
        if self.stopping:
            return
        try:
            self._execute(self.core.schedule(self.now()))
        except Exception:
            # A policy bug must not take the daemon and its jobs down with it.
            log.exception("scheduling failed; the queue is kept and retried at the next event")

    def _execute(self, actions: list[Action]) -> None:
        for a in actions:
            if isinstance(a, Launch):
                self._spawn(self._launch(a))
            elif isinstance(a, Terminate):
                log.info("job %d: ending (%s) on %s", a.job_id, a.ending_as.value, ",".join(a.hosts))
                self._spawn(self.launcher.terminate(a.job_id, a.hosts))
            elif isinstance(a, LaunchJoining):
                self._spawn(self._launch_joining(a))
            elif isinstance(a, SendOrder):
                self._send_order(a)
            elif isinstance(a, Reclaim):
                log.info("job %d: reclaiming %s", a.job_id, ",".join(a.hosts))
                self._spawn(self.launcher.reclaim(a.job_id, a.hosts, a.grace))

    def _send_order(self, a: SendOrder) -> None:
        from elastic_protocol.appchannel import grow_order, shrink_order

        msg = (
            shrink_order(a.count, a.order_id, a.deadline_s)
            if a.kind == "shrink"
            else grow_order(list(a.hosts), a.order_id, a.deadline_s)
        )
        link = self.app_links.get(a.job_id)
        log.info("job %d: order %d: %s", a.job_id, a.order_id, msg.encode().decode())
        if link is None or not link.send(msg.encode() + b"\n"):
            self._execute(self.core.order_undeliverable(a.job_id, a.order_id, self.now()))
            self._schedule_soon()
            return
        loop = asyncio.get_running_loop()
        self._timers.orders[a.order_id] = loop.call_later(
            a.deadline_s, self._order_deadline, a.job_id, a.order_id
        )
        self._notify()

    def _order_deadline(self, job_id: int, order_id: int) -> None:
        self._timers.orders.pop(order_id, None)
        log.warning("job %d: order %d: deadline passed without an answer", job_id, order_id)
        self._execute(self.core.order_deadline_passed(job_id, order_id, self.now()))
        self._notify()

    def _order_settled(self, order_id: int) -> None:
        handle = self._timers.orders.pop(order_id, None)
        if handle is not None:
            handle.cancel()

    async def _launch_joining(self, a: LaunchJoining) -> None:
        job = self.core.job(a.job_id)
        req = LaunchRequest(
            job_id=a.job_id,
            spec=job.spec,
            hosts=a.hosts,
            all_hosts=a.all_hosts,
            app_address=self.app_address,
            job_secret=self.job_secrets.get(a.job_id, ""),
            job_dir=self.config.state_dir / "jobs" / str(a.job_id),
            joining=True,
        )
        try:
            await self.launcher.launch(req)
        except LaunchError as exc:
            log.warning("job %d: could not start on new hosts %s: %s", a.job_id, ",".join(a.hosts), exc)
            order = job.order
            if order is not None:
                self._order_settled(order.order_id)
                self._execute(self.core.order_undeliverable(a.job_id, order.order_id, self.now()))

    async def _on_hosts_gone(self, job_id: int, hosts: list[str]) -> None:
        job = self.core.jobs.get(job_id)
        order_id = job.order.order_id if job is not None and job.order is not None else None
        self.core.hosts_gone(job_id, hosts, self.now())
        if order_id is not None and (job is None or job.order is None):
            self._order_settled(order_id)
        log.info("job %d: hosts %s free", job_id, ",".join(hosts))
        self._notify()
        self._schedule_soon()

    async def _launch(self, a: Launch) -> None:
        job = self.core.job(a.job_id)
        secret = secrets.token_hex(16)
        self.job_secrets[a.job_id] = secret
        req = LaunchRequest(
            job_id=a.job_id,
            spec=job.spec,
            hosts=a.hosts,
            all_hosts=a.hosts,
            app_address=self.app_address,
            job_secret=secret,
            job_dir=self.config.state_dir / "jobs" / str(a.job_id),
        )
        try:
            await self.launcher.launch(req)
        except LaunchError as exc:
            log.warning("job %d: launch failed: %s", a.job_id, exc)
            self.core.launch_failed(a.job_id, self.now(), str(exc))
            self._job_ended(a.job_id)
            return
        log.info("job %d started on %s", a.job_id, ",".join(a.hosts))
        if job.ending_as is not None:
            # Cancelled while its processes were being started.
            await self.launcher.terminate(a.job_id, a.hosts)
            return
        limit = job.time_limit
        if limit is not None and job.start_time is not None:
            delay = max(0.0, job.start_time + limit - self.now())
            loop = asyncio.get_running_loop()
            self._timers.limits[a.job_id] = loop.call_later(delay, self._limit_reached, a.job_id)

    def _limit_reached(self, job_id: int) -> None:
        self._timers.limits.pop(job_id, None)
        log.info("job %d: time limit reached", job_id)
        self._execute(self.core.time_limit_reached(job_id, self.now()))

    async def _on_exit(self, job_id: int, code: int | None, sig: int | None) -> None:
        self.core.exited(job_id, self.now(), code, sig)
        job = self.core.job(job_id)
        log.info("job %d ended: %s %s", job_id, job.state.value, job.exit_text)
        self._job_ended(job_id)

    def _job_ended(self, job_id: int) -> None:
        handle = self._timers.limits.pop(job_id, None)
        if handle is not None:
            handle.cancel()
        self.job_secrets.pop(job_id, None)
        self.app_links.pop(job_id, None)
        self.job_values.pop(job_id, None)
        self._notify()
        self._schedule_soon()

    def _notify(self) -> None:
        async def notify() -> None:
            async with self._changed:
                self._changed.notify_all()

        self._spawn(notify())

    async def wait_jobs(self, job_ids: list[int] | None, timeout: float | None) -> bool:
        """True once every given job (all jobs when None) has ended; False on timeout."""

        def done() -> bool:
            ids = self.core.jobs.keys() if job_ids is None else job_ids
            return all(self.core.job(j).state.is_final for j in ids)

        async with self._changed:
            try:
                await asyncio.wait_for(self._changed.wait_for(done), timeout)
            except TimeoutError:
                return False
        return True
