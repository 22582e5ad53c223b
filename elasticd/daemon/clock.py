"""The daemon's clock: what time it is, and calling something back at a time.

Why an object: every timer the daemon keeps (time limits, order deadlines, the periodic
pass) goes through it, so a test can run a whole daemon in-process on a clock it moves by
hand (tests/daemon_support.ManualClock) instead of sleeping, and the core is fed the same
times the timers were set with.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any, Protocol


class TimerHandle(Protocol):
    def cancel(self) -> None: ...


class Clock(Protocol):
    def now(self) -> float:
        """Seconds since the epoch (what job records and the event log hold)."""

    def call_at(self, when: float, callback: Callable[..., None], *args: Any) -> TimerHandle:
        """Call back on the event loop once `now()` has reached `when` (at once if past)."""


class WallClock:
    """The real clock: time.time for records, the running loop's timers for callbacks."""

    def now(self) -> float:
        return time.time()

    def call_at(self, when: float, callback: Callable[..., None], *args: Any) -> TimerHandle:
        return asyncio.get_running_loop().call_later(max(0.0, when - self.now()), callback, *args)
