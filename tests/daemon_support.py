"""A whole daemon in the test process: a clock moved by hand and a launcher without
processes, so tests of the daemon's own logic (timers, coalescing, the event log) wait on
nothing real. The end-to-end tests keep real processes; these keep real sockets and the
real journal."""

from __future__ import annotations

import asyncio
import heapq
import inspect
import itertools
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from elasticd.daemon.config import DaemonConfig
from elasticd.daemon.service import Daemon
from elasticd.errors import LaunchError
from elasticd.launch.base import LaunchRequest


class ManualClock:
    """Time moves only when the test says so; due callbacks fire in time order."""

    def __init__(self, start: float = 1_000_000.0) -> None:
        self._now = start
        self._timers: list[tuple[float, int, _Timer]] = []
        self._seq = itertools.count()

    def now(self) -> float:
        return self._now

    def call_at(self, when: float, callback: Callable[..., None], *args: Any) -> _Timer:
        timer = _Timer(callback, args)
        heapq.heappush(self._timers, (when, next(self._seq), timer))
        return timer

    async def advance(self, seconds: float) -> None:
        """Move on by `seconds`, firing every timer due on the way at its own time, and let
        the loop carry out what they started."""
        end = self._now + seconds
        while self._timers and self._timers[0][0] <= end:
            when, _, timer = heapq.heappop(self._timers)
            self._now = max(self._now, when)
            if not timer.cancelled:
                timer.callback(*timer.args)
            await settle()
        self._now = end
        await settle()


@dataclass
class _Timer:
    callback: Callable[..., None]
    args: tuple[Any, ...]
    cancelled: bool = False

    def cancel(self) -> None:
        self.cancelled = True


async def settle(turns: int = 20) -> None:
    """Let tasks the daemon spawned run to their next real wait (no time passes)."""
    for _ in range(turns):
        await asyncio.sleep(0)


@dataclass
class FakeLauncher:
    """Processes that exist when launched and end when the test (or a terminate) says."""

    on_exit: Callable[..., Any]
    on_hosts_gone: Callable[..., Any]
    running: dict[int, set[str]] = field(default_factory=dict)
    launches: list[LaunchRequest] = field(default_factory=list)
    terminated: list[int] = field(default_factory=list)
    fail_launch: set[int] = field(default_factory=set)

    async def launch(self, req: LaunchRequest) -> None:
        if req.job_id in self.fail_launch:
            raise LaunchError("injected launch failure")
        self.launches.append(req)
        self.running.setdefault(req.job_id, set()).update(req.hosts)

    async def reclaim(self, job_id: int, hosts: tuple[str, ...], grace: float) -> None:
        self.running.get(job_id, set()).difference_update(hosts)
        await _call(self.on_hosts_gone, job_id, list(hosts))

    async def terminate(self, job_id: int, hosts: tuple[str, ...]) -> None:
        self.terminated.append(job_id)
        await self.exit(job_id, None, 15)

    async def exit(self, job_id: int, code: int | None, sig: int | None) -> None:
        """Every process of the job ends with this status."""
        if self.running.pop(job_id, None) is not None:
            await _call(self.on_exit, job_id, code, sig)

    async def close(self) -> None:
        pass


async def _call(fn: Callable[..., Any], *args: Any) -> None:
    result = fn(*args)
    if inspect.isawaitable(result):
        await result


@asynccontextmanager
async def inprocess_daemon(state_dir: Path, nodes: int = 4, policy: str = "easy",
                           **config: Any) -> AsyncIterator[tuple[Daemon, ManualClock, FakeLauncher]]:
    """A daemon serving on loopback in this process, on a ManualClock, with a FakeLauncher."""
    clock = ManualClock()
    made: list[FakeLauncher] = []

    def factory(kind: str, *, on_exit: Any, on_hosts_gone: Any, **_: Any) -> FakeLauncher:
        made.append(FakeLauncher(on_exit, on_hosts_gone))
        return made[0]

    state_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    d = Daemon(DaemonConfig(state_dir=state_dir, node_names=[f"node{i}" for i in range(1, nodes + 1)],
                            policy=policy, **config), clock=clock, launcher_factory=factory)
    ready: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    task = asyncio.create_task(d.serve(ready))
    await asyncio.wait_for(ready, 10)
    try:
        yield d, clock, made[0]
    finally:
        await asyncio.wait_for(d.stop(), 10)  # ends what still runs through the fake terminate
        await asyncio.wait_for(task, 10)
