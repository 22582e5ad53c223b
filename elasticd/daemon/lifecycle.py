"""The daemon's life: start, serve, stop.

At start: the saved jobs back into the core (elasticd.daemon.recovery), the event log's
segment opened, the metrics served, both channels listening (on the previous daemon's ports
when free), the launcher reaching its nodes, the running jobs taken back, daemon.json
written, signals caught; then the periodic pass (`--schedule-interval`), the output caps
and the allocation's driver run until the stop. The stop ends every job (SIGTERM, then
SIGKILL kill-wait later), cancels the queue, tries lost nodes once more, saves the last
state, and says what it could not do (StopNotes); then everything closes in order.

It owns the daemon's secret and record (daemon.json, written again if removed while the
daemon runs) and the order of things at start and stop; what each step does is the part's
that owns it.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
from collections.abc import Callable, Mapping

from elasticd import __version__
from elasticd.core import events as ev
from elasticd.core.engine import Core
from elasticd.daemon.clock import Clock, TimerHandle
from elasticd.daemon.config import DaemonConfig, Endpoints
from elasticd.daemon.control_server import StopNotes
from elasticd.daemon.feed import CoreFeed
from elasticd.daemon.launching import Launching
from elasticd.daemon.line_server import LineServer
from elasticd.daemon.metrics import DaemonMetrics
from elasticd.daemon.nodes import Nodes
from elasticd.daemon.persistence import Persistence
from elasticd.daemon.recovery import Recovery
from elasticd.daemon.tasks import LoopTasks
from elasticd.daemon.timers import JobTimers
from elasticd.launch.base import Launcher
from elasticd.statedir import DAEMON_FILE, DaemonRecord, new_secret, read_record, remove_record, write_record

log = logging.getLogger("elasticd")


class Lifecycle:
    def __init__(self, config: DaemonConfig, core: Core, clock: Clock, launcher: Launcher, *, tasks: LoopTasks,
                 persistence: Persistence, feed: CoreFeed, recovery: Recovery, launching: Launching,
                 timers: JobTimers, nodes: Nodes, endpoints: Endpoints, metrics: DaemonMetrics | None,
                 policy_settings: Mapping[str, object], resize: Callable[[int, int], None],
                 started_at: float) -> None:
        """`resize`: how the allocation's driver shrinks a job to give nodes back."""
        self.config = config
        self.core = core
        self.clock = clock
        self.launcher = launcher
        self.tasks = tasks
        self.persistence = persistence
        self.feed = feed
        self.recovery = recovery
        self.launching = launching
        self.timers = timers
        self.nodes = nodes
        self.endpoints = endpoints
        self.metrics = metrics
        self.policy_settings = policy_settings
        self.resize = resize
        self.started_at = started_at
        self.secret = new_secret()
        self.notes = StopNotes()  # what the stop could not do (its answer says)
        self._tick_handle: TimerHandle | None = None
        self._record: DaemonRecord | None = None  # what daemon.json says, kept written (_keep_record)
        self._record_unwritten = False

    async def serve(self, control: LineServer, app: LineServer, ready: asyncio.Future[None] | None = None) -> None:
        """Start (the journal's jobs back into the core, the channels listening, the launcher
        reaching its nodes, the running jobs taken back), serve until stopped, then close
        everything in order and save the last state."""
        cfg = self.config
        # No pass before the running jobs are taken back (Recovery.recover): the servers listen and
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
            self.endpoints.metrics_url = f"http://{cfg.listen_host}:{port}/metrics"
            log.info("metrics on %s", self.endpoints.metrics_url)
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
        self._tick_handle = self.clock.call_at(self.clock.now() + cfg.schedule_interval, self._tick)
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
            if self.tasks.stopping:
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
            self.persistence.close(finished=self.tasks.stopping and not self.core.active_ids)
            remove_record(cfg.state_dir, os.getpid())
            log.info("elasticd stopped")

    async def stop(self) -> list[int]:
        """End every running job cleanly (and report which were seen ending), cancel the queue,
        exit; what could not be done is in `notes`."""
        if self.tasks.stopping:
            await self.tasks.wait_stopped()
            return []
        self.tasks.begin_stop()
        now = self.clock.now()
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
        unreached_note = not_ended = None
        if reach is not None:
            # A node lost during the stop (under a job being ended: the job ends, but what it
            # left there was not seen ending) is tried too, briefly: it was said ended, with
            # its process running on and the stop's exit 0. Those tried above are not again.
            unreached.update(await reach(2.0, skip=set(unreached)))
        if unreached:
            unreached_note = "; ".join(
                f"could not reach {host}: the processes of job {','.join(map(str, jobs))} there may still run"
                for host, jobs in sorted(unreached.items())) + (
                f"; `elasticd start` on {self.config.state_dir} ends them once it reaches the node")
        # Only the jobs seen ending are answered as ended: the others stay in the journal,
        # for the next start to take back.
        left = self.core.active_ids
        if left:
            not_ended = (
                f"job(s) {', '.join(map(str, left))} not seen ending within the kill-wait + 3 s (a process stuck "
                f"in the kernel, or a launcher that did not answer): their processes may still run; "
                f"`elasticd start` on {self.config.state_dir} takes them back and ends what is left of them (a job "
                "whose processes left no recorded exit then ends NODE_FAIL)")
        self.notes = StopNotes(not_ended, self._final_save(), unreached_note)
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
        msg = (f"could not save the final state of job(s) {ids}: {self.persistence.write_error}. A daemon started "
               f"again on {self.config.state_dir} shows them as last saved (one saved running ends there as its "
               f"processes' recorded exit says: FAILED with the signal that ended it, or NODE_FAIL without one); "
               f"their ends are in {self.config.state_dir / 'daemon.log'}")
        log.error("stopping: %s", msg)
        return msg

    async def _wait_for(self, done: Callable[[], bool], timeout: float) -> bool:
        """Wait until `done()` holds after a change, at most `timeout` seconds."""
        return await self.tasks.wait(done, timeout) or done()

    def _tick(self) -> None:
        self._tick_handle = self.clock.call_at(self.clock.now() + self.config.schedule_interval, self._tick)
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
        if rec is None or self.tasks.stopping:
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

    def _refresh_metrics(self) -> None:
        if self.metrics is None or self.tasks.stopping:
            return
        allocation = self.nodes.allocation_status()
        self.metrics.refresh(self.core, None if allocation is None else allocation["node_seconds"])
        self.clock.call_at(self.clock.now() + 1.0, self._refresh_metrics)

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
