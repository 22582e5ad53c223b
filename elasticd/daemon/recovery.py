"""Recovery: a daemon started on a state directory takes back what the previous one left.

First the directory itself (`open_state_dir`, before the journal is opened): one that held
jobs but whose journal is missing, damaged or set back is refused (elasticd.daemon.statecheck),
or rebuilt with --salvage (elasticd.daemon.salvage). Then the saved jobs go back into the
core (`restore`): the queue as it was, running jobs on the same nodes, their secrets and
values, the orders settled without their applications. Then, once the launcher reaches its
nodes (`recover`): each running job's processes are found again and watched, or the job is
requeued (it never ran) or ended NODE_FAIL (its processes are gone); a launch the crash cut
short is ended and requeued; what was in flight (an order, hosts leaving, an end) is settled;
processes of jobs no record holds are ended. No policy pass runs until all of that is done.

It owns nothing after the start but what it says of it (`recovered_jobs`, `salvaged`).
"""

from __future__ import annotations

import asyncio
import logging
import time

from elastic_protocol.jobspec import JobSpec
from elasticd.core import events as ev
from elasticd.core.actions import Action, ArmLimit, Reclaim, Terminate
from elasticd.core.engine import Core
from elasticd.core.events import OrderKind
from elasticd.core.job import Job
from elasticd.core.record import restore_job
from elasticd.daemon.app_channel import AppChannel, held_hosts
from elasticd.daemon.clock import Clock
from elasticd.daemon.config import DaemonConfig
from elasticd.daemon.feed import CoreFeed
from elasticd.daemon.launching import Launching
from elasticd.daemon.orders import Orders
from elasticd.daemon.persistence import Persistence
from elasticd.daemon.salvage import salvage
from elasticd.daemon.statecheck import check as check_state_dir
from elasticd.daemon.timers import JobTimers
from elasticd.errors import NodesMissing
from elasticd.launch.base import Launcher

log = logging.getLogger("elasticd")


def open_state_dir(config: DaemonConfig) -> str | None:
    """Before the journal is opened: refuse a state directory that lost its journal
    (DamagedState), or salvage it when asked; what the salvage did, in words."""
    if not config.journal:
        return None
    if config.salvage:
        report = salvage(config.state_dir).report()
        log.warning("%s", report)
        return report
    check_state_dir(config.state_dir)  # DamagedState: refuse rather than start afresh
    return None


def _launch_hosts(job: Job) -> list[str]:
    """The hosts where a launch starts a process of the job: all of them, but for an MPI job
    only the first, whose mpirun starts the ranks everywhere (MpiLauncher.adopt, given the
    run's record, counts the job found on every host once mpirun is)."""
    return job.hosts[:1] if job.spec.launcher == "mpi" else list(job.hosts)


# Seconds recovery waits, once the launcher has ended the processes of a launch cut short,
# for its report that they are gone (it follows at once; a process SIGKILL cannot end never
# reports).
_CUT_SHORT_WAIT = 30.0


class Recovery:
    def __init__(self, config: DaemonConfig, core: Core, clock: Clock, launcher: Launcher, feed: CoreFeed,
                 persistence: Persistence, launching: Launching, timers: JobTimers, orders: Orders,
                 channel: AppChannel, salvaged: str | None) -> None:
        self.config = config
        self.core = core
        self.clock = clock
        self.launcher = launcher
        self.feed = feed
        self.persistence = persistence
        self.launching = launching
        self.timers = timers
        self.orders = orders
        self.channel = channel
        self.salvaged = salvaged  # what --salvage did (elasticd status)
        self.restored_at = clock.now()
        self.recovered_jobs = 0
        self._restored_limits: list[Action] = []

    def restore(self) -> dict[str, int]:
        """Take the saved jobs into the core; the ports the previous daemon listened on."""
        saved = self.persistence.load()
        if saved is None:
            return {}

        now = self.restored_at = self.clock.now()
        t0 = time.perf_counter()
        jobs = [restore_job(jid, JobSpec.model_validate_json(spec), data) for jid, spec, data in saved.jobs]
        self._check_missing_nodes(jobs)
        # Ids go on from the highest ever given here, whatever rows are left.
        self._restored_limits = self.core.restore(jobs, int(saved.meta.get("next_order", "1")), now,
                                                  next_job_id=int(saved.meta.get("next_job_id", "1")))
        if saved.empty:
            return {k: int(saved.meta[k]) for k in ("control_port", "app_port") if k in saved.meta}
        active = set(self.core.active_ids)
        self.persistence.keep_saved(saved, active)
        for jid in active:
            self._restore_voided(jid)
        self.recovered_jobs = len(jobs)
        log.info("journal: recovered %d job(s): %d pending, %d running, in %.2f s", len(jobs),
                 len(self.core.pending_ids), len(active), time.perf_counter() - t0)
        return {k: int(saved.meta[k]) for k in ("control_port", "app_port") if k in saved.meta}

    def _check_missing_nodes(self, jobs: list[Job]) -> None:
        """Running jobs hold the nodes they held: a start without some of them cannot take
        those jobs over, and would end them (NODE_FAIL) and their processes while saying
        they were recovered. Refused before anything is changed, naming the jobs and nodes,
        unless `drop_missing_nodes` says to end them; then each is named in the log."""
        nodes = set(self.config.node_names)
        missing = {j.job_id: sorted(set(j.hosts) - nodes) for j in jobs if j.state.holds_nodes}
        missing = {jid: hosts for jid, hosts in missing.items() if hosts}
        if not missing:
            return
        held = "; ".join(f"job {jid} on {','.join(hosts)}" for jid, hosts in sorted(missing.items()))
        if not self.config.drop_missing_nodes:
            raise NodesMissing(
                f"refusing to start: running job(s) hold nodes this start leaves out ({held}); start with "
                f"those nodes too, or add --drop-missing-nodes to end those jobs (NODE_FAIL) and their processes")
        for jid, hosts in sorted(missing.items()):
            log.warning("job %d: ends NODE_FAIL and its processes are ended: it holds %s, which this start leaves "
                        "out (--drop-missing-nodes)", jid, ",".join(hosts))

    def _restore_voided(self, job_id: int) -> None:
        """The orders the previous daemon settled without the application, from the job's
        history: an answer to one that comes after the restart is `expired` too, never
        `unknown_order` (which a reconnecting client takes as done)."""
        for e in self.core.job(job_id).events:
            if e.event not in ("deadline_missed", "order_failed") or not (e.detail or "").startswith("order "):
                continue
            order_text = (e.detail or "")[len("order "):].split(":", 1)[0]
            if not order_text.isdigit():
                continue
            reason = ("deadline" if e.event == "deadline_missed" else
                      "launch_failed" if "started on" in (e.detail or "") else "order_dropped")
            self.channel.mark_voided(job_id, int(order_text), reason)

    async def recover(self) -> None:
        """Find the processes of the jobs that were running and settle what was in flight.
        No pass runs meanwhile: a requeued job is started again only once whatever its cut
        short launch left is ended (_requeue_cut_short, _end_strays)."""
        self.feed.hold_passes()
        try:
            await self._take_back()
            await self._end_strays()
        finally:
            self.feed.release_passes()
        self.feed.pass_soon()

    async def _take_back(self) -> None:
        """Each job that held nodes: its processes found again and watched; or, none found,
        requeued if its launch was never recorded (it never ran), else NODE_FAIL. A launch
        that was never recorded and left processes on only some hosts is ended and requeued."""
        now = self.clock.now()
        adopt = getattr(self.launcher, "adopt", None)
        limits = {a.job_id: a for a in self._restored_limits if isinstance(a, ArmLimit)}
        cut_short: dict[int, tuple[list[str], list[str], asyncio.Future[None]]] = {}
        for jid in self.core.active_ids:
            job = self.core.job(jid)
            found: list[str] = []
            if adopt is not None:
                found = await adopt(jid, tuple(job.hosts), self.config.job_dir(jid))
            if not found and not job.launched and adopt is not None and self._all_checked(job.hosts):
                # Started, but the previous daemon died before it launched anything: the job
                # never ran. Back to the queue; whatever a launch left half-started (a wrapper
                # that had not yet recorded itself) carries the job's tag and is ended below,
                # before any pass can start the job again.
                why = "started, but never launched: the daemon stopped before its processes were started"
                log.warning("job %d: %s; back in the queue", jid, why)
                self.feed.do(ev.NeverLaunched(now, jid, why))
                self.feed.job_ended(jid)
                continue
            if not found:
                # "Not found", not "gone": a process whose wrapper died is not found by it,
                # and is ended by its tag below (_end_strays), not left to run.
                why = ("its processes were not found again when the daemon restarted (any still running "
                       "are ended by the job's tag)" if adopt is not None
                       else f"the {self.config.launcher} launcher cannot find processes again after a restart")
                log.warning("job %d: %s: NODE_FAIL", jid, why)
                self.feed.do(ev.JobLost(now, jid, why))
                self.feed.job_ended(jid)
                continue
            log.info("job %d: found again on %s", jid, ",".join(found))
            if not job.launched:
                # Launched by the previous daemon, which died before it recorded so; or the
                # daemon died half way through the launch, and part of the job never started.
                missing = [h for h in _launch_hosts(job) if h not in found]
                if missing and job.ending_as is None and self._all_checked(job.hosts):
                    cut_short[jid] = (found, missing, self.launching.expect_cut_short_end(jid))
                    continue
                if missing:
                    log.warning("job %d: its launch was cut short: no process on %s", jid, ",".join(missing))
                self.feed.do(ev.Launched(now, jid))
            if jid in limits:
                self.timers.arm_limit(limits[jid])
            order = job.order
            if job.ending_as is not None:
                self.feed.execute([Terminate(jid, tuple(job.hosts), job.ending_as)])
            elif order is not None and not order.settled:
                # The previous daemon may have sent it: however it is settled without the
                # application, the application is told when it registers again.
                self.channel.sent_before_restart(jid, order.order_id, held_hosts(job))
                if order.kind is OrderKind.GROW and not set(order.new_hosts) <= set(found):
                    # Its processes on the new hosts were never started: take them back.
                    self.feed.do(ev.OrderUndeliverable(now, jid, order.order_id))
                else:
                    # Settled when the application reconnects (resume) or at the deadline.
                    self.orders.await_answer(jid, order.order_id, now + self.config.order_deadline)
            if job.leaving:
                self.feed.execute([Reclaim(jid, tuple(sorted(job.leaving)), 0.0)])
            self._give_back_unstarted(jid, found)
        if cut_short:
            await asyncio.gather(*(self._requeue_cut_short(jid, found, missing, done, limits.get(jid))
                                   for jid, (found, missing, done) in cut_short.items()))

    def _give_back_unstarted(self, jid: int, found: list[str]) -> None:
        """A running job's hosts where no process of it was ever started: the previous daemon
        died after the application took a grow (`grown`) and before its processes there
        were started, or before it heard that their start failed. Nothing else would ever
        tell this daemon: the job would hold them, with nothing of it there, to its end. They
        go as for a start that failed (JoinLaunchFailed: given back, the job goes on at its
        old size, or ends FAILED below its minimum; its application told `hosts ...
        reason=launch_failed`). A host where a process of the job started and has ended
        since is the launcher's `found` (its end counts at the job's end, as when the daemon
        watches it end). Not here: the leader's host (the job goes with it), hosts already
        leaving, an open grow's (settled above), nodes down (the launcher could not look:
        a node failure), MPI jobs (mpirun on the first host starts the ranks)."""
        job = self.core.job(jid)
        if not job.state.holds_nodes or job.ending_as is not None or job.spec.launcher == "mpi":
            return
        order = job.order
        open_grow = order is not None and not order.settled and order.kind is OrderKind.GROW
        coming = set(order.new_hosts) if order is not None and open_grow else set()
        unstarted = tuple(h for h in job.hosts[1:] if h not in found and h not in job.leaving and h not in coming
                          and self._all_checked([h]))
        if not unstarted:
            return
        why = "none was started there before the daemon stopped (found so at its restart)"
        log.warning("job %d: no process of it on %s, where none was started before the restart: it goes on "
                    "without them", jid, ",".join(unstarted))
        # What its application was told it holds: it is told of the change when it registers.
        self.channel.knew_before_restart(jid, held_hosts(job))
        self.orders.join_failed(job, unstarted, why)

    async def _requeue_cut_short(self, jid: int, found: list[str], missing: list[str], done: asyncio.Future[None],
                                 limit: ArmLimit | None) -> None:
        """A launch the crash cut short: the job's processes run on some of its hosts and
        never started on the others. Taken as launched, it would run without them (an
        application that expects a process on every host misses ranks) and might still end
        COMPLETED. As Slurm requeues a job whose launch failed on a node, what was started is
        ended (its whole process groups, as for a cancel) and the job goes back to the queue,
        to start again, once, on all of its hosts. It is requeued only once the launcher
        reported those processes gone, and no pass runs before recovery is done: the next
        start never runs beside them. If they cannot be seen to end, the job keeps its nodes
        and is taken as launched (it ends as its processes do), rather than requeued beside
        them."""
        why = (f"launch cut short: the daemon stopped after starting it on {','.join(found)} and before "
               f"{','.join(missing)}; what it started was ended")
        log.warning("job %d: its launch was cut short: processes on %s, none on %s; ending them to start the job "
                    "again", jid, ",".join(found), ",".join(missing))

        # Not cancelled half way: SIGKILL follows SIGTERM whatever happens next.
        await self.launcher.terminate(jid, tuple(found))
        try:
            # The launcher's report: every process it found is gone.
            await asyncio.wait_for(asyncio.shield(done), _CUT_SHORT_WAIT)
        except TimeoutError:
            log.error("job %d: its launch was cut short (no process on %s) and its processes on %s were not "
                      "seen to end: it is not started again; it ends as they do", jid, ",".join(missing),
                      ",".join(found))
            self.launching.cut_short_over(jid)
            self.feed.do(ev.Launched(self.clock.now(), jid))
            if limit is not None:
                self.timers.arm_limit(limit)
            return
        self.launching.cut_short_over(jid)
        log.warning("job %d: %s; back in the queue", jid, why)
        self.feed.do(ev.NeverLaunched(self.clock.now(), jid, why))
        self.feed.job_ended(jid)

    def _all_checked(self, hosts: list[str]) -> bool:
        """Whether the launcher could look at every one of these hosts: on a node that is
        down, a process it did not find may still run."""
        nodes = self.core.nodes
        return not any(h in nodes.down or h in nodes.gone for h in hosts)

    async def _end_strays(self) -> None:
        """Processes of jobs this daemon does not run (lost with a damaged journal, salvaged
        as ended, or left by a crash before their end was recorded): found by their tag and
        ended, and said so — never left running untracked."""
        end = getattr(self.launcher, "end_strays", None)
        if end is None:
            return
        for jid, n in (await end(set(self.core.active_ids))).items():
            log.warning("job %d: ended %d process(es) left running with no running record of the job", jid, n)

