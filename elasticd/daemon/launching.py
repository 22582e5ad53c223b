"""Launching and watching a job's processes: the core's Launch, LaunchJoining, Terminate and
Reclaim carried out by the launcher (local, SSH, srun, MPI: elasticd.launch), and what the
launcher reports back (processes exited, hosts given back) handed to the core as events.

Owns the grows being started (`joining`, which `elasticd resize` and equeue's Joining wait
out), the files each job writes (its output cap, checked from a thread), and the exits it
swallows: those of a launch recovery ends on purpose (`expect_cut_short_end`). A launch is
saved before it starts anything: the job's secret and start are in the journal first.
It decides nothing: whether a job ends, shrinks or fails is the core's answer to the
events it hands over.
"""

from __future__ import annotations

import asyncio
import logging
import time
from pathlib import Path

from elasticd.core import events as ev
from elasticd.core.actions import Launch, LaunchJoining, Reclaim, Terminate
from elasticd.core.engine import Core
from elasticd.core.job import Job
from elasticd.daemon.clock import Clock
from elasticd.daemon.config import DaemonConfig, Endpoints
from elasticd.daemon.feed import CoreFeed
from elasticd.daemon.metrics import DaemonMetrics
from elasticd.daemon.nodes import Nodes
from elasticd.daemon.orders import Orders
from elasticd.daemon.persistence import Persistence
from elasticd.daemon.tasks import LoopTasks
from elasticd.errors import LaunchError
from elasticd.launch.base import Launcher, LaunchRequest, output_paths

log = logging.getLogger("elasticd")


class Launching:
    def __init__(self, config: DaemonConfig, core: Core, clock: Clock, launcher: Launcher, feed: CoreFeed,
                 persistence: Persistence, tasks: LoopTasks, orders: Orders, nodes: Nodes, endpoints: Endpoints,
                 metrics: DaemonMetrics | None) -> None:
        self.config = config
        self.core = core
        self.clock = clock
        self.launcher = launcher
        self.feed = feed
        self.persistence = persistence
        self.tasks = tasks
        self.orders = orders
        self.nodes = nodes
        self.endpoints = endpoints
        self.metrics = metrics
        # Jobs whose cut-short launch recovery is ending (Recovery._requeue_cut_short): the
        # launcher's report that their processes are gone resolves these, and is not the job's end.
        self._cut_short: dict[int, asyncio.Future[None]] = {}
        self._outputs: dict[int, set[Path]] = {}  # each running job's output files
        # Hosts where a grow's processes are being started (LaunchJoining under way): the
        # application may have answered `grown` already, and the start still fail (`note`
        # Joining, which `elasticd resize` waits out for the grow's final outcome).
        self.joining: dict[int, set[str]] = {}

    # ---- the core's actions ------------------------------------------------------------------
    def launch(self, a: Launch) -> None:
        self.tasks.spawn(self._launch(a), f"launch-{a.job_id}")

    def terminate(self, a: Terminate) -> None:
        log.info("job %d: ending (%s) on %s", a.job_id, a.ending_as.value, ",".join(a.hosts))
        self.tasks.spawn(self.launcher.terminate(a.job_id, a.hosts), f"terminate-{a.job_id}")

    def join(self, a: LaunchJoining) -> None:
        self.joining.setdefault(a.job_id, set()).update(a.hosts)
        self.tasks.spawn(self._launch_joining(a), f"join-{a.job_id}")

    def reclaim(self, a: Reclaim) -> None:
        log.info("job %d: reclaiming %s", a.job_id, ",".join(a.hosts))
        self.tasks.spawn(self.launcher.reclaim(a.job_id, a.hosts, a.grace), f"reclaim-{a.job_id}")

    def _request(self, job: Job, hosts: tuple[str, ...], all_hosts: tuple[str, ...],
                 joining: bool = False) -> LaunchRequest:
        """What the launcher is asked to start; the files it will write are watched (caps)."""
        req = LaunchRequest(
            job_id=job.job_id,
            spec=job.spec,
            hosts=hosts,
            all_hosts=all_hosts,
            app_address=self.endpoints.app_address,
            job_secret=self.persistence.job_secret(job.job_id) or "",
            job_dir=self.config.job_dir(job.job_id),
            joining=joining,
        )
        self._note_outputs(req)
        return req

    async def _launch(self, a: Launch) -> None:
        job = self.core.job(a.job_id)
        req = self._request(job, a.hosts, a.hosts)
        t0 = time.monotonic()
        try:
            await self.launcher.launch(req)
            if self.metrics is not None:
                self.metrics.launch_seconds.observe(time.monotonic() - t0)
        except Exception as exc:  # whatever went wrong, the job must not stay RUNNING with nothing running
            why = str(exc) if isinstance(exc, LaunchError) else f"internal error: {type(exc).__name__}: {exc}"
            if not isinstance(exc, LaunchError):
                log.exception("job %d: launch failed", a.job_id)
            log.warning("job %d: launch failed: %s", a.job_id, why)
            # Whatever the launcher may have started is ended before the job is called over.
            await self.launcher.terminate(a.job_id, a.hosts)
            code = exc.exit_code if isinstance(exc, LaunchError) else 1
            self.feed.do(ev.LaunchFailed(self.clock.now(), a.job_id, why, code))
            self.feed.job_ended(a.job_id)
            return
        log.info("job %d started on %s", a.job_id, ",".join(a.hosts))
        self.feed.do(ev.Launched(self.clock.now(), a.job_id))
        # Saved at once, before the job is shown RUNNING: after a crash, a recorded start
        # without a recorded launch (and no process found) is requeued, not failed.
        self.persistence.persist()
        if job.ending_as is not None:
            # Cancelled while its processes were being started.
            await self.launcher.terminate(a.job_id, a.hosts)

    async def _launch_joining(self, a: LaunchJoining) -> None:
        job = self.core.job(a.job_id)
        req = self._request(job, a.hosts, a.all_hosts, joining=True)
        try:
            await self.launcher.launch(req)
        except LaunchError as exc:
            log.warning("job %d: could not start on new hosts %s: %s", a.job_id, ",".join(a.hosts), exc)
            # The application may have answered `grown` before the start failed.
            self.orders.join_failed(job, a.hosts, str(exc))
            self.feed.changed()
            self.feed.pass_soon()
        finally:
            self._joined(a)

    def _joined(self, a: LaunchJoining) -> None:
        """The grow's start is over, done or failed (a failure is in the job's history by
        then: no turn of the loop in between shows neither)."""
        hosts = self.joining.get(a.job_id)
        if hosts is not None:
            hosts.difference_update(a.hosts)
            if not hosts:
                del self.joining[a.job_id]

    # ---- what the launcher reports ---------------------------------------------------------
    async def on_exit(self, job_id: int, code: int | None, sig: int | None, ended_at: float | None = None) -> None:
        cut_short = self._cut_short.get(job_id)
        if cut_short is not None:
            # The processes of a launch cut short, ended to start the job again: not its end.
            if not cut_short.done():
                cut_short.set_result(None)
            return
        now = self.clock.now()
        at = now
        if ended_at is not None:
            # It ended while no daemon watched: its end (and its node-seconds) is when its
            # processes ended, not the restart that found them so; never before it started.
            started = self.core.job(job_id).start_time
            at = min(now, ended_at if started is None else max(started, ended_at))
        self.feed.do(ev.Exited(at, job_id, code, sig))
        job = self.core.job(job_id)
        when = "" if at == now else f" (while the daemon was down, {now - at:.0f} s before the restart found it)"
        log.info("job %d ended%s: %s %s", job_id, when, job.state.value, job.exit_text)
        self.feed.job_ended(job_id)

    async def on_hosts_gone(self, job_id: int, hosts: list[str]) -> None:
        job = self.core.jobs.get(job_id)
        order_id = job.order.order_id if job is not None and job.order is not None else None
        self.feed.do(ev.HostsGone(self.clock.now(), job_id, tuple(hosts)))
        self.nodes.hosts_freed(job_id, hosts)  # before a pass could lend them again
        if order_id is not None and (job is None or job.order is None):
            self.orders.settled(order_id)
        log.info("job %d: hosts %s free", job_id, ",".join(hosts))
        self.feed.changed()
        self.feed.pass_soon()

    def expect_cut_short_end(self, job_id: int) -> asyncio.Future[None]:
        """Recovery ends the processes of a launch the crash cut short: their exit, when the
        launcher reports it, resolves this and is not the job's end."""
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._cut_short[job_id] = done
        return done

    def cut_short_over(self, job_id: int) -> None:
        self._cut_short.pop(job_id, None)

    # ---- output caps -------------------------------------------------------------------------
    def _note_outputs(self, req: LaunchRequest) -> None:
        """The files the job's processes on these hosts write (what the output cap counts)."""
        workdir = Path(req.spec.working_dir or Path.home())
        files = self._outputs.setdefault(req.job_id, set())
        for host in req.hosts:
            files.update(output_paths(req.spec, req.job_id, host, req.all_hosts.index(host), workdir))

    async def watch_outputs(self) -> None:
        """End a job whose output passes its cap before it fills the file system (checked every
        output_check_interval seconds: it may write that long past the cap). The files are
        the jobs' own: their sizes are asked from a thread, which a hung file system holds
        (no cap is checked meanwhile), never the event loop."""
        while not self.tasks.stopping:
            await asyncio.sleep(self.config.output_check_interval)
            watched = {jid: files for jid, files in self._outputs.items()
                       if (job := self.core.jobs.get(jid)) is not None and job.state.holds_nodes
                       and job.ending_as is None}
            if not watched:
                continue
            all_sizes = await asyncio.to_thread(_sizes, [f for fs in watched.values() for f in fs])
            for jid, files in watched.items():
                job = self.core.jobs.get(jid)
                if job is None or not job.state.holds_nodes or job.ending_as is not None:
                    continue
                cap = job.spec.output_cap << 20 if job.spec.output_cap is not None else self.config.output_cap
                sizes = {f: all_sizes.get(f, 0) for f in files}
                total = sum(sizes.values())
                if total > cap:
                    worst = max(sizes, key=sizes.__getitem__)
                    why = (f"output cap of {cap >> 20} MiB reached: {total >> 20} MiB written "
                           f"({worst} {sizes[worst] >> 20} MiB)")
                    log.warning("job %d: %s; ending it", jid, why)
                    self.feed.do(ev.OutputLimitReached(self.clock.now(), jid, why))
                    self.feed.changed()

    def forget(self, job_id: int) -> None:
        self._outputs.pop(job_id, None)


def _sizes(paths: list[Path]) -> dict[Path, int]:
    return {p: _size(p) for p in paths}


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0
