"""The daemon: turns sockets, process exits and timers into core events, and core actions
into processes.

Everything that changes job state runs on the event loop thread, one event at a time, so
the core needs no locks. Scheduling is coalesced: many events in one loop iteration (a
burst of submissions) cost one policy call.

Crash safety: what the core changed is saved in the journal (elasticd.daemon.journal)
before any reply is written and before any action is carried out (`persist`). A daemon
started on a state directory whose journal holds jobs takes them back (`_recover`): the
queue as it was, running jobs on the same nodes with their processes found again by the
launcher, their applications reconnecting to the same ports with the same secrets.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
from collections import Counter
from collections.abc import Callable, Mapping

from elastic_protocol.control import Queue, QueueDocument, StatusInfo
from elastic_protocol.jobspec import JobKind, JobSpec
from elastic_protocol.version import PROTOCOL_VERSION
from elasticd import __version__
from elasticd.core import events as ev
from elasticd.core.actions import ArmLimit, Launch, LaunchJoining, Reclaim, SendOrder, Terminate
from elasticd.core.engine import Core
from elasticd.core.job import Job
from elasticd.daemon.app_channel import AppChannel, AppLink
from elasticd.daemon.app_server import AppServer
from elasticd.daemon.clock import Clock, TimerHandle, WallClock
from elasticd.daemon.config import DaemonConfig, Endpoints
from elasticd.daemon.control_server import ControlServer, StopNotes
from elasticd.daemon.feed import CoreFeed
from elasticd.daemon.launching import Launching
from elasticd.daemon.line_server import LineServer
from elasticd.daemon.metrics import DaemonMetrics
from elasticd.daemon.nodes import Nodes
from elasticd.daemon.orders import Orders
from elasticd.daemon.persistence import Persistence
from elasticd.daemon.recovery import Recovery, open_state_dir
from elasticd.daemon.room import DiskRoom
from elasticd.daemon.tasks import LoopTasks
from elasticd.daemon.timers import JobTimers
from elasticd.daemon.views import job_info, job_note, node_infos
from elasticd.errors import QueueFull, ResizeRejected, StateWriteError
from elasticd.launch.base import Launcher
from elasticd.launch.choose import make_launcher
from elasticd.policies.config import build_policy, policy_params
from elasticd.statedir import (
    DAEMON_FILE,
    DaemonRecord,
    new_secret,
    read_record,
    remove_record,
    state_tag,
    write_record,
)

log = logging.getLogger("elasticd")

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
        self.config = config
        self.clock: Clock = clock if clock is not None else WallClock()
        self.core = Core(
            config.node_names,
            build_policy(config.policy, config.policy_config, config.policy_params,
                         min_resize_interval=config.min_resize_interval),
            order_deadline=config.order_deadline,
        )
        if config.allocation_rules is not None and config.allocation_rules.grow_max:
            self.core.grow_to = config.allocation_rules.grow_max  # jobs that wait for growth
        # Effective parameter values, shown by `elasticd status`.
        self.policy_settings = {
            k: v for k, v in policy_params(config.policy, config.policy_config, config.policy_params,
                                           config.min_resize_interval).items()
        }
        # The launcher reports to parts built after it (they need it, and the state directory
        # is checked in between): through these.
        self.launcher = launcher_factory(
            config.launcher,
            on_exit=lambda *a: self.launching.on_exit(*a),
            on_hosts_gone=lambda *a: self.launching.on_hosts_gone(*a),
            on_host_down=lambda *a: self.nodes.node_down(*a),
            on_host_up=lambda *a: self.nodes.node_up(*a),
            kill_wait=config.kill_wait,
            options=config.launcher_options,
            tag=state_tag(config.state_dir),
        )
        self.metrics: DaemonMetrics | None = DaemonMetrics() if config.metrics_port is not None else None
        self.metrics_url: str | None = None  # where they are served: the port bound, --metrics-port 0 too
        self.secret = new_secret()
        self.started_at = self.now()
        self.tasks = LoopTasks()
        self._tick_handle: TimerHandle | None = None
        self.endpoints = Endpoints()
        salvaged = open_state_dir(config)
        self.persistence = Persistence(config, self.core, self.clock, self.metrics)
        self.room = DiskRoom(config.state_dir, config.min_free_space, reserve=config.journal)
        self.feed = CoreFeed(self.core, self.clock, self.persistence, self.room, self.tasks)
        self.timers = JobTimers(self.core, self.clock, self.feed)
        self.channel = AppChannel(config, self.core, self.clock, self.feed)
        base = _host_launcher(self.launcher)
        self.orders = Orders(config, self.core, self.clock, self.feed, self.channel, base, self.metrics)
        if hasattr(base, "on_join_failed"):
            base.on_join_failed = self.orders.on_join_failed
        self.nodes = Nodes(config, self.core, self.clock, self.feed, self.launcher)
        self.launching = Launching(config, self.core, self.clock, self.launcher, self.feed, self.persistence,
                                   self.tasks, self.orders, self.nodes, self.endpoints, self.metrics)
        self.recovery = Recovery(config, self.core, self.clock, self.launcher, self.feed, self.persistence,
                                 self.launching, self.timers, self.orders, self.channel, salvaged)
        self.stop_unsaved: str | None = None  # what the stop could not save (its answer says)
        self.stop_unreached: str | None = None  # nodes where the stop could not end what jobs left
        self.stop_not_ended: str | None = None  # jobs the stop did not see end, and what comes of them
        self._record: DaemonRecord | None = None  # what daemon.json says, kept written (_keep_record)
        self._record_unwritten = False
        self.feed.on_action(Launch, self.launching.launch)
        self.feed.on_action(Terminate, self.launching.terminate)
        self.feed.on_action(LaunchJoining, self.launching.join)
        self.feed.on_action(SendOrder, self.orders.send)
        self.feed.on_action(Reclaim, self.launching.reclaim)
        self.feed.on_action(ArmLimit, self.timers.arm_limit)
        self.feed.check_wiring()
        self.feed.after_event(self.timers.after_event)
        self.feed.after_event(self.channel.after_event)
        for forget in (self.launching.forget, self.nodes.forget, self.timers.forget, self.persistence.forget_job,
                       self.channel.forget, self.orders.forget):
            self.feed.on_job_end(forget)

    def now(self) -> float:
        return self.clock.now()

    # ---- life cycle ----------------------------------------------------------------
    async def serve(self, ready: asyncio.Future[None] | None = None) -> None:
        cfg = self.config
        control = ControlServer(self, cfg, cfg.max_line_bytes)
        app = AppServer(self, cfg, cfg.max_app_line_bytes)
        # No pass before the running jobs are taken back (_recover): the servers listen and
        # the launcher reaches its nodes first, and a pass then (an application reconnecting
        # asks for one) would see a node not yet found unreachable as idle and a job whose
        # processes the launcher has not taken over yet: in cluster mode it ordered that job
        # onto that node, failed to start there ("no running processes to join"), freed the
        # node and ordered it again, hundreds of times a second until the node's connect
        # timed out.
        self.feed.hold_passes()
        ports = self.recovery.restore()
        # The segment opens before anything can feed the core (the launcher's start reports the
        # nodes it cannot reach): its events must follow the header that a replay builds on.
        self._log_start()
        if self.metrics is not None and cfg.metrics_port is not None:
            self.metrics.count_from_now(self.core)
            port = self.metrics.serve(cfg.listen_host, cfg.metrics_port)
            self.metrics_url = f"http://{cfg.listen_host}:{port}/metrics"
            log.info("metrics on %s", self.metrics_url)
            self._refresh_metrics()
        csrv = await _listen(control, cfg.listen_host, cfg.control_port or ports.get("control_port", 0), "control")
        wanted_app_port = cfg.app_port or ports.get("app_port", 0)
        asrv = await _listen(app, cfg.app_host, wanted_app_port, "application")
        start_launcher = getattr(self.launcher, "start", None)
        if start_launcher is not None:
            # Cluster mode: reach every node before taking jobs; unreachable ones start down.
            await start_launcher(list(self.core.nodes.names))
        chost, cport = csrv.sockets[0].getsockname()[:2]
        ahost, aport = asrv.sockets[0].getsockname()[:2]
        if wanted_app_port and aport != wanted_app_port:
            self.endpoints.app_port_taken = (wanted_app_port, aport)
        self.endpoints.control_address = f"{chost}:{cport}"
        self.endpoints.app_address = f"{ahost}:{aport}"
        self.persistence.save_ports(cport, aport)
        await self.recovery.recover()
        self.persistence.persist()
        self._record = DaemonRecord(
            pid=os.getpid(),
            control_host=chost,
            control_port=cport,
            app_host=ahost,
            app_port=aport,
            secret=self.secret,
            version=__version__,
            started_at=self.started_at,
            kill_wait=cfg.kill_wait,
        )
        write_record(cfg.state_dir, self._record)
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            loop.add_signal_handler(sig, lambda: self.tasks.spawn(self.stop(), "stop-on-signal"))
        # A full disk under RLIMIT_FSIZE must fail a write (EFBIG), not kill the daemon.
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        log.info(
            "elasticd %s listening: control %s, applications %s; %d nodes, policy %s",
            __version__, self.endpoints.control_address, self.endpoints.app_address,
            self.core.nodes.total, cfg.policy,
        )
        self._tick_handle = self.clock.call_at(self.now() + cfg.schedule_interval, self._tick)
        self.tasks.spawn(self.launching.watch_outputs(), "output-cap")
        await self.nodes.start_allocation(self.resize, self.tasks)
        if ready is not None:
            ready.set_result(None)
        try:
            await self.tasks.wait_stopped()
        finally:
            if self._tick_handle is not None:
                self._tick_handle.cancel()
            self.timers.cancel_guards()
            csrv.close()
            asrv.close()
            if self.stopping:
                await self.nodes.close_allocation()
            for what, closing in (("applications", app.close_all()), ("control", control.close_all()),
                                  ("launcher", self.launcher.close())):
                try:
                    await asyncio.wait_for(closing, 2.0)
                except TimeoutError:
                    log.error("stopping: closing the %s took more than 2 s; going on", what)
            await self.tasks.cancel_all(2.0)
            # The last events, and their history. A stop ends every job: nothing is left for a
            # later daemon to recover.
            self.persistence.close(finished=self.stopping and not self.core.active_ids)
            remove_record(cfg.state_dir, os.getpid())
            log.info("elasticd stopped")

    async def stop(self) -> list[int]:
        """End every running job cleanly (and report which were seen ending), cancel the queue, exit."""
        if self.tasks.stopping:
            await self.tasks.wait_stopped()
            return []
        self.tasks.begin_stop()
        now = self.now()
        running = self.core.active_ids
        log.info("stopping: ending %d running job(s) %s", len(running), running)
        self.feed.do(ev.StopRequested(now))
        # Meanwhile, the nodes lost under jobs are tried once more (cluster mode): what those
        # jobs left there is otherwise ended only when the node is retried, after the stop.
        reach = getattr(self.launcher, "reach_lost", None)
        reaching = None if reach is None else asyncio.ensure_future(reach(self.config.kill_wait + 3.0))
        # Each job gets SIGTERM, then SIGKILL kill_wait later; past that (a process stuck in
        # the kernel, a launcher that does not answer) the daemon stops anyway, says which
        # jobs it could not see end, and leaves them to the next start's recovery.
        if not await self._wait_for(lambda: not self.core.active_ids, self.config.kill_wait + 3.0):
            log.error("stopping: job(s) %s not seen ending within kill-wait + 3 s; stopping anyway (the next "
                      "start ends what is left of them)", self.core.active_ids)
        unreached: dict[str, list[int]] = {} if reaching is None else await reaching
        if reach is not None:
            # A node lost during the stop (under a job being ended: the job ends, but what it
            # left there was not seen ending) is tried too, briefly: it was said ended, with
            # its process running on and the stop's exit 0. Those tried above are not again.
            unreached.update(await reach(2.0, skip=set(unreached)))
        if unreached:
            self.stop_unreached = "; ".join(
                f"could not reach {host}: the processes of job {','.join(map(str, jobs))} there may still run"
                for host, jobs in sorted(unreached.items())) + (
                f"; `elasticd start` on {self.config.state_dir} ends them once it reaches the node")
        # Only the jobs seen ending are answered as ended: the others stay in the journal,
        # for the next start to take back.
        left = self.core.active_ids
        if left:
            self.stop_not_ended = (
                f"job(s) {', '.join(map(str, left))} not seen ending within the kill-wait + 3 s (a process stuck "
                f"in the kernel, or a launcher that did not answer): their processes may still run; "
                f"`elasticd start` on {self.config.state_dir} takes them back and ends what is left of them (a job "
                "whose processes left no recorded exit then ends NODE_FAIL)")
        self.stop_unsaved = self._final_save()
        self.tasks.mark_stopped()
        unseen = {j for jobs in unreached.values() for j in jobs}
        return [j for j in running if j not in left and j not in unseen]

    def _final_save(self) -> str | None:
        """Save the jobs' last states before the stop is answered; what could not be saved,
        in words for the operator (None: all saved). A job whose end is not saved comes back
        at the next start as last saved: one that was running then ends as the exit status
        its processes left says (its wrapper's, kept on a full disk too: fresh_proc_files),
        or NODE_FAIL where there is none."""
        if not self.persistence.enabled:
            return None
        self.persistence.persist()
        if self.persistence.write_error is None:
            return None
        changed = self.core.take_changed()
        self.core.requeue_changed(changed)
        ids = ", ".join(str(j.job_id) for j in changed) or "none"
        msg = (f"could not save the final state of job(s) {ids}: {self.persistence.write_error}. A daemon started again on "
               f"{self.config.state_dir} shows them as last saved (one saved running ends there as its processes' "
               f"recorded exit says: FAILED with the signal that ended it, or NODE_FAIL without one); "
               f"their ends are in {self.config.state_dir / 'daemon.log'}")
        log.error("stopping: %s", msg)
        return msg

    async def _wait_for(self, done: Callable[[], bool], timeout: float) -> bool:
        """Wait until `done()` holds after a change, at most `timeout` seconds."""
        return await self.tasks.wait(done, timeout) or done()

    @property
    def stopping(self) -> bool:
        return self.tasks.stopping

    # ---- the journal -----------------------------------------------------------------
    def persist(self) -> None:
        self.persistence.persist()

    def _refresh_metrics(self) -> None:
        if self.metrics is None or self.stopping:
            return
        allocation = self.nodes.allocation_status()
        self.metrics.refresh(self.core, None if allocation is None else allocation["node_seconds"])
        self.clock.call_at(self.now() + 1.0, self._refresh_metrics)

    def submit(self, spec: JobSpec) -> int:
        if self.room.without_reserve() is not None:
            raise StateWriteError(f"not taken: {self.room.reserve_missing}; nothing was queued")
        if self.core.pending_count >= self.config.max_queued_jobs:
            raise QueueFull(f"the queue holds {self.config.max_queued_jobs} pending jobs, its limit; "
                            "submit again once some have started")
        job_id = self.core.next_job_id
        self.feed.do(ev.Submitted(self.now(), job_id, spec))
        if self.metrics is not None:
            self.metrics.submitted.inc()
        log.info("job %d submitted: %s, nodes %s", job_id, spec.name, spec.nodes)
        self.feed.pass_soon()
        return job_id

    def cancel(self, job_id: int) -> tuple[str, str | None]:
        """The job's state after the cancel, and None; or, when the cancel cannot be saved
        (a full disk), it is carried out all the same — the operator's way to end the job
        that fills the disk — and the second value says what was not saved and what a
        restart before it is saved would show."""
        event = ev.CancelRequested(self.now(), job_id)
        unsaved: str | None = None
        try:
            self.feed.do(event)
        except StateWriteError as exc:
            held = self.core.job(job_id).state.holds_nodes
            self.feed.do(event, saved=False)
            after = ("ended as its processes' recorded exit says (they are ended now: FAILED with SIGTERM's "
                     "signal, or NODE_FAIL if none was recorded)" if held
                     else "PENDING again (cancel it again then)")
            unsaved = (f"job {job_id} is cancelled, but the cancel could not be saved ({exc}); it is saved as soon "
                       f"as the state directory takes writes again; a daemon restarted before that shows the job "
                       f"{after}")
            log.warning("%s", unsaved)
        self.feed.changed()
        self.feed.pass_soon()
        return self.core.job(job_id).state.value, unsaved

    def resize(self, job_id: int, nodes: int, hold: bool = False) -> None:
        self.feed.do(ev.ResizeRequested(self.now(), job_id, nodes, hold))
        self.feed.changed()

    def release_hold(self, job_id: int) -> None:
        job = self.core.job(job_id)
        if job.state.is_final:
            # A hold ends with its job: `released; the policy may resize it again` said of a
            # finished job (held until it ended) would be false. Refused here, as `resize`
            # refuses it, so that the core replays the logs that recorded such a release.
            raise ResizeRejected(f"job {job_id} is {job.state.value}, not running")
        self.feed.do(ev.HoldReleased(self.now(), job_id))
        self.feed.changed()
        self.feed.pass_soon()

    def _tick(self) -> None:
        self._tick_handle = self.clock.call_at(self.now() + self.config.schedule_interval, self._tick)
        self._keep_record()
        if self.core.pending_ids or self.core.active_ids:
            self.feed.pass_soon()
        elif self.persistence.write_error is not None:
            self.persistence.persist_soon()  # what is held in memory is saved once the disk has room

    def _keep_record(self) -> None:
        """Write daemon.json again when it is gone or names another process (removed by hand
        or by a cleanup while the daemon runs): without it no tool finds the daemon, and
        `elasticd stop` cannot stop it. Tried at each tick until it can be written."""
        rec = self._record
        if rec is None or self.stopping:
            return
        found = read_record(self.config.state_dir)
        if found == rec:
            return
        try:
            write_record(self.config.state_dir, rec)
        except OSError as exc:
            if not self._record_unwritten:  # once, not at every tick
                log.error("%s/%s is %s and cannot be written again (%s): the tools cannot find this daemon",
                          self.config.state_dir, DAEMON_FILE, "gone" if found is None else "another daemon's",
                          exc.strerror or exc)
            self._record_unwritten = True
            return
        self._record_unwritten = False
        log.warning("%s/%s was %s while this daemon ran: written again", self.config.state_dir, DAEMON_FILE,
                    "removed" if found is None else "replaced")

    # ---- the application channel -------------------------------------------------------
    def app_register(self, job_id: int, link: AppLink) -> None:
        self.channel.register(job_id, link)

    def app_deregister(self, job_id: int) -> None:
        self.channel.deregister(job_id)

    def app_lost(self, job_id: int, link: AppLink) -> None:
        self.channel.lost(job_id, link)

    def app_answer(self, job_id: int, verb: str, order_id: int, hosts: list[str], text: str) -> None:
        self.orders.answer(job_id, verb, order_id, hosts, text)

    def app_resume(self, job_id: int, order_id: int | None, hosts: list[str], link: AppLink) -> None:
        self.orders.resume(job_id, order_id, hosts, link)

    def app_request(self, job_id: int, count: int) -> None:
        self.channel.request(job_id, count)

    def app_release(self, job_id: int, hosts: list[str]) -> None:
        self.channel.release(job_id, hosts)

    def cut_off(self) -> list[int]:
        """The running resizable jobs whose applications cannot reconnect: started before this
        start, which found their application port taken, and not registered since. Their
        library knows only the address it was started with; they run as rigid to their end."""
        if self.endpoints.app_port_taken is None:
            return []
        return [j.job_id for j in map(self.core.job, self.core.active_ids)
                if j.kind in (JobKind.MALLEABLE, JobKind.EVOLVING) and not j.malleable_ready and not j.deregistered
                and j.start_time is not None and j.start_time < self.started_at]

    def app_channel_problem(self) -> str | None:
        """Why applications of jobs taken back cannot reconnect, in words (`elasticd start`,
        `elasticd status`; the jobs' AppPortTaken); None when they can."""
        jobs = self.cut_off()
        if not jobs or self.endpoints.app_port_taken is None:
            return None
        old, new = self.endpoints.app_port_taken
        return (f"the application port {old} of the previous daemon was held by another process at this start, "
                f"so this one listens on {new}: the applications of job(s) {', '.join(map(str, jobs))} cannot "
                f"reconnect, and those jobs run as rigid to their end (port {old} free at `elasticd start` keeps "
                "them malleable across a restart)")

    def storage_problem(self) -> str | None:
        """What the state directory keeps from happening, in words (`elasticd status`, and
        the pending jobs' StateDiskFull): too little free space to start jobs, or the last
        write that failed; None when neither."""
        problems = [self.room.space_warning] if self.room.short_of_space() else []
        if self.persistence.write_error is not None:
            problems.append(f"the last write failed: {self.persistence.write_error} (changes held in memory until one succeeds; "
                            "submissions, answers and starts are refused meanwhile)")
        return "; ".join(p for p in problems if p) or None

    def _log_start(self) -> None:
        """Open the log's segment for this daemon start: what a replay needs to build the
        same core (see elasticd.replay)."""
        core = self.core
        self.persistence.log_start({
            "version": __version__, "time": self.recovery.restored_at, "recovered": self.recovery.recovered_jobs > 0,
            "nodes": core.nodes.members, "policy": core.policy.name, "params": dict(self.policy_settings),
            "order_deadline": core.order_deadline, "refuse_backoff": core.refuse_backoff,
            "next_job_id": core.next_job_id, "next_order": core.next_order_id, "grow_to": core.grow_to,
        })

    def put_value(self, job_id: int, key: str, value: str) -> None:
        self.persistence.put_value(job_id, key, value)

    def queue(self, req: Queue) -> QueueDocument:
        d = self
        now = d.now()
        if req.job_ids is not None:
            jobs = [d.core.job(j) for j in req.job_ids]
        else:
            jobs = [j for j in d.core.jobs.values() if req.all or not j.state.is_final]
        pending = d.core.pending_ids
        # The first that waits for nodes: one the cluster is too small for waits for no turn.
        head = next((j for j in pending if j not in d.core.cannot_start), None)
        blocked = bool(pending) and d.storage_problem() is not None
        cut_off = set(d.cut_off())
        return QueueDocument(generated_at=now,
                             jobs=[job_info(j, now, job_note(j, now, j.job_id == head, blocked, j.job_id in d.launching.joining,
                                                             j.job_id in cut_off))
                                   for j in jobs])

    def status(self) -> StatusInfo:
        d = self
        counts = Counter(j.state.value for j in d.core.jobs.values())
        return StatusInfo(
            version=__version__,
            protocol=PROTOCOL_VERSION,
            pid=os.getpid(),
            mode=d.config.mode,
            policy=d.core.policy.name,
            policy_params={k: (v if isinstance(v, (int, float, str, bool)) else str(v)) for k, v in d.policy_settings.items()},
            started_at=d.started_at,
            control_address=d.endpoints.control_address,
            app_address=d.endpoints.app_address,
            nodes=node_infos(d.core.nodes),
            jobs_by_state=dict(counts),
            journal=None if d.persistence.journal is None else str(d.persistence.journal.path),
            recovered_jobs=d.recovery.recovered_jobs,
            salvaged=d.recovery.salvaged,
            storage=d.storage_problem(),
            applications=d.app_channel_problem(),
            allocation=d.nodes.allocation_status(),
            metrics=d.metrics_url,
        )

    # ---- what the channels ask (control_server.ControlCalls, app_server.AppCalls) ----------
    def job(self, job_id: int) -> Job:
        return self.core.job(job_id)

    def pending_ids(self) -> list[int]:
        return self.core.pending_ids

    def job_secret(self, job_id: int) -> str | None:
        return self.persistence.job_secret(job_id)

    def leader(self, job_id: int) -> AppLink | None:
        return self.channel.link(job_id)

    def values(self, job_id: int) -> Mapping[str, str]:
        return self.persistence.values(job_id)

    @property
    def stopped(self) -> bool:
        return self.tasks.stopped

    def stop_notes(self) -> StopNotes:
        return StopNotes(self.stop_not_ended, self.stop_unsaved, self.stop_unreached)

    async def wait_jobs(self, job_ids: list[int] | None, timeout: float | None) -> bool:
        """True once every given job (all jobs when None) has ended; False on timeout."""

        def done() -> bool:
            ids = self.core.jobs.keys() if job_ids is None else job_ids
            return all(self.core.job(j).state.is_final for j in ids)

        return await self.tasks.wait(done, timeout)


async def _listen(server: LineServer, host: str, port: int, what: str) -> asyncio.Server:
    """Listen on `port` (the one a previous daemon used, after a restart); any port if taken."""
    try:
        return await server.start(host, port)
    except OSError as exc:
        if port == 0:
            raise
        log.warning("%s channel: port %d is taken (%s); listening on another one: applications "
                    "of recovered jobs cannot reconnect", what, port, exc.strerror)
        return await server.start(host, 0)
