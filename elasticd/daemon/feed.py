"""The one way into the core: an event in, saved, its actions handed out.

Every part of the daemon that learns something (a request, an application's answer, a
process exit, a timer) hands it here as a core event (`do`); nothing else calls
`Core.handle`. Everything runs on the event loop thread, one event at a time, so the core
needs no locks. What the core asks for comes back out as actions, each handed to the part
that registered for its kind (`on_action`); after them, the parts that keep a view of the
jobs (timers, the applications' view) see the event (`after_event`).

Scheduling is coalesced here too: many events in one turn of the loop (a burst of
submissions) cost one policy pass (`pass_soon`).

It owns no job state and no I/O of its own: the transaction is the core's and the journal's
(elasticd.daemon.persistence); it never reads a socket, starts a process or arms a timer.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import typing
from collections.abc import Callable
from typing import Any, TypeVar

from elasticd.core import events as ev
from elasticd.core.actions import Action, Launch
from elasticd.core.engine import Core
from elasticd.core.events import Event
from elasticd.daemon.clock import Clock
from elasticd.daemon.persistence import Persistence
from elasticd.daemon.room import DiskRoom
from elasticd.daemon.tasks import LoopTasks
from elasticd.errors import StateWriteError

log = logging.getLogger("elasticd")

# Events that decide something: committed before they take effect (see CoreFeed.do).
DECISIONS = (ev.Submitted, ev.CancelRequested, ev.ResizeRequested, ev.HoldReleased, ev.PassDue, ev.ShrinkAnswered,
             ev.GrowAnswered, ev.OrderRefused, ev.OrderDeferred, ev.NodesRequested, ev.HostsReleased,
             ev.NodesAdded, ev.NodesRemoved)

A = TypeVar("A", bound=Action)


class CoreFeed:
    def __init__(self, core: Core, clock: Clock, persistence: Persistence, room: DiskRoom, tasks: LoopTasks) -> None:
        self.core = core
        self.clock = clock
        self.persistence = persistence
        self.room = room
        self.tasks = tasks
        self._handlers: dict[type, Callable[[Any], None]] = {}
        self._after: list[Callable[[Event], None]] = []
        self._job_end: list[Callable[[int], None]] = []
        self._pass_pending = False
        # While the jobs of a previous daemon are taken back, no pass runs (Recovery.recover).
        self._passes_held = False

    # ---- wiring ------------------------------------------------------------------------------
    def on_action(self, kind: type[A], handler: Callable[[A], None]) -> None:
        """The part that carries out actions of this kind."""
        self._handlers[kind] = handler

    def after_event(self, listener: Callable[[Event], None]) -> None:
        """Called after every accepted event, once its actions are handed out, in the order
        registered."""
        self._after.append(listener)

    def on_job_end(self, forget: Callable[[int], None]) -> None:
        """Called when a job's processes are over (`job_ended`): what a part kept for it goes."""
        self._job_end.append(forget)

    def check_wiring(self) -> None:
        """Every kind of action has a part to carry it out."""
        missing = [k.__name__ for k in typing.get_args(Action) if k not in self._handlers]
        if missing:
            raise TypeError(f"no handler for action(s) {', '.join(missing)}")

    # ---- events in, actions out ------------------------------------------------------------
    def do(self, event: Event, saved: bool = True) -> None:
        """Hand one event to the core and carry out what it asks (raises, with nothing
        changed, when the core refuses the event). Every accepted event goes to the log.

        A decision (a submission, a cancel, a resize, an application's answer, a policy pass)
        is a transaction: committed to the journal before anything is carried out or
        acknowledged, or, when the commit fails, undone in the core and raised
        (StateWriteError) to whoever asked: nothing half-applied stays in memory and no job
        is launched that the journal does not hold. A fact the daemon learned (an exit,
        hosts gone, a node down) is applied whatever the disk does and saved when it can;
        so is a decision given with saved=False, the daemon's way to carry out what cannot
        wait for the disk (a cancel, an order's deadline)."""
        p = self.persistence
        tx = saved and p.enabled and isinstance(event, DECISIONS)
        if tx:
            self.core.begin()
        new_secrets: list[int] = []
        logged = False
        try:
            actions = self.core.handle(event)
            for a in actions:
                if isinstance(a, Launch):
                    # Made (and saved) before the processes exist: they reconnect with it later.
                    p.set_secret(a.job_id, secrets.token_hex(16))
                    new_secrets.append(a.job_id)
            # Buffered before the commit, which writes it right after the journal: a
            # decision with nothing to carry out (a submission) was logged only at the
            # next commit, and a kill -9 before it left the journal holding a job the
            # log never saw (replay stopped at it).
            logged = p.log_event(event, actions)
            if tx:
                p.commit()
        except BaseException:
            if tx:
                self.core.rollback()
                for jid in new_secrets:
                    p.set_secret(jid, None)
                if logged:
                    p.withdraw_event()
            raise
        if tx:
            self.core.commit()
        self.execute(actions)
        for listener in self._after:
            listener(event)

    def execute(self, actions: list[Action]) -> None:
        """Saved first, then each action to its part."""
        if not actions:
            return
        self.persistence.persist()
        for a in actions:
            self._handlers[type(a)](a)

    def job_ended(self, job_id: int) -> None:
        """The job's processes are over (it ended, or went back to the queue): each part
        forgets what it kept for it, and a pass may use its nodes."""
        for forget in self._job_end:
            forget(job_id)
        self.changed()
        self.pass_soon()

    def changed(self) -> None:
        """Jobs changed without a reply or an action to save them: saved at the end of this
        turn, and whoever waits for a change (a stop, `ewait`) looks again."""
        self.persistence.persist_soon()
        self.tasks.notify()

    # ---- policy passes -----------------------------------------------------------------------
    def pass_soon(self) -> None:
        """A policy pass at the next turn of the loop: one for all the events of this one."""
        self.persistence.persist_soon()
        if self._pass_pending or self.tasks.stopping:
            return
        self._pass_pending = True
        asyncio.get_running_loop().call_soon(self._run_pass)

    def hold_passes(self) -> None:
        self._passes_held = True

    def release_passes(self) -> None:
        self._passes_held = False

    def _run_pass(self) -> None:
        self._pass_pending = False
        if self.tasks.stopping or self._passes_held:
            return  # after recovery: a requeued job is started only once its strays are ended
        if self.room.short_of_space():
            return
        try:
            self.do(ev.PassDue(self.clock.now()))
        except StateWriteError as exc:
            self.persistence.write_failed(exc)  # nothing was started: the pass is made again at the next event
        except Exception:
            # A policy bug must not take the daemon and its jobs down with it; a pass is a
            # transaction, so nothing of it was applied, and the next event asks again.
            log.exception("scheduling failed; the queue is kept and asked again at the next event")
