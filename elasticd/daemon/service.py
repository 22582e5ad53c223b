"""The daemon: its parts built and wired, and the calls its two channels make.

Each part owns one job and its own state (docs/ARCHITECTURE.md, "The daemon's parts"):

    feed          CoreFeed      the one way into the core: an event in, saved, actions out
    persistence   Persistence   the journal and the event log, secrets and values
    room          DiskRoom      no submission or start without room on the state directory
    timers        JobTimers     time limits; a pass when a job may be ordered again
    channel       AppChannel    each job's registered connection and what its application knows
    orders        Orders        orders sent, their deadlines, the applications' answers
    nodes         Nodes         nodes down and up, the allocation that grows and shrinks
    launching     Launching     the launcher driven, its reports handed to the core
    recovery      Recovery      the previous daemon's jobs taken back at start
    requests      ControlRequests  submit, cancel, resize, release, wait
    status        Status        what equeue and elasticd status show
    lifecycle     Lifecycle     start, serve, stop

Parts reach each other through named calls and the core's actions, never another's private
state; the channel servers reach the daemon through the Protocols of the calls they make
(control_server.ControlCalls, app_server.AppCalls), which this class answers, each call in
one line to the part that owns it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping

from elastic_protocol.control import Queue, QueueDocument, StatusInfo
from elastic_protocol.jobspec import JobSpec
from elasticd.core.actions import ArmLimit, Launch, LaunchJoining, Reclaim, SendOrder, Terminate
from elasticd.core.engine import Core
from elasticd.core.job import Job
from elasticd.daemon.app_channel import AppChannel, AppLink
from elasticd.daemon.app_server import AppServer
from elasticd.daemon.clock import Clock, WallClock
from elasticd.daemon.config import DaemonConfig, Endpoints
from elasticd.daemon.control_requests import ControlRequests
from elasticd.daemon.control_server import ControlServer, StopNotes
from elasticd.daemon.feed import CoreFeed
from elasticd.daemon.launching import Launching
from elasticd.daemon.lifecycle import Lifecycle
from elasticd.daemon.metrics import DaemonMetrics
from elasticd.daemon.nodes import Nodes
from elasticd.daemon.orders import Orders
from elasticd.daemon.persistence import Persistence
from elasticd.daemon.recovery import Recovery, open_state_dir
from elasticd.daemon.room import DiskRoom
from elasticd.daemon.status import Status
from elasticd.daemon.tasks import LoopTasks
from elasticd.daemon.timers import JobTimers
from elasticd.launch.base import Launcher
from elasticd.launch.choose import make_launcher
from elasticd.policies.config import build_policy, policy_params
from elasticd.statedir import state_tag


def _host_launcher(launcher: object) -> object:
    """The launcher that starts per-host processes (the MPI launcher wraps one)."""
    return getattr(launcher, "base", launcher)


class Daemon:
    # Built after the launcher, which reports to them.
    launching: Launching
    nodes: Nodes

    def __init__(self, config: DaemonConfig, clock: Clock | None = None,
                 launcher_factory: Callable[..., Launcher] = make_launcher) -> None:
        """`clock` and `launcher_factory` are for in-process tests (a clock moved by hand, a
        launcher without processes); the daemon itself runs on the wall clock."""
        self.config = cfg = config
        self.clock: Clock = clock if clock is not None else WallClock()
        started_at = self.clock.now()
        self.core = core = Core(cfg.node_names, build_policy(cfg.policy, cfg.policy_config, cfg.policy_params,
                                                             min_resize_interval=cfg.min_resize_interval),
                                order_deadline=cfg.order_deadline)
        if cfg.allocation_rules is not None and cfg.allocation_rules.grow_max:
            core.grow_to = cfg.allocation_rules.grow_max  # jobs that wait for growth
        # Effective parameter values, shown by `elasticd status`.
        settings = dict(policy_params(cfg.policy, cfg.policy_config, cfg.policy_params, cfg.min_resize_interval))
        # The launcher reports to parts built after it (they need it, and the state directory
        # is checked in between): through these.
        self.launcher = launcher = launcher_factory(
            cfg.launcher, on_exit=lambda *a: self.launching.on_exit(*a),
            on_hosts_gone=lambda *a: self.launching.on_hosts_gone(*a),
            on_host_down=lambda *a: self.nodes.node_down(*a), on_host_up=lambda *a: self.nodes.node_up(*a),
            kill_wait=cfg.kill_wait, options=cfg.launcher_options, tag=state_tag(cfg.state_dir))
        metrics = DaemonMetrics() if cfg.metrics_port is not None else None
        tasks, endpoints, clk = LoopTasks(), Endpoints(), self.clock
        salvaged = open_state_dir(cfg)  # before the journal is opened
        self.persistence = persistence = Persistence(cfg, core, clk, metrics)
        room = DiskRoom(cfg.state_dir, cfg.min_free_space, reserve=cfg.journal)
        feed = CoreFeed(core, clk, persistence, room, tasks)
        timers = JobTimers(core, clk, feed)
        self.channel = channel = AppChannel(cfg, core, clk, feed)
        joins = _host_launcher(launcher)
        self.orders = orders = Orders(cfg, core, clk, feed, channel, joins, metrics)
        if hasattr(joins, "on_join_failed"):
            joins.on_join_failed = orders.on_join_failed
        self.nodes = nodes = Nodes(cfg, core, clk, feed, launcher)
        self.launching = launching = Launching(cfg, core, clk, launcher, feed, persistence, tasks, orders, nodes,
                                               endpoints, metrics)
        recovery = Recovery(cfg, core, clk, launcher, feed, persistence, launching, timers, orders, channel, salvaged)
        self.requests = requests = ControlRequests(cfg, core, clk, feed, room, tasks, metrics)
        self.status_view = Status(cfg, core, clk, endpoints, persistence, room, recovery, launching, nodes, settings,
                                  started_at)
        self.lifecycle = Lifecycle(cfg, core, clk, launcher, tasks=tasks, persistence=persistence, feed=feed,
                                   recovery=recovery, launching=launching, timers=timers, nodes=nodes,
                                   endpoints=endpoints, metrics=metrics, policy_settings=settings,
                                   resize=requests.resize, started_at=started_at)
        self.tasks = tasks
        # What the core asks for, each kind to the part that carries it out; then the parts
        # that keep a view of the jobs see the event; at a job's end every part forgets it.
        feed.on_action(Launch, launching.launch)
        feed.on_action(LaunchJoining, launching.join)
        feed.on_action(Terminate, launching.terminate)
        feed.on_action(Reclaim, launching.reclaim)
        feed.on_action(SendOrder, orders.send)
        feed.on_action(ArmLimit, timers.arm_limit)
        feed.check_wiring()
        feed.after_event(timers.after_event)
        feed.after_event(channel.after_event)
        for forget in (launching.forget, nodes.forget, timers.forget, persistence.forget_job, channel.forget,
                       orders.forget):
            feed.on_job_end(forget)

    def now(self) -> float:
        return self.clock.now()

    async def serve(self, ready: asyncio.Future[None] | None = None) -> None:
        cfg = self.config
        await self.lifecycle.serve(ControlServer(self, cfg, cfg.max_line_bytes),
                                   AppServer(self, cfg, cfg.max_app_line_bytes), ready)

    # ---- what both channels ask --------------------------------------------------------------
    def job(self, job_id: int) -> Job:
        return self.core.job(job_id)

    def persist(self) -> None:
        self.persistence.persist()

    # ---- the control channel (control_server.ControlCalls) ---------------------------------
    @property
    def secret(self) -> str:
        return self.lifecycle.secret

    @property
    def stopping(self) -> bool:
        return self.tasks.stopping

    @property
    def stopped(self) -> bool:
        return self.tasks.stopped

    def pending_ids(self) -> list[int]:
        return self.core.pending_ids

    def submit(self, spec: JobSpec) -> int:
        return self.requests.submit(spec)

    def cancel(self, job_id: int) -> tuple[str, str | None]:
        return self.requests.cancel(job_id)

    def resize(self, job_id: int, nodes: int, hold: bool = False) -> None:
        self.requests.resize(job_id, nodes, hold)

    def release_hold(self, job_id: int) -> None:
        self.requests.release_hold(job_id)

    async def wait_jobs(self, job_ids: list[int] | None, timeout: float | None) -> bool:
        return await self.requests.wait_jobs(job_ids, timeout)

    async def stop(self) -> list[int]:
        return await self.lifecycle.stop()

    def stop_notes(self) -> StopNotes:
        return self.lifecycle.notes

    def queue(self, req: Queue) -> QueueDocument:
        return self.status_view.queue(req)

    def status(self) -> StatusInfo:
        return self.status_view.status()

    # ---- the application channel (app_server.AppCalls) -------------------------------------
    def job_secret(self, job_id: int) -> str | None:
        return self.persistence.job_secret(job_id)

    def leader(self, job_id: int) -> AppLink | None:
        return self.channel.link(job_id)

    def values(self, job_id: int) -> Mapping[str, str]:
        return self.persistence.values(job_id)

    def put_value(self, job_id: int, key: str, value: str) -> None:
        self.persistence.put_value(job_id, key, value)

    def app_register(self, job_id: int, link: AppLink) -> None:
        self.channel.register(job_id, link)

    def app_deregister(self, job_id: int) -> None:
        self.channel.deregister(job_id)

    def app_lost(self, job_id: int, link: AppLink) -> None:
        self.channel.lost(job_id, link)

    def app_request(self, job_id: int, count: int) -> None:
        self.channel.request(job_id, count)

    def app_release(self, job_id: int, hosts: list[str]) -> None:
        self.channel.release(job_id, hosts)

    def app_answer(self, job_id: int, verb: str, order_id: int, hosts: list[str], text: str) -> None:
        self.orders.answer(job_id, verb, order_id, hosts, text)

    def app_resume(self, job_id: int, order_id: int | None, hosts: list[str], link: AppLink) -> None:
        self.orders.resume(job_id, order_id, hosts, link)
