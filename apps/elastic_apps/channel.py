"""The application's connection to the daemon (the application channel of PROTOCOL.md).

One background thread reads the socket: replies go to whoever is waiting for them, orders
to a second thread that runs the handler, so a slow handler never blocks a reply and the
application's own threads are never interrupted.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import queue
import socket
import threading
from collections.abc import Callable
from typing import Any

from elastic_apps.env import JobEnv, job_env
from elastic_apps.errors import ChannelClosed, DaemonRefused, Defer, ElasticAppError, Refuse
from elastic_apps.handler import MalleableHandler

log = logging.getLogger("elastic_apps")

PROTOCOL_VERSION = 1
MAX_LINE = 8192
_ORDER_VERBS = ("shrink", "grow")


class JobChannel:
    def __init__(self, env: JobEnv | None = None, timeout: float = 30.0) -> None:
        self.env = env or job_env()
        self.timeout = timeout
        self.hosts: list[str] = list(self.env.hosts)
        self.handler: MalleableHandler | None = None
        self.orders_handled = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._sock: socket.socket | None = None
        self._send_lock = threading.Lock()
        self._replies: queue.Queue[str | None] = queue.Queue()
        self._orders: queue.Queue[str | None] = queue.Queue()
        self._closed = threading.Event()
        self._order_idle = threading.Event()
        self._order_idle.set()
        self._listeners: list[Callable[[str], None]] = []

    # ---- connection ----------------------------------------------------------------
    @classmethod
    def connect(cls, env: JobEnv | None = None, timeout: float = 30.0) -> "JobChannel":
        ch = cls(env, timeout)
        ch.open()
        return ch

    def open(self) -> None:
        sock = socket.create_connection(self.env.app_address, timeout=self.timeout)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.settimeout(None)
        self._sock = sock
        threading.Thread(target=self._read_loop, name="elastic-reader", daemon=True).start()
        threading.Thread(target=self._order_loop, name="elastic-orders", daemon=True).start()
        self._request(f"hello {PROTOCOL_VERSION} {self.env.job_id} {self.env.secret}")

    @property
    def local_address(self) -> str:
        """This end's IP address: an address the daemon's network reaches this host by."""
        assert self._sock is not None
        return self._sock.getsockname()[0]

    def close(self) -> None:
        if self._sock is not None and not self._closed.is_set():
            self._closed.set()
            try:
                self._sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            self._sock.close()

    def __enter__(self) -> "JobChannel":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- what applications call ------------------------------------------------------
    def register(self, handler: MalleableHandler) -> None:
        """Make the job malleable: from now on the daemon may send orders to `handler`.

        Called from a coroutine, async handler methods will run on that event loop.
        """
        try:
            self._loop = asyncio.get_running_loop()
        except RuntimeError:
            self._loop = None
        self.handler = handler
        self._request("register")

    async def aregister(self, handler: MalleableHandler) -> None:
        """register() for asyncio code: does not block the event loop."""
        self._loop = asyncio.get_running_loop()
        self.handler = handler
        await asyncio.to_thread(self._request, "register")

    def disable(self) -> None:
        """Deregister for good before a final phase; waits for an order being handled."""
        self._order_idle.wait(self.timeout)
        self._request("deregister")
        self.handler = None

    def request_grow(self, n: int) -> None:
        """Evolving jobs: ask for `n` more nodes; they arrive later as a grow order."""
        self._request(f"request {int(n)}")

    def release(self, hosts: list[str]) -> None:
        """Evolving jobs: give hosts back now (their processes must end)."""
        self._request("release " + " ".join(hosts))
        self.hosts = [h for h in self.hosts if h not in set(hosts)]

    def put(self, key: str, value: str) -> None:
        """A job-scoped value other processes of the job can `get` (e.g. an address)."""
        self._request(f"put {key} {value}")

    def get(self, key: str) -> str | None:
        try:
            reply = self._request(f"get {key}")
        except DaemonRefused as exc:
            if exc.code == "not_found":
                return None
            raise
        return reply.split(" ", 3)[3]

    def wait_value(self, key: str, timeout: float = 30.0, poll: float = 0.01) -> str:
        """Poll for a value another process will put (a leader's address, say)."""
        import time

        deadline = time.monotonic() + timeout
        while True:
            v = self.get(key)
            if v is not None:
                return v
            if time.monotonic() > deadline:
                raise ElasticAppError(f"no value {key!r} within {timeout} s")
            time.sleep(poll)
            poll = min(poll * 2, 0.1)

    def ping(self) -> None:
        self._request("ping")

    def on_event(self, listener: Callable[[str], None]) -> None:
        """Be told of every order line received (for tests and tracing)."""
        self._listeners.append(listener)

    # ---- machinery -------------------------------------------------------------------
    def _request(self, line: str) -> str:
        if self._sock is None or self._closed.is_set():
            raise ChannelClosed("not connected to the daemon")
        with self._send_lock:
            try:
                self._sock.sendall(line.encode("ascii") + b"\n")
            except OSError as exc:
                raise ChannelClosed(f"connection to the daemon lost: {exc}") from None
            try:
                reply = self._replies.get(timeout=self.timeout)
            except queue.Empty:
                raise ChannelClosed(f"no reply to {line.split()[0]!r} within {self.timeout} s") from None
        if reply is None:
            raise ChannelClosed("connection to the daemon closed")
        if reply.startswith("error "):
            _, code, *rest = reply.split(" ", 2)
            raise DaemonRefused(code, rest[0] if rest else "")
        return reply

    def _read_loop(self) -> None:
        assert self._sock is not None
        buf = b""
        try:
            while True:
                chunk = self._sock.recv(65536)
                if not chunk:
                    break
                buf += chunk
                while b"\n" in buf:
                    raw, buf = buf.split(b"\n", 1)
                    line = raw.decode("ascii", "replace").rstrip("\r")
                    if line.split(" ", 1)[0] in _ORDER_VERBS:
                        self._order_idle.clear()
                        self._orders.put(line)
                    else:
                        self._replies.put(line)
                if len(buf) > MAX_LINE:
                    break
        except OSError:
            pass
        finally:
            self._closed.set()
            self._replies.put(None)
            self._orders.put(None)

    def _order_loop(self) -> None:
        while True:
            line = self._orders.get()
            if line is None:
                return
            try:
                for listener in self._listeners:
                    listener(line)
                self._handle_order(line)
            except ChannelClosed:
                return
            except Exception:
                log.exception("elastic: handling order %r failed", line)
            finally:
                self.orders_handled += 1
                if self._orders.empty():
                    self._order_idle.set()

    def _call(self, fn: Callable[..., Any], *args: Any) -> Any:
        if inspect.iscoroutinefunction(fn):
            if self._loop is None:
                raise ElasticAppError("async handler methods need register() from a coroutine")
            return asyncio.run_coroutine_threadsafe(fn(*args), self._loop).result()
        return fn(*args)

    def _handle_order(self, line: str) -> None:
        words = line.split()
        opts = dict(w.split("=", 1) for w in words[1:] if "=" in w)
        args = [w for w in words[1:] if "=" not in w]
        order = opts.get("order", "0")
        n = int(args[0])
        h = self.handler
        if h is None:
            self._request(f"refuse order={order} no handler registered")
            return
        try:
            if words[0] == "shrink":
                removed = [str(x) for x in self._call(h.pre_shrink, n)]
                self._request(f"shrunk order={order} " + " ".join(removed))
                self.hosts = [x for x in self.hosts if x not in set(removed)]
                self._call(h.post_shrink, n, removed)
            else:
                new = args[1 : 1 + n]
                continued = list(self.hosts)
                self._call(h.pre_grow, n)
                self._call(h.post_grow, n, continued, new)
                self.hosts = continued + new
                self._request(f"grown order={order} " + " ".join(self.hosts))
        except Refuse as r:
            self._request(f"refuse order={order} {_one_line(r.reason)}".rstrip())
        except Defer as d:
            self._request(f"defer order={order} {d.seconds:g}")
        except DaemonRefused as exc:
            log.error("elastic: the daemon refused the answer to order %s: %s", order, exc)
            self._request(f"refuse order={order} handler answer refused: {_one_line(exc.message)}")
        except ChannelClosed:
            raise
        except Exception as exc:
            log.exception("elastic: handler failed on %s", words[0])
            self._request(f"refuse order={order} handler raised {type(exc).__name__}")


def _one_line(text: str) -> str:
    return " ".join(text.replace("=", ":").split())[:400]
