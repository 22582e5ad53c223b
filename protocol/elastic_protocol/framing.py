"""Newline framing with a hard length limit.

asyncio's StreamReader.readline() raises and loses the framing past its buffer limit; this
reads with an explicit limit and turns an over-long line into FrameTooLong so the peer gets
a typed error and the connection is closed deliberately.
"""

from __future__ import annotations

import asyncio
import socket

from elastic_protocol.errors import FrameTooLong, MalformedMessage


async def read_line(reader: asyncio.StreamReader, max_bytes: int) -> bytes | None:
    """Return one line without its newline (`\\n`, or `\\r\\n`: a trailing `\\r` is no
    part of the line, nor of its length), or None at a clean end of stream.

    The reader must have been created with `limit` >= max_bytes + 2.
    """
    try:
        line = await reader.readuntil(b"\n")
    except asyncio.IncompleteReadError as exc:
        if exc.partial:
            raise MalformedMessage("connection closed in the middle of a line") from None
        return None
    except asyncio.LimitOverrunError:
        raise FrameTooLong(f"line longer than {max_bytes} bytes") from None
    line = line[:-2] if line.endswith(b"\r\n") else line[:-1]
    if len(line) > max_bytes:
        raise FrameTooLong(f"line longer than {max_bytes} bytes")
    return line.rstrip(b"\r")


class LineSocket:
    """Blocking line I/O over a socket, for command-line tools and synchronous clients."""

    def __init__(self, sock: socket.socket, max_bytes: int) -> None:
        self.sock = sock
        self.max_bytes = max_bytes
        self._buf = bytearray()

    def send_line(self, data: bytes) -> None:
        self.sock.sendall(data + b"\n")

    def read_line(self) -> bytes | None:
        while True:
            nl = self._buf.find(b"\n")
            if nl >= 0:
                line = bytes(self._buf[:nl])
                del self._buf[: nl + 1]
                if line.endswith(b"\r"):
                    line = line[:-1]
                if len(line) > self.max_bytes:
                    raise FrameTooLong(f"line longer than {self.max_bytes} bytes")
                return line.rstrip(b"\r")
            if len(self._buf) > self.max_bytes + 1:  # room for a `\r` before the newline
                raise FrameTooLong(f"line longer than {self.max_bytes} bytes")
            chunk = self.sock.recv(65536)
            if not chunk:
                if self._buf:
                    raise MalformedMessage("connection closed in the middle of a line")
                return None
            self._buf += chunk

    def close(self) -> None:
        self.sock.close()
