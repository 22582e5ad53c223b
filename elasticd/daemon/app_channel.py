"""The application channel's side of each job: which connection speaks for it, and what its
application knows.

Owns the registered connection of each job (its leader: the one that is sent orders and
answers them), the hosts each application was told it holds, the order it was sent, the
orders the daemon settled without its answer (`voided`: a late answer is refused as
expired, never taken for done), what changed while no connection was registered (told to
the next one that registers), and the job's hostfile (ELASTIC_HOSTFILE). After every event
(`after_event`) it tells an application what the daemon changed on its own:
`hosts H... reason=R [order=ID]`.

Requests that are not about orders (register, deregister, request, release) are handed to
the core here; orders and their answers are elasticd.daemon.orders'. It never starts or
ends a process.
"""

from __future__ import annotations

import logging
from typing import Protocol

from elastic_protocol.appchannel import hosts_message
from elasticd.core import events as ev
from elasticd.core.engine import Core
from elasticd.core.events import Event
from elasticd.core.job import Job
from elasticd.daemon.clock import Clock
from elasticd.daemon.config import DaemonConfig
from elasticd.daemon.feed import CoreFeed
from elasticd.errors import OrderRejected

log = logging.getLogger("elasticd")

# Events by which the application itself set its hosts or settled its order: it knows.
_APP_OWN = (ev.ShrinkAnswered, ev.GrowAnswered, ev.HostsReleased, ev.Registered, ev.OrderRefused, ev.OrderDeferred)
# Why the daemon changed a job's hosts, or settled its order, on its own (`hosts reason=...`).
_HOSTS_REASONS: dict[type, str] = {
    ev.OrderDeadline: "deadline", ev.NodeDown: "node_failed", ev.HostsGone: "node_failed",
    ev.JobLost: "node_failed", ev.LaunchFailed: "launch_failed", ev.OrderUndeliverable: "order_dropped",
    ev.JoinLaunchFailed: "launch_failed",
}
# Orders settled without the application remembered per job: enough for any answer in flight.
_VOIDED_KEPT = 16


class AppLink(Protocol):
    """The registered application connection of a job, as the daemon sees it."""

    def send(self, line: bytes) -> bool: ...

    def pending_input(self) -> bool: ...


def held_hosts(job: Job) -> tuple[str, ...]:
    """The hosts a job holds as its application sees them: a grow's new hosts are the
    job's only once the application says it took them; hosts it gave back are gone."""
    coming = set(job.order.new_hosts) if job.order is not None and not job.order.settled else set()
    return tuple(h for h in job.hosts if h not in job.leaving and h not in coming)


class AppChannel:
    def __init__(self, config: DaemonConfig, core: Core, clock: Clock, feed: CoreFeed) -> None:
        self.config = config
        self.core = core
        self.clock = clock
        self.feed = feed
        self._links: dict[int, AppLink] = {}
        # What each registered application knows: its hosts, and the order it was sent.
        self._told: dict[int, tuple[str, ...]] = {}
        self._sent: dict[int, int] = {}
        # Orders the daemon settled without the application's answer: a late answer is told so.
        self._voided: dict[int, dict[int, str]] = {}
        # What changed while the job had no registered connection (its hosts, or the order it
        # was sent, settled): the reason and that order; told when a connection registers.
        self._untold: dict[int, tuple[str, int | None]] = {}
        # The `hosts ... order=ID` line each job's registered connection was last sent.
        self._told_void: dict[int, tuple[AppLink, int]] = {}
        # The hosts last written in each job's hostfile (ELASTIC_HOSTFILE).
        self._hostfiles: dict[int, tuple[str, ...]] = {}

    # ---- the application's requests ---------------------------------------------------------
    def link(self, job_id: int) -> AppLink | None:
        """The job's registered connection (its leader), if one is registered."""
        return self._links.get(job_id)

    def register(self, job_id: int, link: AppLink) -> None:
        self._links[job_id] = link  # what it knows is set at the Registered event
        self.feed.do(ev.Registered(self.clock.now(), job_id))
        self.feed.pass_soon()

    def deregister(self, job_id: int) -> None:
        self.feed.do(ev.Unregistered(self.clock.now(), job_id, final=True))
        self._links.pop(job_id, None)
        for table in (self._told, self._sent, self._untold, self._told_void):
            table.pop(job_id, None)

    def lost(self, job_id: int, link: AppLink) -> None:
        """The registered connection closed: the job runs on as rigid until a connection
        registers again. An order it was sent stays open until its deadline, as after a
        restart of the daemon: the application cannot tell a dropped connection from a
        restarted daemon, so it reconnects and answers it (`resume`) the same way."""
        if self._links.get(job_id) is not link:
            return
        del self._links[job_id]
        self._told_void.pop(job_id, None)
        job = self.core.jobs.get(job_id)
        if job is None or not job.state.holds_nodes:
            return
        log.warning("job %d: its registered connection closed; it runs on as rigid until it registers again",
                    job_id)
        if job.order is not None and not job.order.settled:
            log.info("job %d: order %d stays open until its deadline, for the application to reconnect and "
                     "answer it", job_id, job.order.order_id)
        if job.malleable_ready:
            self.feed.do(ev.Unregistered(self.clock.now(), job_id))
        self.feed.pass_soon()

    def request(self, job_id: int, count: int) -> None:
        self.feed.do(ev.NodesRequested(self.clock.now(), job_id, count))
        self.feed.pass_soon()

    def release(self, job_id: int, hosts: list[str]) -> None:
        job = self.core.job(job_id)
        if job.hosts and job.hosts[0] in hosts:
            raise OrderRejected("bad_hosts", f"release: {job.hosts[0]} is the job's first host, where its leader "
                                "runs; it goes only with the job")
        self.feed.do(ev.HostsReleased(self.clock.now(), job_id, tuple(hosts)))

    # ---- what the application was sent and told ---------------------------------------------
    def order_sent(self, job_id: int, order_id: int) -> None:
        """The application has this order (sent now, or said it handles it): settled
        without its answer, it is told."""
        self._sent[job_id] = order_id

    def voided_reason(self, job_id: int, order_id: int) -> str | None:
        """Why the daemon settled this order without the application's answer, if it did."""
        return self._voided.get(job_id, {}).get(order_id)

    def mark_voided(self, job_id: int, order_id: int, reason: str) -> None:
        marks = self._voided.setdefault(job_id, {})
        marks[order_id] = reason
        while len(marks) > _VOIDED_KEPT:
            del marks[next(iter(marks))]

    def retell_voided(self, job: Job, link: AppLink, order_id: int) -> None:
        """The application resumed an order the daemon settled without it: told again, unless
        this very connection was told already."""
        why = self.voided_reason(job.job_id, order_id)
        if why is not None and self._told_void.get(job.job_id) != (link, order_id):
            self.send_hosts(job.job_id, link, held_hosts(job), why, order_id)

    def sent_before_restart(self, job_id: int, order_id: int, held: tuple[str, ...]) -> None:
        """Recovery: the previous daemon may have sent the job's open order, and its
        application knows these hosts; however the order is settled, it is told."""
        self._sent[job_id] = order_id
        self._told[job_id] = held

    def knew_before_restart(self, job_id: int, held: tuple[str, ...]) -> None:
        """Recovery: what the application knew, unless already set; a change is told when it
        registers."""
        self._told.setdefault(job_id, held)

    def after_event(self, event: Event) -> None:
        """Keep each job's own view true after an event: its hostfile rewritten when its hosts
        changed, and a registered application sent `hosts H... reason=R [order=ID]` when the
        daemon changed its hosts, or settled the order it was sent, on its own (a node
        failed, a deadline passed, a grow could not be launched). What the application did
        itself (its answers, its releases) it knows already. What changed while no
        connection of the job was registered is told to the next one that registers."""
        jid = getattr(event, "job_id", None)
        if isinstance(jid, int):
            ids = [jid]
        elif isinstance(event, (ev.NodeDown, ev.NodesRemoved)):  # the only others that take hosts
            ids = sorted(set(self._links) | set(self._hostfiles))
        else:
            return  # a policy pass orders and starts, but changes no running job's hosts
        for j in ids:
            job = self.core.jobs.get(j)
            if job is None or not job.state.holds_nodes:
                continue
            held = held_hosts(job)
            if isinstance(event, (ev.OrderRefused, ev.OrderDeadline, ev.LaunchFailed, ev.OrderUndeliverable,
                                  ev.JoinLaunchFailed)):
                self._hostfiles.pop(j, None)  # a grow's launch may have written its new hosts there
            self._rewrite_hostfile(j, held)
            link = self._links.get(j)
            sent = self._sent.get(j)
            open_id = job.order.order_id if job.order is not None and not job.order.settled else None
            voided = sent is not None and open_id != sent
            if voided:
                self._sent.pop(j, None)
            if isinstance(event, _APP_OWN):
                untold = self._untold.pop(j, None) if isinstance(event, ev.Registered) else None
                if link is not None and untold is not None:
                    # Changed while no connection was registered (a dropped connection).
                    self.send_hosts(j, link, held, *untold)
                elif link is not None or j in self._told:
                    self._told[j] = held  # what it did itself it knows
                continue
            reason = _HOSTS_REASONS.get(type(event), "daemon")
            if isinstance(event, ev.OrderUndeliverable) and event.why:
                reason = "launch_failed"
            if voided and sent is not None:
                self.mark_voided(j, sent, reason)
            if link is None:
                # Nobody to tell now: the next connection that registers is told (why the
                # order it was sent was settled, else the first reason its hosts changed).
                if voided and sent is not None:
                    self._untold[j] = (reason, sent)
                elif j in self._told and held != self._told[j]:
                    self._untold.setdefault(j, (reason, None))
                continue
            if j not in self._told:
                self._told[j] = held
                continue
            if held == self._told[j] and not voided:
                continue
            self.send_hosts(j, link, held, reason, sent if voided else None)

    def send_hosts(self, job_id: int, link: AppLink, held: tuple[str, ...], reason: str,
                    order_id: int | None) -> None:
        """`hosts H... reason=R [order=ID]` to the job's registered connection."""
        self._told[job_id] = held
        line = hosts_message(held, reason, order_id).encode().decode()
        if order_id is not None:
            self._told_void[job_id] = (link, order_id)
        log.info("job %d: told the application: %s", job_id, line)
        link.send(line.encode() + b"\n")

    def _rewrite_hostfile(self, job_id: int, held: tuple[str, ...]) -> None:
        """ELASTIC_HOSTFILE lists the job's hosts now, after every change (written at launch)."""
        if self._hostfiles.get(job_id) == held:
            return
        path = self.config.job_dir(job_id) / "hostfile"
        if job_id not in self._hostfiles and not path.exists():
            return
        self._hostfiles[job_id] = held
        try:
            tmp = path.with_suffix(".tmp")
            tmp.write_text("".join(f"{h}\n" for h in held))
            tmp.replace(path)
        except OSError as exc:
            log.warning("job %d: cannot rewrite its hostfile: %s", job_id, exc)

    def forget(self, job_id: int) -> None:
        """The job's processes are over: no connection speaks for it any more."""
        for table in (self._told, self._sent, self._voided, self._hostfiles, self._untold, self._told_void,
                      self._links):
            table.pop(job_id, None)
