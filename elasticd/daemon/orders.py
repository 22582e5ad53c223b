"""Orders to applications: a resize sent, its deadline, and the application's answer.

The core decides an order (SendOrder) and what each answer means; this part carries it:
it sends `shrink N` / `grow N host...` to the job's registered connection, arms the order's
deadline, takes the answer (`shrunk` / `grown` / `refuse` / `defer`) back to the core, and
settles the order without the application when the deadline passes, when the connection
that resumed is not handling it, or when a grow's new processes could not start. An answer
that could not be saved (a full disk) settles the order at its deadline, never hosts the
application did not name.

What the application knows and is told is elasticd.daemon.app_channel's; this part never
starts or ends a process (a grow's processes are elasticd.daemon.launching's).
"""

from __future__ import annotations

import dataclasses
import logging
import time

from elastic_protocol.appchannel import grow_order, parse_seconds, shrink_order
from elasticd.core import events as ev
from elasticd.core.actions import SendOrder
from elasticd.core.engine import Core
from elasticd.core.events import Event, OrderKind
from elasticd.core.job import Job
from elasticd.daemon.app_channel import AppChannel, AppLink
from elasticd.daemon.clock import Clock, TimerHandle
from elasticd.daemon.config import DaemonConfig
from elasticd.daemon.feed import CoreFeed
from elasticd.daemon.metrics import DaemonMetrics
from elasticd.errors import ElasticError, OrderRejected, StateWriteError

log = logging.getLogger("elasticd")

# How many times a deadline waits for input already sent before it is applied, and how long.
_DEADLINE_INPUT_WAITS = 40
_DEADLINE_INPUT_STEP = 0.05

# An answer as the application sent it: (order, verb, hosts, text).
Said = tuple[int, str, tuple[str, ...], str]


class Orders:
    def __init__(self, config: DaemonConfig, core: Core, clock: Clock, feed: CoreFeed, channel: AppChannel,
                 joins: object, metrics: DaemonMetrics | None) -> None:
        """`joins`: the launcher that starts a grow's processes (told when the application
        took them: `confirm_joined`)."""
        self.config = config
        self.core = core
        self.clock = clock
        self.feed = feed
        self.channel = channel
        self.joins = joins
        self.metrics = metrics
        self._deadlines: dict[int, TimerHandle] = {}  # by order
        self._deadline_waits: dict[int, int] = {}
        self._order_sent_at: dict[int, float] = {}
        # An application's answer that could not be saved (the disk was full), by order: what
        # the order is settled with at its deadline, never hosts the application did not name.
        self._unsaved_answers: dict[int, tuple[Event, Said]] = {}
        # The answer an order was settled with at its deadline, unsaved: the application's own
        # retry of it is `ok`, not `unknown_order`.
        self._taken_late: dict[int, Said] = {}

    # ---- sending, and the deadline ---------------------------------------------------------
    def send(self, a: SendOrder) -> None:
        msg = (
            shrink_order(a.count, a.order_id, a.deadline_s)
            if a.kind is OrderKind.SHRINK
            else grow_order(list(a.hosts), a.order_id, a.deadline_s)
        )
        link = self.channel.link(a.job_id)
        log.info("job %d: order %d: %s", a.job_id, a.order_id, msg.encode().decode())
        if link is None or not link.send(msg.encode() + b"\n"):
            self.feed.do(ev.OrderUndeliverable(self.clock.now(), a.job_id, a.order_id))
            self.feed.pass_soon()
            return
        self.channel.order_sent(a.job_id, a.order_id)
        self._order_sent_at[a.order_id] = time.monotonic()
        self._deadlines[a.order_id] = self.clock.call_at(
            self.clock.now() + a.deadline_s, self._deadline, a.job_id, a.order_id
        )
        self.feed.changed()

    def _deadline(self, job_id: int, order_id: int) -> None:
        self._deadlines.pop(order_id, None)
        link = self.channel.link(job_id)
        waited = self._deadline_waits.get(order_id, 0)
        if link is not None and waited < _DEADLINE_INPUT_WAITS and link.pending_input():
            # What the application sent before the deadline is handled first (after a pause
            # of the daemon the deadline and the answer are both due at once).
            self._deadline_waits[order_id] = waited + 1
            self._deadlines[order_id] = self.clock.call_at(
                self.clock.now() + _DEADLINE_INPUT_STEP, self._deadline, job_id, order_id)
            return
        self._deadline_waits.pop(order_id, None)
        if self._settle_with_unsaved_answer(job_id, order_id):
            return
        log.warning("job %d: order %d: deadline passed without an answer", job_id, order_id)
        self.feed.do(ev.OrderDeadline(self.clock.now(), job_id, order_id))
        self.feed.changed()

    def _settle_with_unsaved_answer(self, job_id: int, order_id: int) -> bool:
        """At an order's deadline, the application's answer that could not be saved settles
        it: the application acted on it already (a shrink's processes on the hosts it named
        are ending), so the daemon's own default (the last hosts) could end processes on
        hosts the application still uses. Saved if the disk has room by now, else applied
        as a fact and saved at the next write."""
        unsaved = self._unsaved_answers.pop(order_id, None)
        if unsaved is None:
            return False
        answer, said = unsaved
        answer = dataclasses.replace(answer, time=self.clock.now())
        try:
            try:
                self.feed.do(answer)
            except StateWriteError as exc:
                log.warning("job %d: order %d: its deadline passed while the application's answer could not be "
                            "saved (%s); settled with that answer, saved at the next write", job_id, order_id, exc)
                self.feed.do(answer, saved=False)
        except ElasticError as exc:  # refused by the core now (the job ended, say): the default applies
            log.warning("job %d: order %d: the unsaved answer no longer applies (%s)", job_id, order_id, exc)
            return False
        self._taken_late[job_id] = said
        log.info("job %d: order %d settled at its deadline with the application's unsaved answer", job_id, order_id)
        self._answer_taken(job_id, order_id, answer)
        return True

    def settled(self, order_id: int) -> None:
        self._unsaved_answers.pop(order_id, None)
        sent = self._order_sent_at.pop(order_id, None)
        if sent is not None and self.metrics is not None:
            self.metrics.order_seconds.observe(time.monotonic() - sent)
        handle = self._deadlines.pop(order_id, None)
        if handle is not None:
            handle.cancel()

    def await_answer(self, job_id: int, order_id: int, at: float) -> None:
        """Recovery: an order the previous daemon may have sent is settled when the
        application reconnects (`resume`) or at this deadline."""
        self._deadlines[order_id] = self.clock.call_at(at, self._deadline, job_id, order_id)

    # ---- the application's answers ---------------------------------------------------------
    def answer(self, job_id: int, verb: str, order_id: int, hosts: list[str], text: str) -> None:
        """shrunk / grown / refuse / defer; raises OrderRejected for the application, and
        StateWriteError when the answer cannot be saved: it is not taken then, and is sent
        again by the application; if the disk stays full until the order's deadline, the
        order is settled with it there (never with hosts the application did not name)."""
        late = self._taken_late.get(job_id)
        if late is not None and late == (order_id, verb, tuple(hosts), text):
            return  # settled with this very answer at the deadline: its retry is told so
        now = self.clock.now()
        event: Event
        if verb == "shrunk":
            event = ev.ShrinkAnswered(now, job_id, order_id, tuple(hosts))
        elif verb == "grown":
            event = ev.GrowAnswered(now, job_id, order_id, tuple(hosts))
        elif verb == "refuse":
            event = ev.OrderRefused(now, job_id, order_id, text)
        else:  # defer; a bad time is a malformed line, counted as any (the connection goes at 5)
            event = ev.OrderDeferred(now, job_id, order_id, parse_seconds(text, "defer"))
        why = self.channel.voided_reason(job_id, order_id)
        if why is not None:
            job = self.core.job(job_id)
            held = " ".join(h for h in job.hosts if h not in job.leaving)
            raise OrderRejected("expired", f"order {order_id} was settled without this answer ({why}); "
                                f"the job's hosts are now: {held}")
        try:
            self.feed.do(event)
        except StateWriteError:
            self._unsaved_answers[order_id] = (event, (order_id, verb, tuple(hosts), text))
            raise
        self._answer_taken(job_id, order_id, event)

    def _answer_taken(self, job_id: int, order_id: int, event: Event) -> None:
        self._unsaved_answers.pop(order_id, None)
        self.settled(order_id)
        if isinstance(event, ev.GrowAnswered):
            confirm = getattr(self.joins, "confirm_joined", None)
            if confirm is not None:
                confirm(job_id, event.hosts)
        self.feed.changed()
        self.feed.pass_soon()

    def resume(self, job_id: int, order_id: int | None, hosts: list[str], link: AppLink) -> None:
        """An application reconnected (its connection dropped, or the daemon restarted) and
        said what it is doing.

        Only the registered connection speaks for the job's orders (orders go to it alone):
        an open order it is not handling never reached it, and is dropped (a grow's new hosts
        are taken back); one it is handling stays open for its answer; one the daemon settled
        without it meanwhile is told again (`hosts ... order=ID`), so that its answer,
        refused as expired, is never taken for done. Another connection's `resume` (a
        worker's, which keeps a connection for `put`/`get` and follows the same reconnect
        steps) has its hosts checked and nothing else: it dropped the leader's open order,
        even when refused for its hosts.
        """
        job = self.core.job(job_id)
        order = job.order
        # Its own hosts, an open grow's new ones, and those it held before: the daemon may
        # have taken them in its absence (the `hosts` line that says so may reach it later).
        own = set(job.hosts) | (set(order.new_hosts) if order is not None else set())
        own.update(h for e in job.events for h in e.hosts)
        foreign = [h for h in hosts if h not in own]
        if foreign:
            raise OrderRejected("bad_hosts", f"resume: not hosts of job {job_id}: {' '.join(foreign)}")
        if self.channel.link(job_id) is not link:
            return
        now = self.clock.now()
        if order is not None and not order.settled and order.order_id == order_id:
            self.channel.order_sent(job_id, order_id)  # it is handling it: settled without it, it is told
        if order_id is not None:
            self.channel.retell_voided(job, link, order_id)
        if order is not None and not order.settled and order.order_id != order_id:
            log.info("job %d: order %d never reached the application; dropped", job_id, order.order_id)
            self.settled(order.order_id)
            self.feed.do(ev.OrderUndeliverable(now, job_id, order.order_id))
            self.feed.changed()
            self.feed.pass_soon()
        held = sorted(h for h in job.hosts if h not in job.leaving)
        if order_id is None and hosts and sorted(hosts) != held:
            log.warning("job %d: the application says it runs on %s, the daemon has %s", job_id,
                        ",".join(hosts), ",".join(held))

    # ---- a grow's processes ------------------------------------------------------------------
    def on_join_failed(self, job_id: int, host: str, code: int, sig: int) -> None:
        """A process started for a grow died before the application took it: the grow is
        void, its hosts go back at once, and the application is told (its `grown` would be
        refused as expired)."""
        job = self.core.jobs.get(job_id)
        order = job.order if job is not None else None
        if order is None or order.settled or order.kind is not OrderKind.GROW or host not in order.new_hosts:
            return
        why = f"the process started on {host} for the grow exited {code}:{sig} before the application took it"
        log.warning("job %d: order %d: %s", job_id, order.order_id, why)
        self.settled(order.order_id)
        self.feed.do(ev.OrderUndeliverable(self.clock.now(), job_id, order.order_id, why=why))
        self.feed.changed()
        self.feed.pass_soon()

    def join_failed(self, job: Job, hosts: tuple[str, ...], why: str) -> None:
        """The core takes a grow's failed start (JoinLaunchFailed: the grow fails if still
        open, else the job goes on without the hosts); an open order it settled with it (the
        grow, or one made since for hosts the job no longer has) is settled here too."""
        order = job.order
        open_id = order.order_id if order is not None and not order.settled else None
        self.feed.do(ev.JoinLaunchFailed(self.clock.now(), job.job_id, hosts, why))
        if open_id is not None and (job.order is None or job.order.order_id != open_id or job.order.settled):
            self.settled(open_id)

    def forget(self, job_id: int) -> None:
        """The job's processes are over: a late retry of its answer is not `ok` any more."""
        self._taken_late.pop(job_id, None)
