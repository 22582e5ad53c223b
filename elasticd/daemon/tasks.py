"""The daemon's own tasks on the event loop, its stop flags, and the wake-up of whoever waits
for a change.

Why one place: every part starts work that outlives the call that started it (a launch, a
terminate, a watch), and a stop must cancel and await all of it, naming what did not end;
and requests that wait (`ewait`, a stop waiting for its jobs to end) wait on one condition
that every change notifies. It knows nothing of jobs, and never hands the core an event.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine
from typing import Any

log = logging.getLogger("elasticd")


class LoopTasks:
    def __init__(self) -> None:
        self._tasks: set[asyncio.Task[Any]] = set()
        self._changed = asyncio.Condition()
        self._stopping = asyncio.Event()
        self._stopped = asyncio.Event()

    # ---- tasks -------------------------------------------------------------------------
    def spawn(self, coro: Coroutine[Any, Any, object], name: str | None = None) -> None:
        """Every task the daemon starts is named, kept, and cancelled and awaited at stop."""
        task = asyncio.get_running_loop().create_task(coro, name=name or getattr(coro, "__qualname__", None))
        self._tasks.add(task)
        task.add_done_callback(self._task_done)

    def _task_done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("internal task %s failed", task.get_name(), exc_info=task.exception())

    async def cancel_all(self, timeout: float) -> None:
        current = asyncio.current_task()
        tasks = [t for t in self._tasks if t is not current and not t.done()]
        for t in tasks:
            t.cancel()
        if tasks:
            _done, pending = await asyncio.wait(tasks, timeout=timeout)
            if pending:
                log.error("tasks still running at stop: %s", ", ".join(t.get_name() for t in pending))

    # ---- changes -----------------------------------------------------------------------
    def notify(self) -> None:
        """Wake whoever waits for a change (`wait`), at the next turn of the loop."""

        async def notify() -> None:
            async with self._changed:
                self._changed.notify_all()

        self.spawn(notify(), "notify")

    async def wait(self, done: Callable[[], bool], timeout: float | None) -> bool:
        """Wait until `done()` holds after a change; False when `timeout` seconds passed first."""
        async with self._changed:
            try:
                await asyncio.wait_for(self._changed.wait_for(done), timeout)
            except TimeoutError:
                return False
        return True

    # ---- the stop ----------------------------------------------------------------------
    @property
    def stopping(self) -> bool:
        return self._stopping.is_set()

    @property
    def stopped(self) -> bool:
        return self._stopped.is_set()

    def begin_stop(self) -> None:
        self._stopping.set()

    def mark_stopped(self) -> None:
        self._stopped.set()

    async def wait_stopped(self) -> None:
        await self._stopped.wait()
