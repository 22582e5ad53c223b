"""Place-to-place messages over TCP: length-prefixed pickles on authenticated connections.

Threads: one background thread per place reads every incoming connection and puts the
decoded messages into the place's inbox; only the place's worker thread writes, each peer
on its own outgoing connection. So no socket is written by two threads, a slow reader
never blocks a writer for long (the reader thread always drains), and the worker sees all
messages in one queue, in per-sender order (TCP is FIFO per connection).

Pickles execute code when loaded, so a connection is only read after the peer proved it
knows the job's secret (the daemon gives it to every process of the job): the accepting
side sends a random nonce, the connecting side answers HMAC-SHA256(secret, nonce).
"""

from __future__ import annotations

import hmac
import logging
import os
import pickle
import queue
import selectors
import socket
import struct
import threading
from dataclasses import dataclass, field
from hashlib import sha256
from typing import Any

from elastic_apps.glb import messages as M

log = logging.getLogger("elastic_apps.glb")

_LEN = struct.Struct(">I")
_NONCE = 16
_DIGEST = 32
MAX_FRAME = 1 << 30


class PeerGone(Exception):
    """A message could not be written: the peer's process is gone."""


@dataclass
class _Incoming:
    sock: socket.socket
    nonce: bytes
    buf: bytearray = field(default_factory=bytearray)
    authenticated: bool = False
    sender: int | None = None


def split_address(address: str) -> tuple[str, int]:
    host, _, port = address.rpartition(":")
    return host, int(port)


class Transport:
    def __init__(self, secret: bytes, bind_host: str, inbox: queue.SimpleQueue[tuple[Any, ...]]) -> None:
        self.secret = secret
        self.inbox = inbox
        self._server = socket.socket(socket.AF_INET6 if ":" in bind_host else socket.AF_INET)
        self._server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._server.bind((bind_host, 0))
        self._server.listen(128)
        self._server.setblocking(False)
        host, port = self._server.getsockname()[:2]
        self.address = f"{host}:{port}"
        self._out: dict[str, socket.socket] = {}
        self._sel = selectors.DefaultSelector()
        self._wake_r, self._wake_w = socket.socketpair()
        self._thread: threading.Thread | None = None
        self._closed = False

    # ---- worker side -----------------------------------------------------------------
    def start(self) -> None:
        self._sel.register(self._server, selectors.EVENT_READ, None)
        self._sel.register(self._wake_r, selectors.EVENT_READ, None)
        self._thread = threading.Thread(target=self._read_loop, name="glb-transport", daemon=True)
        self._thread.start()

    def send(self, address: str, msg: tuple[Any, ...]) -> None:
        """Write one message; raises PeerGone if the peer's process is gone."""
        data = pickle.dumps(msg, protocol=pickle.HIGHEST_PROTOCOL)
        sock = self._out.get(address)
        try:
            if sock is None:
                sock = self._connect(address)
            sock.sendall(_LEN.pack(len(data)) + data)
        except OSError as exc:
            self.forget(address)
            raise PeerGone(f"{address}: {exc}") from None

    def forget(self, address: str) -> None:
        """Close the outgoing connection to a place that left."""
        sock = self._out.pop(address, None)
        if sock is not None:
            sock.close()

    def close(self) -> None:
        """Close everything; outgoing data already written is still delivered (FIN)."""
        if self._closed:
            return
        self._closed = True
        for sock in self._out.values():
            sock.close()
        self._out.clear()
        try:
            self._wake_w.send(b"x")
        except OSError:
            pass
        if self._thread is not None:
            self._thread.join(2.0)
        self._wake_w.close()

    def _connect(self, address: str) -> socket.socket:
        sock = socket.create_connection(split_address(address), timeout=10.0)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        nonce = _recv_exactly(sock, _NONCE)
        sock.sendall(hmac.new(self.secret, nonce, sha256).digest())
        sock.settimeout(None)
        self._out[address] = sock
        return sock

    # ---- reader thread ---------------------------------------------------------------
    def _read_loop(self) -> None:
        try:
            while True:
                for key, _ in self._sel.select():
                    obj = key.fileobj
                    if obj is self._wake_r:
                        return
                    if obj is self._server:
                        self._accept()
                    else:
                        self._read(key.data)
        except Exception:  # a bug here would silently stall the place: make it loud
            log.exception("glb transport: reader thread failed")
            self.inbox.put((M.EOF, M.ROOT))
        finally:
            for key in list(self._sel.get_map().values()):
                if key.fileobj not in (self._server, self._wake_r):
                    key.fileobj.close()  # type: ignore[union-attr]
            self._sel.close()
            self._server.close()
            self._wake_r.close()

    def _accept(self) -> None:
        try:
            sock, _ = self._server.accept()
        except BlockingIOError:
            return
        nonce = os.urandom(_NONCE)
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            sock.sendall(nonce)
        except OSError:
            sock.close()
            return
        sock.setblocking(False)
        self._sel.register(sock, selectors.EVENT_READ, _Incoming(sock, nonce))

    def _read(self, conn: _Incoming) -> None:
        try:
            chunk = conn.sock.recv(1 << 18)
        except BlockingIOError:
            return
        except OSError:
            chunk = b""
        if not chunk:
            self._drop(conn)
            return
        buf = conn.buf
        buf += chunk
        if not conn.authenticated:
            if len(buf) < _DIGEST:
                return
            expected = hmac.new(self.secret, conn.nonce, sha256).digest()
            if not hmac.compare_digest(bytes(buf[:_DIGEST]), expected):
                log.warning("glb transport: a connection failed authentication; closed")
                conn.sender = None
                self._drop(conn)
                return
            conn.authenticated = True
            del buf[:_DIGEST]
        start = 0
        end = len(buf)
        oversized = False
        with memoryview(buf) as view:  # released before the buffer is resized below
            while end - start >= 4:
                (size,) = _LEN.unpack_from(view, start)
                if size > MAX_FRAME:
                    oversized = True
                    break
                if end - start - 4 < size:
                    break
                msg = pickle.loads(view[start + 4 : start + 4 + size])
                start += 4 + size
                if msg[1] >= 0:
                    conn.sender = msg[1]
                self.inbox.put(msg)
        if oversized:
            log.warning("glb transport: oversized frame; connection closed")
            self._drop(conn)
            return
        if start:
            del buf[:start]

    def _drop(self, conn: _Incoming) -> None:
        self._sel.unregister(conn.sock)
        conn.sock.close()
        if conn.sender is not None:
            self.inbox.put((M.EOF, conn.sender))


def _recv_exactly(sock: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise ConnectionError("closed during the handshake")
        data += chunk
    return data
