"""Malleable mpi4py programs: the MalleableHandler hooks, run collectively by every rank at a
safe point the application chooses (between iterations, say).

Rank 0 of the first start talks to the daemon (JobChannel). An order it receives waits
until the application calls `safe_point()`; there rank 0 broadcasts it and every rank takes
part in the same steps, in the same order (a collective missed by one rank hangs them all):

- spawn mode, grow: `pre_grow(n)` on the old communicator; one `Spawn` per new host (the
  `host` info key names it: ranks go on exactly the hosts the order named), each merged into
  the communicator; then `post_grow(n, continued, new)` on the new one -- new ranks call it
  too, from `ElasticMPI()`, before the application's loop starts.
- spawn mode, shrink: the hosts released are the newest spawned ones (set in
  `leaving_hosts`); `pre_shrink(n)` on the old communicator, where the leaving ranks hand
  their data over; then the merged communicators are freed and the intercommunicators
  disconnected, newest first -- `Disconnect()` on a merged communicator hangs in Open MPI
  4.1 -- and the leaving ranks see `safe_point()` return False and must exit;
  `post_shrink(n, removed)` runs on those that stay.
- restart mode (programs that cannot spawn): `pre_shrink`/`pre_grow` write a checkpoint,
  rank 0 answers and asks elasticd for a restart, every rank exits (`safe_point()` returns
  False); elasticd starts mpirun again on the new host set and `restarted` is True there.
"""

from __future__ import annotations

import os
import queue
import shutil
import sys
import threading
from dataclasses import dataclass

try:
    from mpi4py import MPI
except ImportError as exc:  # said as what to install, at the import that needs it
    raise ImportError(f"elastic_apps.mpi needs mpi4py ({exc}): pip install '.[mpi]' in elastic's folder, with Open "
                      "MPI installed (apt-get install openmpi-bin libopenmpi-dev)") from None

from elastic_apps.channel import JobChannel
from elastic_apps.errors import ElasticAppError, Refuse
from elastic_apps.handler import MalleableHandler

__all__ = ["ElasticMPI", "MpiHandler"]


class MpiHandler(MalleableHandler):
    """Hooks called on every rank, collectively; `self.mpi` is the ElasticMPI object.

    pre_shrink's return value is not used: the hosts are chosen by the helper (spawn mode:
    the newest spawned; restart mode: the last ones) and are in `mpi.leaving_hosts`.
    """

    mpi: ElasticMPI

    def pre_shrink(self, n: int) -> list[str]:
        return list(self.mpi.leaving_hosts)


@dataclass
class _Order:
    kind: str  # "shrink" | "grow"
    count: int
    new_hosts: list[str]
    done: threading.Event
    hosts: list[str] | None = None  # shrink: the hosts released (set by the safe point)
    refusal: str | None = None


class _Relay(MalleableHandler):
    """On rank 0's order thread: hand the order to the safe point and wait for its outcome."""

    def __init__(self, owner: ElasticMPI) -> None:
        self.owner = owner

    def _wait(self, order: _Order) -> _Order:
        if self.owner.finishing:
            raise Refuse("the application is finishing")
        self.owner.orders.put(order)
        if not order.done.wait(self.owner.order_timeout):
            raise Refuse("no safe point reached in time")
        if order.refusal:
            raise Refuse(order.refusal)
        return order

    def pre_shrink(self, n: int) -> list[str]:
        order = self._wait(_Order("shrink", n, [], threading.Event()))
        return list(order.hosts or [])

    def post_grow(self, n: int, continued_hosts: list[str], new_hosts: list[str]) -> None:
        self._wait(_Order("grow", n, list(new_hosts), threading.Event()))


class ElasticMPI:
    """Create once per process, after the handler, before the application's loop."""

    def __init__(self, handler: MpiHandler, order_timeout: float = 25.0) -> None:
        self.handler = handler
        handler.mpi = self
        self.order_timeout = order_timeout
        self.mode = os.environ.get("ELASTIC_MPI_MODE", "spawn")
        self.ranks_per_node = int(os.environ.get("ELASTIC_MPI_RANKS_PER_NODE", "1"))
        self.restarted = int(os.environ.get("ELASTIC_MPI_RESTARTS", "0")) > 0
        self.checkpoint_dir = os.environ.get("ELASTIC_MPI_CHECKPOINT_DIR", ".")
        self.orders: queue.Queue[_Order] = queue.Queue()
        self.finishing = False
        self.leaving_hosts: list[str] = []
        self.resizes = 0
        self.channel: JobChannel | None = None
        parent = MPI.Comm.Get_parent()
        self.joined = parent != MPI.COMM_NULL
        # Spawn bookkeeping, the same on every rank: the hosts of the spawned groups, oldest
        # first; the merged communicator after each spawn; the intercommunicators this process
        # is part of, by group index.
        self.groups: list[str] = []
        self._merged: list[MPI.Intracomm] = [MPI.COMM_WORLD]
        self._inter: dict[int, MPI.Intercomm] = {}
        self.group = 0  # 0: started by mpirun; k: spawned by the k-th spawn
        if self.joined:
            self._join(parent)
        else:
            self.hosts = [h for h in os.environ.get("ELASTIC_JOB_HOSTS", "").split(",") if h]
            if self.comm.rank == 0 and os.environ.get("ELASTIC_APP_ADDRESS"):
                self.channel = JobChannel.connect()
                self.channel.register(_Relay(self))

    @property
    def comm(self) -> MPI.Intracomm:
        """The application's communicator: every rank of the job, now."""
        return self._merged[-1]

    # ---- the safe point --------------------------------------------------------------------
    def safe_point(self) -> bool:
        """Collective. Carries out a pending order; False: this rank must stop and exit."""
        order: _Order | None = None
        if self.comm.rank == 0 and self.channel is not None:
            try:
                order = self.orders.get_nowait()
            except queue.Empty:
                order = None
        head = None if order is None else (order.kind, order.count, order.new_hosts)
        head = self.comm.bcast(head, root=0)
        if head is None:
            return True
        kind, count, new_hosts = head
        self.resizes += 1
        if self.mode == "restart":
            return self._restart(order, kind, count, new_hosts)
        if kind == "grow":
            self._grow(count, new_hosts)
            if order is not None:
                order.done.set()
            return True
        return self._shrink(order, count)

    def finish(self) -> None:
        """Before the final phase (rank 0): no more orders; a waiting one is refused."""
        self.finishing = True
        while not self.orders.empty():
            order = self.orders.get_nowait()
            order.refusal = "the application is finishing"
            order.done.set()
        if self.channel is not None:
            self.channel.disable()
            self.channel.close()
            self.channel = None

    # ---- spawn mode ---------------------------------------------------------------------------
    def _grow(self, count: int, new_hosts: list[str]) -> None:
        continued = list(self.hosts)
        self.handler.pre_grow(count)
        for i in range(len(new_hosts)):
            self._spawn_one(list(new_hosts), i, continued)
        self.hosts = continued + list(new_hosts)
        self.handler.post_grow(count, continued, list(new_hosts))

    def _spawn_one(self, new_hosts: list[str], i: int, continued: list[str]) -> None:
        host = new_hosts[i]
        info = MPI.Info.Create()
        info.Set("host", host)
        env_tool = shutil.which("env") or "/usr/bin/env"
        # The new ranks carry the job's tags (the daemon finds its ranks by them) whatever
        # the MPI daemon's environment on that host is.
        tags = [f"{k}={v}" for k, v in os.environ.items()
                if k.startswith("ELASTIC_") and k not in ("ELASTIC_HOST", "ELASTIC_MPI_NODE")]
        args = [*tags, f"ELASTIC_HOST={host}", "ELASTIC_JOINING=1", sys.executable, *sys.orig_argv[1:]]
        inter = self.comm.Spawn(env_tool, args, maxprocs=self.ranks_per_node, info=info, root=0)
        info.Free()
        k = len(self.groups) + 1
        self._inter[k] = inter
        merged = inter.Merge(high=False)
        self._merged.append(merged)
        self.groups.append(host)
        # What a new rank must know to take part from here on, the same as everybody.
        merged.bcast((self.groups, continued, new_hosts, i, self.resizes), root=0)

    def _join(self, parent: MPI.Intercomm) -> None:
        merged = parent.Merge(high=True)
        self.groups, continued, new, index, self.resizes = merged.bcast(None, root=0)
        self.group = len(self.groups)
        self._inter[self.group] = parent
        # Older merged communicators do not include this process; only the newest is ours.
        self._merged = [MPI.COMM_NULL] * self.group + [merged]  # type: ignore[assignment]  # COMM_NULL placeholders, never used
        for i in range(index + 1, len(new)):
            self._spawn_one(new, i, continued)
        self.hosts = continued + new
        self.handler.post_grow(len(new), continued, new)

    def _shrink(self, order: _Order | None, count: int) -> bool:
        if count > len(self.groups):
            # The ranks started by mpirun cannot leave: they are its world.
            if order is not None:
                order.refusal = f"spawn mode releases only spawned hosts ({len(self.groups)} now)"
                order.done.set()
            return True
        keep = len(self.groups) - count
        self.leaving_hosts = self.groups[keep:]
        leaving = self.group > keep
        self.handler.pre_shrink(count)
        # Free the merged communicators, then disconnect the intercommunicators, newest first.
        for k in range(len(self.groups), keep, -1):
            if self.group <= k:
                self._merged[k].Free()
        for k in range(len(self.groups), keep, -1):
            if self.group <= k:
                self._inter.pop(k).Disconnect()
        removed = list(self.leaving_hosts)
        self.leaving_hosts = []
        if leaving:
            return False
        del self._merged[keep + 1:]
        self.groups = self.groups[:keep]
        self.hosts = [h for h in self.hosts if h not in removed]
        if order is not None:
            order.hosts = removed
            order.done.set()
            self._wait_answered()
        self.handler.post_shrink(count, removed)
        return True

    # ---- restart mode -------------------------------------------------------------------------
    def _restart(self, order: _Order | None, kind: str, count: int, new_hosts: list[str]) -> bool:
        if kind == "shrink":
            if count >= len(self.hosts):
                if order is not None:
                    order.refusal = "cannot release every host"
                    order.done.set()
                return True
            self.leaving_hosts = self.hosts[-count:]
            self.handler.pre_shrink(count)
        else:
            self.handler.pre_grow(count)
        self.comm.Barrier()  # every rank's part of the checkpoint is written
        if order is not None:
            path = os.environ.get("ELASTIC_MPI_RESTART_FILE")
            if not path:
                raise ElasticAppError("restart mode needs ELASTIC_MPI_RESTART_FILE (run under elasticd)")
            with open(path, "w") as f:
                f.write(f"{kind} {count}\n")
            order.hosts = list(self.leaving_hosts)
            order.done.set()
            self._wait_answered()
            if self.channel is not None:
                self.channel.close()
                self.channel = None
        self.comm.Barrier()
        return False

    def _wait_answered(self, timeout: float = 10.0) -> None:
        """Rank 0: the answer is on its way once the order thread is idle again."""
        if self.channel is None:
            return
        self.channel.wait_idle(timeout)
