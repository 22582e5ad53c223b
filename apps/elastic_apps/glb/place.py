"""One place: a process with one worker that processes its bag, steals when it runs out,
and serves thieves.

Everything a place decides happens on its worker thread: the transport's reader thread
only queues messages, and the worker handles them between two `process(n)` calls (or
while it waits, when it has no work). So the bag is never touched by two threads, and the
protocol state needs no lock. Place 0 additionally runs the coordinator (membership,
termination, the final reduction) on the same thread.

Out of work, a place makes `random_steals` synchronous steal attempts on random members,
then sets lifelines on its buddies in the cyclic hypercube of the current members and
waits; a buddy that gets splittable work sends part of it (a lifeline delivery).
"""

from __future__ import annotations

import logging
import os
import queue
import random
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, NoReturn, Protocol

from elastic_apps.glb import messages as M
from elastic_apps.glb.bag import Bag, Problem, Result
from elastic_apps.glb.lifelines import lifeline_buddies
from elastic_apps.glb.termination import PlaceActivity
from elastic_apps.glb.transport import PeerGone, Transport

log = logging.getLogger("elastic_apps.glb")

Message = tuple[Any, ...]
MemberMap = dict[int, tuple[str, str]]  # id -> (address, host)


class MessageHandler(Protocol):
    """What place 0 hands membership and termination messages to (the Coordinator, which
    builds on this module: a protocol here keeps the import one way)."""

    def handle(self, msg: Message) -> None: ...


@dataclass(frozen=True)
class PlaceConfig:
    granularity: int
    random_steals: int = 1
    lifeline_base: int = 2
    #: While this file exists, a place that has done `pause_after` units stops processing
    #: (it still answers steals, serves lifelines and takes part in resizes). Tests use it
    #: to hold work in every bag while they resize the job, whatever the machine's speed.
    pause_file: str | None = None
    pause_after: int = 0


@dataclass
class PlaceStats:
    """What a place did, reported with its partial result: the benchmarks use it to tell
    the runtime's own costs (idle waits, steals) from a busy machine's."""

    units: int = 0  # units asked of process(), n per call
    steals_ok: int = 0
    steals_failed: int = 0
    lifeline_deliveries: int = 0
    received_deliveries: int = 0
    idle_s: float = 0.0  # waiting for work (out of it, or for a steal's answer)
    cpu_s: float = 0.0  # this process's CPU time (worker and transport threads)

    def as_dict(self) -> dict[str, float]:
        self.cpu_s = round(time.process_time(), 4)
        self.idle_s = round(self.idle_s, 4)
        return dict(self.__dict__)


@dataclass
class LeaveOrder:
    target: int
    old_members: frozenset[int]


def fatal(message: str) -> NoReturn:
    """End this process now: a lost place means lost work, so a wrong result is the only
    alternative. Place 0's exit ends the others (they see its connection close)."""
    print(f"glb: fatal: {message}", file=sys.stderr, flush=True)
    os._exit(1)


@dataclass
class Place:
    problem: Problem[Any, Any]
    config: PlaceConfig
    transport: Transport
    inbox: queue.SimpleQueue[Message]
    host: str
    local_index: int
    id: int = M.NO_ID
    book: dict[int, str] = field(default_factory=dict)  # every place ever known -> address
    members: list[int] = field(default_factory=list)
    member_set: set[int] = field(default_factory=set)
    version: int = 0
    buddies: list[int] = field(default_factory=list)
    activity: PlaceActivity = field(default_factory=PlaceActivity)
    thieves: list[int] = field(default_factory=list)
    lifelines_out: set[int] = field(default_factory=set)
    awaiting_steal: int | None = None
    may_steal: bool = True
    leave: LeaveOrder | None = None
    flushes_seen: set[int] = field(default_factory=set)
    done: bool = False
    terminated: bool = False  # place 0: global termination detected
    finish_requested: bool = False
    stash: list[Message] = field(default_factory=list)
    coordinator: MessageHandler | None = None
    stats: PlaceStats = field(default_factory=PlaceStats)

    def __post_init__(self) -> None:
        self.bag: Bag[Any] = self.problem.empty_bag()
        self._held_marked = False
        self.rng = random.Random()
        self._handlers: dict[str, Callable[[Message], None]] = {
            M.STEAL: self._on_steal,
            M.STEAL_REPLY: self._on_steal_reply,
            M.LIFELINE: self._on_lifeline,
            M.DELIVER: self._on_deliver,
            M.ACK: self._on_ack,
            M.MEMBERS: self._on_members,
            M.LEAVE: self._on_leave,
            M.FLUSH: self._on_flush,
            M.FINISH: self._on_finish,
            M.EXIT: self._on_exit,
            M.EOF: self._on_eof,
        }

    # ---- sending ---------------------------------------------------------------------
    def send(self, dst: int, msg: Message) -> None:
        if dst == self.id:
            self.inbox.put(msg)
            return
        try:
            self.transport.send(self.book[dst], msg)
        except PeerGone as exc:
            if dst == M.ROOT or dst in self.member_set:
                fatal(f"place {self.id}: lost place {dst} ({exc})")
            # A place that already left: nothing it sent us needs an answer any more.

    # ---- joining ---------------------------------------------------------------------
    def join(self, root_address: str, joining: bool, timeout: float = 60.0) -> bool:
        """Ask place 0 for an id and the members; False if told the computation is over."""
        self.book[M.ROOT] = root_address
        self.transport.send(
            root_address, (M.JOIN, M.NO_ID, self.host, self.local_index, self.transport.address, joining)
        )
        while True:
            try:
                msg = self.inbox.get(timeout=timeout)
            except queue.Empty:
                fatal(f"no answer from place 0 within {timeout:.0f} s")
            kind = msg[0]
            if kind == M.WELCOME:
                self.welcome(*msg[2:])
                return True
            if kind == M.EXIT:
                return False
            if kind == M.EOF and msg[1] == M.ROOT:
                fatal("place 0 closed the connection before admitting this place")
            self.stash.append(msg)

    def welcome(self, my_id: int, version: int, members: MemberMap, rank: int | None, nranks: int) -> None:
        self.id = my_id
        self.rng.seed(0x61B ^ my_id)
        if rank is not None:
            work = self.problem.initial_work(rank, nranks)
            if work is not None:
                # The initial bag becomes this place's bag, contribution included (UTS
                # counts its root there): nothing was processed here before.
                work.merge(self.bag)
                self.bag = work
        self.apply_members(version, members, ())
        if my_id != M.ROOT:
            self.send(M.ROOT, (M.MEMBERS_ACK, self.id, version))

    def apply_members(self, version: int, members: MemberMap, leaving: tuple[int, ...] | list[int]) -> None:
        """Take a new member list: stop stealing from and serving places that leave (and
        tell each leaving place nothing more will come from here), and recompute this
        place's lifeline buddies; an idle place then sets lifelines on new buddies."""
        if version <= self.version:
            return
        self.version = version
        for pid, (address, _host) in members.items():
            self.book[pid] = address
        self.members = sorted(members)
        self.member_set = set(members)
        for pid in leaving:
            if pid != self.id:
                self.send(pid, (M.FLUSH, self.id))
        self.thieves = [t for t in self.thieves if t in self.member_set]
        self.lifelines_out &= self.member_set
        if self.id in self.member_set:
            rank = self.members.index(self.id)
            ranks = lifeline_buddies(rank, len(self.members), self.config.lifeline_base)
            self.buddies = [self.members[r] for r in ranks]
        pending, self.stash = self.stash, []
        for msg in pending:
            self.handle(msg)

    # ---- the worker loop -------------------------------------------------------------
    def run(self) -> None:
        while not self.done:
            if self.leave is not None:
                self._leave_now()
                return
            if not self.bag.is_empty():
                if self._paused():
                    self._hold()
                else:
                    self._work()
                continue
            if self.may_steal:
                self.may_steal = False
                self._steal_randomly()
                continue
            self._set_lifelines()
            if self.activity.may_report_idle():
                self.activity.reported_idle()
                self.send(M.ROOT, (M.IDLE, self.id))
            self.handle(self._idle_get())

    def _work(self) -> None:
        bag = self.bag
        n = self.config.granularity
        inbox = self.inbox
        stats = self.stats
        while True:
            more = bag.process(n)
            stats.units += n
            if not inbox.empty():
                self._drain()
            if self.thieves:
                self._serve_thieves()
            if not more and bag.is_empty():
                self.may_steal = True
                return
            if self.leave is not None or self.done or self._paused():
                return

    def _idle_get(self) -> Message:
        t0 = time.perf_counter()
        msg = self.inbox.get()
        self.stats.idle_s += time.perf_counter() - t0
        return msg

    def _drain(self) -> None:
        inbox = self.inbox
        while True:
            try:
                msg = inbox.get_nowait()
            except queue.Empty:
                return
            self.handle(msg)

    def _wait(self, timeout: float) -> None:
        try:
            msg = self.inbox.get(timeout=timeout)
        except queue.Empty:
            return
        self.handle(msg)

    def _hold(self) -> None:
        """Paused with work: keep answering steals and serving lifeline thieves (work
        still spreads, so every place ends up holding some), and say so with a marker
        file `PAUSE_FILE.held.ID`, so a test knows when every place holds work."""
        if not self._held_marked:
            self._held_marked = True
            with open(f"{self.config.pause_file}.held.{self.id}", "w"):
                pass
        self._wait(0.05)
        if self.thieves:
            self._serve_thieves()

    def _paused(self) -> bool:
        cfg = self.config
        return (
            cfg.pause_file is not None
            and self.stats.units >= cfg.pause_after
            and os.path.exists(cfg.pause_file)
        )

    def _serve_thieves(self) -> None:
        bag = self.bag
        while self.thieves and bag.is_splittable():
            thief = self.thieves.pop(0)
            loot = bag.split(False)
            if loot is None:
                self.thieves.insert(0, thief)
                return
            self.activity.gave_work()
            self.stats.lifeline_deliveries += 1
            self.send(thief, (M.DELIVER, self.id, loot))

    def _steal_randomly(self) -> None:
        for _ in range(self.config.random_steals):
            victims = [m for m in self.members if m != self.id]
            if not victims or self.leave is not None or self.done:
                return
            victim = self.rng.choice(victims)
            self.awaiting_steal = victim
            self.send(victim, (M.STEAL, self.id))
            while self.awaiting_steal is not None:
                self.handle(self._idle_get())
            if not self.bag.is_empty():
                return

    def _set_lifelines(self) -> None:
        if self.leave is not None:
            return
        for buddy in self.buddies:
            if buddy not in self.lifelines_out:
                self.lifelines_out.add(buddy)
                self.send(buddy, (M.LIFELINE, self.id))

    # ---- leaving (a shrink) ----------------------------------------------------------
    def _leave_now(self) -> None:
        """Hand everything to the target place and report, once no message can arrive:
        every place of the old membership has sent FLUSH (each sends it after it stopped
        sending this place work), and every delivery made is ACKed."""
        order = self.leave
        assert order is not None
        waiting_for = order.old_members - {self.id}
        while not waiting_for <= self.flushes_seen or self.awaiting_steal is not None:
            self.handle(self.inbox.get())
        moved = False
        if not self.bag.is_empty():
            loot = self.bag.split(True)
            if loot is None or not self.bag.is_empty():
                fatal(f"{type(self.bag).__name__}.split(take_all=True) did not take all the work")
            self.activity.gave_work()
            self.send(order.target, (M.DELIVER, self.id, loot))
            moved = True
        while self.activity.pending_acks:
            self.handle(self.inbox.get())
        self.send(M.ROOT, (M.RESULT, self.id, self.partial_result(), self.stats.as_dict()))
        if self.activity.counted:
            self.activity.reported_idle()
            self.send(M.ROOT, (M.IDLE, self.id))
        self.send(M.ROOT, (M.LEFT, self.id, moved))
        self.done = True

    def partial_result(self) -> Result:
        partial: Result = self.problem.new_result()
        self.bag.submit(partial)
        return partial

    def send_final_result(self) -> None:
        """A non-root place after FINISH: its contribution goes to place 0."""
        if self.finish_requested:
            self.send(M.ROOT, (M.RESULT, self.id, self.partial_result(), self.stats.as_dict()))

    # ---- message handling ------------------------------------------------------------
    def handle(self, msg: Message) -> None:
        sender = msg[1]
        if sender >= 0 and sender not in self.book and msg[0] != M.EOF:
            # A place admitted after our last member list (its MEMBERS is on the way).
            self.stash.append(msg)
            return
        handler = self._handlers.get(msg[0])
        if handler is not None:
            handler(msg)
        elif self.coordinator is not None:
            self.coordinator.handle(msg)
        else:
            log.warning("place %d: unexpected message %r", self.id, msg[0])

    def _on_steal(self, msg: Message) -> None:
        loot = None
        if self.leave is None and self.bag.is_splittable():
            loot = self.bag.split(False)
        self.send(msg[1], (M.STEAL_REPLY, self.id, loot))

    def _on_steal_reply(self, msg: Message) -> None:
        loot = msg[2]
        if loot is not None:
            self.bag.merge(loot)
            self.stats.steals_ok += 1
        else:
            self.stats.steals_failed += 1
        self.awaiting_steal = None

    def _on_lifeline(self, msg: Message) -> None:
        thief = msg[1]
        if self.leave is None and thief in self.member_set and thief not in self.thieves:
            self.thieves.append(thief)

    def _on_deliver(self, msg: Message) -> None:
        giver, loot = msg[1], msg[2]
        self.bag.merge(loot)
        self.stats.received_deliveries += 1
        self.lifelines_out.discard(giver)
        if self.activity.received_work():
            self.send(M.ROOT, (M.ACTIVATE, self.id, giver))
        else:
            self.send(giver, (M.ACK, self.id))

    def _on_ack(self, msg: Message) -> None:
        self.activity.acked()

    def _on_members(self, msg: Message) -> None:
        version, members, leaving = msg[2], msg[3], msg[4]
        self.apply_members(version, members, leaving)
        self.send(M.ROOT, (M.MEMBERS_ACK, self.id, version))

    def _on_leave(self, msg: Message) -> None:
        target, leaving, old_members = msg[3], msg[4], msg[5]
        self.leave = LeaveOrder(target, frozenset(old_members))
        for pid in leaving:
            if pid != self.id:
                self.send(pid, (M.FLUSH, self.id))
        self.thieves.clear()

    def _on_flush(self, msg: Message) -> None:
        self.flushes_seen.add(msg[1])

    def _on_finish(self, msg: Message) -> None:
        self.finish_requested = True
        self.done = True

    def _on_exit(self, msg: Message) -> None:
        self.done = True

    def _on_eof(self, msg: Message) -> None:
        peer = msg[1]
        if self.coordinator is not None:
            self.coordinator.handle(msg)
        elif peer == M.ROOT and not self.done:
            fatal(f"place {self.id}: place 0 is gone")
