"""Job timers: time limits, and a pass when time stops keeping the policy from ordering a job.

Time limits are the core's rule: a start returns `ArmLimit(job, start + limit)`, and this
part feeds `LimitReached` back at that time, on the daemon's clock (elasticd.daemon.clock),
as the simulator does in virtual time. A job that was resized, or that deferred or refused
an order, may not be ordered again for a while (Core.orders_wait_until): a pass is armed for
the instant that ends, rather than left to the periodic one.

Order deadlines are the orders' own (elasticd.daemon.orders); the periodic pass is the
lifecycle's. This part never ends a job itself: it hands the core an event.
"""

from __future__ import annotations

import logging

from elasticd.core import events as ev
from elasticd.core.actions import ArmLimit
from elasticd.core.engine import Core
from elasticd.core.events import Event
from elasticd.daemon.clock import Clock, TimerHandle
from elasticd.daemon.feed import CoreFeed

log = logging.getLogger("elasticd")

# Events after which time may keep the policy from ordering a job for a while (it was resized,
# it deferred or refused an order): a pass is due when that ends (Core.orders_wait_until).
_ORDERS_WAIT = (ev.GrowAnswered, ev.HostsGone, ev.OrderDeferred, ev.OrderRefused)


class JobTimers:
    def __init__(self, core: Core, clock: Clock, feed: CoreFeed) -> None:
        self.core = core
        self.clock = clock
        self.feed = feed
        self._limits: dict[int, TimerHandle] = {}
        # A pass when time no longer keeps the policy from ordering a job (Core.orders_wait_until).
        self._guards: dict[int, TimerHandle] = {}

    # ---- time limits -------------------------------------------------------------------------
    def arm_limit(self, a: ArmLimit) -> None:
        old = self._limits.pop(a.job_id, None)
        if old is not None:
            old.cancel()
        self._limits[a.job_id] = self.clock.call_at(a.at, self._limit_reached, a.job_id)

    def _limit_reached(self, job_id: int) -> None:
        self._limits.pop(job_id, None)
        log.info("job %d: time limit reached", job_id)
        self.feed.do(ev.LimitReached(self.clock.now(), job_id))

    def forget(self, job_id: int) -> None:
        """The job's processes are over: its limit no longer applies."""
        handle = self._limits.pop(job_id, None)
        if handle is not None:
            handle.cancel()

    # ---- passes when a wait ends -----------------------------------------------------------
    def after_event(self, event: Event) -> None:
        if isinstance(event, _ORDERS_WAIT):
            self._arm_guard(event.job_id, event.time)

    def _arm_guard(self, job_id: int, now: float) -> None:
        """The job was resized, or deferred or refused an order, now: a pass when time no
        longer keeps the policy from ordering it (a resize at once, as the simulator makes
        one then; another order to an application whose deferral ended), not at the next
        periodic pass (up to --schedule-interval later)."""
        job = self.core.jobs.get(job_id)
        if job is None or not job.state.holds_nodes:
            return
        due = self.core.orders_wait_until(job)
        if due <= now:
            return
        old = self._guards.pop(job_id, None)
        if old is not None:
            old.cancel()
        self._guards[job_id] = self.clock.call_at(due, self._guard_ended, job_id, due)

    def _guard_ended(self, job_id: int, due: float) -> None:
        now = self.clock.now()
        if now < due:  # the loop's timer and the records' clock differ by a hair: not before it
            self._guards[job_id] = self.clock.call_at(due, self._guard_ended, job_id, due)
            return
        self._guards.pop(job_id, None)
        self.feed.pass_soon()

    def cancel_guards(self) -> None:
        """At stop: no pass is due any more."""
        for handle in self._guards.values():
            handle.cancel()
