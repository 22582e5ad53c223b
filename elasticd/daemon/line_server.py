"""What both channel servers share: a listening socket with a line limit, the connections
it holds, bounds on how many there may be, and the log of refused attempts.

Each channel has its own connection budget, so a job that floods the application channel
cannot lock its user's tools out of the control channel (they are needed to cancel it).
Within a channel, connections that have not yet proven a secret are capped separately:
past that cap (or when the channel is full) the oldest of them is dropped to admit a new
one, provided it has had a grace period to say hello. A flood of connections that open
and send nothing then costs a legitimate client (which says hello at once) nothing,
instead of locking it out until the flood's hellos time out; and a 200-process job whose
processes all connect in the same instant is not mistaken for a flood.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Protocol

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]

# Refusals are logged one by one up to this many per window and per channel; past it, one
# summary line per window says how many were left out, so a flood cannot fill the disk.
LOG_BURST = 20
LOG_WINDOW_S = 10.0
# A connection past the unauthenticated cap is dropped only after this long without a hello.
UNPROVEN_GRACE_S = 1.0


class ChannelLimits(Protocol):
    """The bounds a channel keeps (DaemonConfig holds them; README: Limits)."""

    @property
    def max_connections(self) -> int: ...

    @property
    def max_unauthenticated(self) -> int: ...

    @property
    def hello_timeout(self) -> float: ...


class RefusalLog:
    """Logs each refused attempt with its source, rate-limited per window."""

    def __init__(self, logger: logging.Logger, channel: str) -> None:
        self.logger = logger
        self.channel = channel
        self._window_start = 0.0
        self._logged = 0
        self._suppressed = 0

    def __call__(self, peer: object, why: str) -> None:
        self.note(f"refused {peer_text(peer)}: {why}")

    def note(self, text: str) -> None:
        """Any other warning a peer can trigger at will (an authenticated job's bad lines)."""
        now = time.monotonic()
        if now - self._window_start >= LOG_WINDOW_S:
            if self._suppressed:
                self.logger.warning("%s: %d more refused attempts or bad lines in the last %.0f s "
                                    "were not logged one by one",
                                    self.channel, self._suppressed, now - self._window_start)
            self._window_start, self._logged, self._suppressed = now, 0, 0
        if self._logged < LOG_BURST:
            self._logged += 1
            self.logger.warning("%s: %s", self.channel, text)
        else:
            self._suppressed += 1


def peer_text(peer: object) -> str:
    """host:port of a peer, as the logs name it."""
    if isinstance(peer, tuple) and len(peer) >= 2:
        return f"{peer[0]}:{peer[1]}"
    return str(peer)


class LineServer:
    channel = "line"

    def __init__(self, limits: ChannelLimits, max_line: int, logger: logging.Logger) -> None:
        self.limits = limits
        self.max_line = max_line
        self.log = logger
        self.refused = RefusalLog(logger, self.channel)
        self._writers: set[asyncio.StreamWriter] = set()
        # Connections still owing their hello -> when they came, oldest first.
        self._unproven: dict[asyncio.StreamWriter, float] = {}

    @property
    def connections(self) -> int:
        return len(self._writers)

    async def start(self, host: str, port: int) -> asyncio.Server:
        return await asyncio.start_server(self._admit, host, port, limit=self.max_line + 2)  # the line, `\r\n`

    async def close_all(self) -> None:
        for w in list(self._writers):
            w.close()

    def proven(self, writer: asyncio.StreamWriter) -> None:
        """The peer holds a secret: it no longer counts as (or risks being dropped as) unproven."""
        self._unproven.pop(writer, None)

    async def _admit(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Count the connection against the channel's limits for as long as it lives."""
        cfg = self.limits
        peer = writer.get_extra_info("peername")
        now = time.monotonic()
        self._make_room(now)
        if self.connections >= cfg.max_connections:
            self.refused(peer, f"too many connections (limit {cfg.max_connections})")
            writer.write(self.busy_line())
            try:
                await asyncio.wait_for(writer.drain(), 1.0)
            except (ConnectionError, TimeoutError):
                pass
            writer.close()
            return
        self._writers.add(writer)
        self._unproven[writer] = now
        try:
            await self.serve(reader, writer)
        except Exception:
            # A bug in a handler must cost one connection, never the daemon.
            self.log.exception("%s: internal error serving %s", self.channel, peer_text(peer))
        finally:
            self._writers.discard(writer)
            self._unproven.pop(writer, None)
            writer.close()

    def _make_room(self, now: float) -> None:
        """Drop the oldest connections still without a hello while over a limit, once they
        have had their grace period (which a client that says hello at once never needs)."""
        cfg = self.limits
        grace = min(UNPROVEN_GRACE_S, cfg.hello_timeout / 2)
        while self._unproven and (
            self.connections >= cfg.max_connections or len(self._unproven) >= cfg.max_unauthenticated
        ):
            oldest, since = next(iter(self._unproven.items()))
            if now - since < grace:
                return
            del self._unproven[oldest]
            self._writers.discard(oldest)  # no longer counted; its handler ends on the close
            self.refused(oldest.get_extra_info("peername"),
                         f"dropped before its hello to make room (limits: {cfg.max_unauthenticated} without "
                         f"a hello, {cfg.max_connections} in all)")
            oldest.close()

    def busy_line(self) -> bytes:
        raise NotImplementedError

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        raise NotImplementedError
