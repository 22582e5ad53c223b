"""Place 0's extra duties: who the members are, when the computation is over, and the
final reduction.

Place 0 is the one place that never leaves (the leader process holds the connection to
the daemon, as APGAS's place 0 does in the seed), so it is where membership changes are
ordered. It runs one membership operation at a time and ends it only when every place
concerned has acknowledged it, so every place always knows the latest member list when
the next operation starts:

- admission (start, or processes a grow started): ids are assigned (never reused), the
  new places get WELCOME, the others MEMBERS; all of them ACK.
- shrink (from the handler): the leaving places get LEAVE (with a staying place to hand
  their work to), the others MEMBERS listing who leaves; the leaving places answer LEFT
  once their work and partial results are moved.

Everything here runs on place 0's worker thread, between two chunks of its own work.
"""

from __future__ import annotations

import queue
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Literal

from elastic_apps.glb import messages as M
from elastic_apps.glb.bag import Result
from elastic_apps.glb.place import MemberMap, Message, Place, fatal
from elastic_apps.glb.termination import ActiveCount


@dataclass(frozen=True)
class Member:
    address: str
    host: str
    local_index: int


@dataclass
class Join:
    host: str
    local_index: int
    address: str
    joining: bool
    at: float


@dataclass
class Request:
    """An operation the handler thread asks of place 0, and its outcome."""

    kind: Literal["shrink", "await_hosts", "abandon_hosts"]
    hosts: list[str]
    done: threading.Event = field(default_factory=threading.Event)
    info: dict[str, Any] = field(default_factory=dict)


@dataclass
class Operation:
    kind: Literal["admit", "shrink"]
    version: int
    started: float
    acks: set[int]
    left: set[int] = field(default_factory=set)
    places: list[int] = field(default_factory=list)
    hosts: list[str] = field(default_factory=list)
    request: Request | None = None
    moved_bags: int = 0
    initial: bool = False


class HandlerGate:
    """Keeps the handler's operations and the final phase apart.

    The final phase deregisters from the daemon, which waits for an order being handled;
    if that handler were waiting for place 0 at the same time, both would wait for each
    other. So a handler operation and termination exclude each other: termination is not
    declared while an operation is under way, and no operation starts once it is.
    """

    def __init__(self, inbox: queue.SimpleQueue[Message]) -> None:
        self._lock = threading.Lock()
        self._inbox = inbox
        self.busy = False
        self.finishing = False

    def begin(self) -> bool:
        """False if the computation is finishing (the order must be refused)."""
        with self._lock:
            if self.finishing:
                return False
            self.busy = True
            return True

    def end(self) -> None:
        with self._lock:
            self.busy = False
        self._inbox.put((M.RECHECK, M.HANDLER))

    def try_finish(self) -> bool:
        with self._lock:
            if self.busy:
                return False
            self.finishing = True
            return True


class Coordinator:
    def __init__(self, place: Place, hosts: list[str], places_per_host: int, gate: HandlerGate) -> None:
        self.place = place
        self.host_order = list(hosts)
        self.places_per_host = places_per_host
        self.gate = gate
        self.members: dict[int, Member] = {M.ROOT: Member(place.transport.address, place.host, 0)}
        self.active = ActiveCount(1)
        self.next_id = 1
        self.version = 0
        self.joins: list[Join] = []
        self.op: Operation | None = None
        self.requests: deque[Request] = deque()
        self.waiters: list[Request] = []
        self.rejected_hosts: set[str] = set()
        self.last_join: dict[str, float] = {}  # host -> when its last place asked to join
        self.admitted_by: dict[str, int] = {}  # host -> index of the admission in operations
        self.departed: Result = place.problem.new_result()
        self.departed_stats: dict[int, dict[str, float]] = {}
        self.operations: list[dict[str, Any]] = []
        self.expected_initial = len(hosts) * places_per_host - 1
        self.started = False
        self.finishing = False
        self.results: dict[int, tuple[Result, dict[str, float]]] = {}
        place.id = M.ROOT
        place.book[M.ROOT] = place.transport.address
        place.coordinator = self
        self._handlers = {
            M.JOIN: self._on_join,
            M.ACTIVATE: self._on_activate,
            M.IDLE: self._on_idle,
            M.MEMBERS_ACK: self._on_members_ack,
            M.RESULT: self._on_result,
            M.LEFT: self._on_left,
            M.REQUEST: self._on_request,
            M.RECHECK: lambda msg: self.check_termination(),
            M.EOF: self._on_eof,
        }

    # ---- start -----------------------------------------------------------------------
    def start(self, timeout: float = 60.0) -> None:
        """Admit the initial places (every process of the job's first hosts)."""
        deadline = time.monotonic() + timeout
        if self.expected_initial == 0:
            self._next_operation()
        while not self.started:
            left = deadline - time.monotonic()
            if left <= 0:
                fatal(f"only {len(self.joins)} of {self.expected_initial} places joined within {timeout:.0f} s")
            try:
                msg = self.place.inbox.get(timeout=left)
            except queue.Empty:
                continue
            self.place.handle(msg)

    @property
    def member_map(self) -> MemberMap:
        return {pid: (m.address, m.host) for pid, m in self.members.items()}

    def handle(self, msg: Message) -> None:
        handler = self._handlers.get(msg[0])
        if handler is None:
            return  # e.g. a lifeline registration in flight at the end
        handler(msg)

    # ---- membership operations ---------------------------------------------------------
    def _next_operation(self) -> None:
        if self.op is not None or self.finishing:
            return
        if not self.started:
            if len(self.joins) >= self.expected_initial:
                self._admit(initial=True)
            return
        if self.joins:
            self._admit(initial=False)
        elif self.requests:
            self._shrink(self.requests.popleft())

    def _admit(self, initial: bool) -> None:
        joins, self.joins = self.joins, []
        if initial:
            joins.sort(key=lambda j: (self._host_rank(j.host), j.local_index))
        started = time.monotonic()
        self.version += 1
        new: list[tuple[int, Join]] = []
        for j in joins:
            pid = self.next_id
            self.next_id += 1
            self.members[pid] = Member(j.address, j.host, j.local_index)
            self.place.book[pid] = j.address
            new.append((pid, j))
        self.active.admitted(len(new))
        members = self.member_map
        nranks = len(members)
        old = [pid for pid in members if pid != M.ROOT and pid not in dict(new)]
        for pid in old:
            self.place.send(pid, (M.MEMBERS, M.ROOT, self.version, members, ()))
        for pid, _j in new:
            rank = pid if initial else None
            self.place.send(pid, (M.WELCOME, M.ROOT, pid, self.version, members, rank, nranks))
        if initial:
            self.place.welcome(M.ROOT, self.version, members, 0, nranks)
        else:
            self.place.apply_members(self.version, members, ())
        self.op = Operation(
            "admit", self.version, started, acks={pid for pid in members if pid != M.ROOT},
            places=[pid for pid, _ in new], hosts=sorted({j.host for _, j in new}), initial=initial,
        )
        self._maybe_complete()

    def _shrink(self, request: Request) -> None:
        started = time.monotonic()
        leaving = sorted(pid for pid, m in self.members.items() if m.host in set(request.hosts))
        if M.ROOT in leaving:
            fatal("asked to remove place 0's host")
        old_members = list(self.members)
        for pid in leaving:
            del self.members[pid]
        staying = sorted(self.members)
        self.version += 1
        members = self.member_map
        for pid in staying:
            if pid != M.ROOT:
                self.place.send(pid, (M.MEMBERS, M.ROOT, self.version, members, leaving))
        for i, pid in enumerate(leaving):
            target = staying[i % len(staying)]
            self.place.send(pid, (M.LEAVE, M.ROOT, self.version, target, leaving, old_members))
        self.place.apply_members(self.version, members, leaving)
        self.op = Operation(
            "shrink", self.version, started, acks={pid for pid in staying if pid != M.ROOT},
            left=set(leaving), places=leaving, hosts=list(request.hosts), request=request,
        )
        self._maybe_complete()

    def _maybe_complete(self) -> None:
        op = self.op
        if op is None or op.acks or op.left:
            return
        self.op = None
        elapsed = time.monotonic() - op.started
        record: dict[str, Any] = {
            "op": "start" if op.initial else op.kind,
            "places": len(op.places),
            "hosts": op.hosts,
            "glb_s": round(elapsed, 6),
        }
        if op.kind == "shrink":
            record["moved_bags"] = op.moved_bags
            for pid in op.places:
                self.place.transport.forget(self.place.book[pid])
        else:
            if op.initial:
                self.started = True
            for host in op.hosts:
                self.admitted_by[host] = len(self.operations)
        self.operations.append(record)
        if op.request is not None:
            op.request.info.update(record)
            op.request.done.set()
        self._wake_waiters()
        self._next_operation()
        self.check_termination()

    def _wake_waiters(self) -> None:
        """Release the handler's grows whose hosts have all their places admitted."""
        if self.op is not None and self.op.kind == "admit":
            return  # its places are members already but not acknowledged yet
        still: list[Request] = []
        for w in self.waiters:
            if all(self._placed(h) == self.places_per_host for h in w.hosts):
                ops = {self.admitted_by[h] for h in w.hosts}
                w.info["glb_s"] = sum(self.operations[i]["glb_s"] for i in ops)
                w.info["joined_at"] = max(self.last_join[h] for h in w.hosts)
                w.info["places"] = len(w.hosts) * self.places_per_host
                w.done.set()
            else:
                still.append(w)
        self.waiters = still

    def _placed(self, host: str) -> int:
        return sum(1 for m in self.members.values() if m.host == host)

    def _host_rank(self, host: str) -> int:
        try:
            return self.host_order.index(host)
        except ValueError:
            return len(self.host_order)

    # ---- termination -------------------------------------------------------------------
    def check_termination(self) -> None:
        if not self.started or self.finishing or self.op is not None or self.joins or self.requests:
            return
        if not self.active.quiescent or self.waiters:
            return
        if not self.gate.try_finish():
            return  # a handler operation is under way; it sends RECHECK when it ends
        self.finishing = True
        self.place.terminated = True
        self.place.done = True

    def finish(self, timeout: float = 60.0) -> Result:
        """Collect every member's partial result (the handler is already disabled)."""
        others = [pid for pid in self.members if pid != M.ROOT]
        for pid in others:
            self.place.send(pid, (M.FINISH, M.ROOT))
        deadline = time.monotonic() + timeout
        while len(self.results) < len(others):
            left = deadline - time.monotonic()
            if left <= 0:
                fatal(f"results of places {sorted(set(others) - set(self.results))} did not arrive")
            try:
                msg = self.place.inbox.get(timeout=left)
            except queue.Empty:
                continue
            self.handle(msg)
        total: Result = self.place.problem.new_result()
        total.reduce(self.departed)
        total.reduce(self.place.partial_result())
        for pid in sorted(self.results):
            total.reduce(self.results[pid][0])
        return total

    def place_stats(self) -> dict[str, dict[str, float]]:
        out = {str(pid): s for pid, s in sorted(self.departed_stats.items())}
        for pid, (_r, s) in sorted(self.results.items()):
            out[str(pid)] = s
        out[str(M.ROOT)] = self.place.stats.as_dict()
        return dict(sorted(out.items(), key=lambda kv: int(kv[0])))

    # ---- messages ----------------------------------------------------------------------
    def _on_join(self, msg: Message) -> None:
        host, local_index, address, joining = msg[2], msg[3], msg[4], msg[5]
        if self.finishing or host in self.rejected_hosts:
            self.place.transport.send(address, (M.EXIT, M.ROOT))
            return
        if joining != self.started:
            fatal(f"a place on {host} joined {'late' if not joining else 'early'}: joining={joining}")
        now = time.monotonic()
        self.joins.append(Join(host, local_index, address, joining, now))
        self.last_join[host] = now
        self._next_operation()

    def _on_activate(self, msg: Message) -> None:
        self.active.activated()
        self.place.send(msg[2], (M.ACK, M.ROOT))

    def _on_idle(self, msg: Message) -> None:
        self.active.idled()
        self.check_termination()

    def _on_members_ack(self, msg: Message) -> None:
        op = self.op
        if op is not None and msg[2] == op.version:
            op.acks.discard(msg[1])
            self._maybe_complete()

    def _on_result(self, msg: Message) -> None:
        pid, partial, stats = msg[1], msg[2], msg[3]
        if self.finishing and pid in self.members:
            self.results[pid] = (partial, stats)
        else:
            self.departed.reduce(partial)
            self.departed_stats[pid] = stats

    def _on_left(self, msg: Message) -> None:
        op = self.op
        if op is None or msg[1] not in op.left:
            fatal(f"place {msg[1]} reported LEFT outside a shrink")
        op.left.discard(msg[1])
        if msg[2]:
            op.moved_bags += 1
        self._maybe_complete()

    def _on_request(self, msg: Message) -> None:
        request: Request = msg[2]
        if request.kind == "shrink":
            self.requests.append(request)
            self._next_operation()
        elif request.kind == "await_hosts":
            # A host taken back from a failed grow may be granted again: the daemon ended
            # the old processes there before it freed the host.
            self.rejected_hosts.difference_update(request.hosts)
            self.waiters.append(request)
            self._wake_waiters()
        else:  # abandon_hosts: a grow that timed out; take back the places that did join
            self.rejected_hosts.update(request.hosts)
            self.waiters = [w for w in self.waiters if w is not request]
            if any(m.host in request.hosts for m in self.members.values()):
                self.requests.append(request)
                self._next_operation()
            else:
                request.done.set()

    def _on_eof(self, msg: Message) -> None:
        peer = msg[1]
        if peer == M.ROOT:
            fatal("place 0's transport failed")
        if peer in self.members and not (self.finishing and peer in self.results):
            fatal(f"place {peer} on {self.members[peer].host} is gone")
        if self.op is not None and peer in self.op.left:
            fatal(f"place {peer} is gone before it handed its work off")
