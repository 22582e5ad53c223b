"""What both channel servers share: a listening socket with a line limit, the connections
it holds, and a bound on how many there may be."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from elasticd.daemon.service import Daemon

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


class LineServer:
    def __init__(self, daemon: Daemon, max_line: int) -> None:
        self.daemon = daemon
        self.max_line = max_line
        self._writers: set[asyncio.StreamWriter] = set()

    async def start(self, host: str, port: int) -> asyncio.Server:
        return await asyncio.start_server(self._admit, host, port, limit=self.max_line + 1)

    async def close_all(self) -> None:
        for w in list(self._writers):
            w.close()

    async def _admit(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Count the connection against the daemon-wide limit for as long as it lives."""
        d = self.daemon
        if d.connections >= d.config.max_connections:
            writer.write(self.busy_line())
            try:
                await writer.drain()
            except ConnectionError:
                pass
            writer.close()
            return
        d.connections += 1
        self._writers.add(writer)
        try:
            await self.serve(reader, writer)
        finally:
            d.connections -= 1
            self._writers.discard(writer)
            writer.close()

    def busy_line(self) -> bytes:
        raise NotImplementedError

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        raise NotImplementedError
