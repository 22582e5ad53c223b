"""The application's connection to the daemon (the application channel of PROTOCOL.md).

One background thread reads the socket: replies go to whoever is waiting for them, orders
to a second thread that runs the handler, so a slow handler never blocks a reply and the
application's own threads are never interrupted.

The daemon may be restarted under a running job (after a crash it recovers from its
journal, on the same address, with the same job secrets), or the connection alone may
drop; the library cannot tell which, and need not. When the connection drops
without close() having been called, the reader thread reconnects for up to
ELASTIC_RECONNECT_SECONDS (default 120): hello again, register again if the job was
registered, then `resume` saying which order it is handling and which hosts it runs on.
A request that was waiting for a reply meanwhile is sent once more on the new connection,
so the answer to an order in flight reaches the restarted daemon. A first connection that
is refused (the daemon is restarting) is retried the same way.
"""

from __future__ import annotations

import asyncio
import contextvars
import inspect
import logging
import os
import queue
import socket
import threading
import time
from collections.abc import Callable
from typing import Any, Self

from elastic_apps.env import JobEnv, job_env
from elastic_apps.errors import ChannelClosed, DaemonRefused, Defer, ElasticAppError, Refuse
from elastic_apps.handler import MalleableHandler
from elastic_protocol.appchannel import (
    DAEMON_VERBS,
    RETRY_CODES,
    UNSOLICITED_VERBS,
    parse,
    parse_count,
    parse_error,
    seconds_text,
)
from elastic_protocol.errors import MalformedMessage
from elastic_protocol.version import MAX_APP_LINE_BYTES, PROTOCOL_VERSION

log = logging.getLogger("elastic_apps")

MAX_LINE = MAX_APP_LINE_BYTES
_ANSWER_VERBS = ("shrunk", "grown", "refuse", "defer")
# The daemon's answers to an answer that came too late: the order is gone, nothing to say more.
_ORDER_GONE = ("expired", "unknown_order")


# Set while a handler's hook runs (on the order thread, or, for `async def` hooks, in their
# task on the application's loop, which inherits it): a call that would wait for the order
# in hand to be answered must not wait there.
_IN_HOOK: contextvars.ContextVar[bool] = contextvars.ContextVar("elastic_in_hook", default=False)


def _reconnect_window() -> float:
    try:
        return max(0.0, float(os.environ.get("ELASTIC_RECONNECT_SECONDS", "120")))
    except ValueError:
        return 120.0


class JobChannel:
    """The job's connection to the daemon; the leader's registers a handler.

    `hosts` is the job's host list as the daemon has confirmed it (module handler: what it
    holds in each hook); `env` is what the process learnt from its environment
    (`env.job_id`, `env.host`, `env.is_leader`, ...). Close it with `close()` (or use it in
    a `with` block) when the process no longer needs the daemon.
    """

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
        self._closed = threading.Event()  # for good: close() was called or reconnecting failed
        self._connected = threading.Event()  # cleared while the reader reconnects
        self._buf = b""
        self._registered = False
        self._current_order: str | None = None  # the order id the handler is answering
        self.reconnect_for = _reconnect_window()
        self.reconnects = 0
        self._order_idle = threading.Event()
        self._order_idle.set()
        self._listeners: list[Callable[[str], None]] = []

    # ---- connection ----------------------------------------------------------------
    @classmethod
    def connect(cls, env: JobEnv | None = None, timeout: float = 30.0) -> JobChannel:
        ch = cls(env, timeout)
        ch.open()
        return ch

    def open(self) -> None:
        """Connect and say hello before anything else reads the socket: a connection that
        drops before the daemon answers (a daemon killed and restarted) is dialled again and
        hello said there, once. (With the reader thread started first, it could reconnect,
        say hello itself, and the hello of open() then went to the new connection as a
        second one: `bad_request`, and the job failed.)"""
        deadline = time.monotonic() + self.reconnect_for
        where = f"{self.env.app_address[0]}:{self.env.app_address[1]}"
        while True:
            sock = self._dial(deadline)
            if sock is None:
                raise ChannelClosed(f"cannot connect to the daemon at {where}")
            sock.settimeout(None)  # a paused daemon answers later: wait for it
            self._buf = b""
            try:
                sock.sendall(f"hello {PROTOCOL_VERSION} {self.env.job_id} {self.env.secret}\n".encode("ascii"))
                reply = self._next_line(sock)
            except OSError:
                reply = None
            if reply is not None:
                break
            sock.close()
            if time.monotonic() > deadline:
                raise ChannelClosed(f"the daemon at {where} closed the connection before answering hello")
            time.sleep(0.05)
        if reply.startswith("error "):
            sock.close()
            raise DaemonRefused(*parse_error(reply))
        self._sock = sock
        self._connected.set()
        threading.Thread(target=self._read_loop, name="elastic-reader", daemon=True).start()
        threading.Thread(target=self._order_loop, name="elastic-orders", daemon=True).start()

    @property
    def local_address(self) -> str:
        """This end's IP address: an address the daemon's network reaches this host by."""
        assert self._sock is not None
        host: str = self._sock.getsockname()[0]
        return host

    def close(self) -> None:
        """Close the connection for good: no reconnection, and every later call raises
        ChannelClosed. It does not deregister: a registered job whose connection closes is
        rigid again (it keeps its nodes), so a leader calls `disable()` first. A process's
        exit closes it too; closing twice is harmless."""
        if self._sock is not None and not self._closed.is_set():
            self._closed.set()
            self._connected.set()  # wake a request waiting for a reconnection: it fails
            try:
                self._sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            self._sock.close()

    def __enter__(self) -> Self:
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
        self._registered = True

    async def aregister(self, handler: MalleableHandler) -> None:
        """register() for asyncio code: does not block the event loop."""
        self._loop = asyncio.get_running_loop()
        self.handler = handler
        await asyncio.to_thread(self._request, "register")
        self._registered = True

    def wait_idle(self, timeout: float | None = None) -> bool:
        """Wait until no order is being handled (its answer is on its way); False on timeout."""
        return self._order_idle.wait(self.timeout if timeout is None else timeout)

    def disable(self) -> None:
        """Deregister for good before a final phase; waits for an order being handled.

        Never fails a job that has done its work: a daemon that is gone, or refuses, is
        logged, and the application goes on to write its results."""
        self.wait_idle()
        self._registered = False
        self.handler = None
        try:
            self._request("deregister")
        except (ChannelClosed, DaemonRefused) as exc:
            log.warning("elastic: could not deregister (%s); going on without the daemon", exc)

    def request_grow(self, n: int) -> None:
        """Evolving jobs: ask for `n` more nodes. Returns (None) as soon as the daemon has
        queued the request, not when it is granted: the nodes come later, whole, as a grow
        order (pre_grow, post_grow, then `hosts` lists them), when the policy finds them
        free. A new request replaces one still waiting.

        Raises DaemonRefused `bad_request` for a job that is not evolving (rigid, moldable,
        malleable: a malleable job is resized by the policy, not on request) or for more
        nodes than the job's `max` leaves room for; `deregistered` after `disable()`;
        `state_write_failed` when the daemon could not save it (nothing changed: ask again).
        """
        self._request(f"request {int(n)}")

    def release(self, hosts: list[str]) -> None:
        """Evolving jobs: give `hosts` back now; the daemon then ends the job's processes
        there (`on_leaving` runs in them) and frees the hosts. `hosts` drops them when the
        daemon has said yes. An order being handled is answered first (the daemon takes no
        release while an order is open), except when called from a hook, which answers it.

        Raises DaemonRefused `bad_request` for a job that is not evolving; `bad_hosts` for a
        host that is not the job's, the leader's host, or going below the job's `min`;
        `busy` while an order is open or the hosts of the last change are still being freed
        (try again shortly); `state_write_failed` (nothing changed)."""
        if not _IN_HOOK.get():
            self.wait_idle()
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
        """Send a line, wait for its reply; once more on a new connection if the old one dropped."""
        for attempt in range(2):
            reply = self._exchange(line)
            if reply is not None:
                break
            if not self._wait_reconnected():
                raise ChannelClosed("connection to the daemon closed")
        else:
            raise ChannelClosed("connection to the daemon lost twice during one request")
        if reply.startswith("error "):
            code, text = parse_error(reply)
            if attempt and code == "unknown_order" and line.split(" ", 1)[0] in _ANSWER_VERBS:
                # Its first sending reached the daemon before the connection dropped.
                return "ok " + line.split(" ", 1)[0]
            raise DaemonRefused(code, text)
        return reply

    def _exchange(self, line: str) -> str | None:
        """One send and its reply; None when the connection dropped meanwhile."""
        if self._sock is None or self._closed.is_set():
            raise ChannelClosed("not connected to the daemon")
        with self._send_lock:
            if not self._connected.is_set():
                return None
            try:
                self._sock.sendall(line.encode("ascii") + b"\n")
            except OSError:
                return None
            # No reply timeout fails the job: a daemon paused (a swapped or overloaded login
            # node) answers when it runs again; a daemon gone closes the connection, and the
            # reader thread then reconnects (the request is sent again) or gives up.
            waited = 0.0
            while True:
                try:
                    return self._replies.get(timeout=self.timeout)
                except queue.Empty:
                    if self._closed.is_set():
                        raise ChannelClosed("connection to the daemon closed") from None
                    waited += self.timeout
                    log.warning("elastic: no reply to %r for %g s; the daemon may be paused; still waiting",
                                line.split()[0], waited)

    def _wait_reconnected(self) -> bool:
        self._connected.wait(self.reconnect_for + self.timeout)
        return self._connected.is_set() and not self._closed.is_set()

    def _dial(self, deadline: float) -> socket.socket | None:
        """Connect, retrying while refused (a daemon restarting) until the deadline."""
        delay = 0.05
        while not self._closed.is_set():
            try:
                sock = socket.create_connection(self.env.app_address, timeout=self.timeout)
            except OSError:
                if time.monotonic() + delay > deadline:
                    return None
                time.sleep(delay)
                delay = min(1.0, delay * 2)
                continue
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            return sock
        return None

    def _read_loop(self) -> None:
        try:
            while True:
                self._read_until_eof()
                if self._closed.is_set() or self.reconnect_for <= 0:
                    return
                self._connected.clear()
                self._replies.put(None)  # a request waiting for a reply: send again later
                if not self._reconnect():
                    log.error("elastic: lost the daemon and could not reconnect within %g s", self.reconnect_for)
                    return
        finally:
            self._closed.set()
            self._connected.set()
            self._replies.put(None)
            self._orders.put(None)

    def _read_until_eof(self) -> None:
        assert self._sock is not None
        try:
            while True:
                line = self._next_line(self._sock)
                if line is None:
                    return
                if line.split(" ", 1)[0] in UNSOLICITED_VERBS:
                    self._order_idle.clear()
                    self._orders.put(line)
                else:
                    self._replies.put(line)
        except OSError:
            return

    def _next_line(self, sock: socket.socket) -> str | None:
        while b"\n" not in self._buf:
            if len(self._buf) > MAX_LINE:
                return None
            chunk = sock.recv(65536)
            if not chunk:
                return None
            self._buf += chunk
        raw, self._buf = self._buf.split(b"\n", 1)
        return raw.decode("ascii", "replace").rstrip("\r")

    def _reconnect(self) -> bool:
        """Connect again, say who we are and what we are doing; the reader thread's work."""
        deadline = time.monotonic() + self.reconnect_for
        log.warning("elastic: connection to the daemon lost; reconnecting")
        with self._send_lock:
            # Closed first: a daemon that has not seen it end (it sees an end only when this
            # side says so, or its keepalive finds the peer gone) holds the job's
            # registration on it, and refuses the new connection's `register`.
            if self._sock is not None:
                self._sock.close()
            while not self._closed.is_set():
                sock = self._dial(deadline)
                if sock is None:
                    return False
                self._buf = b""
                while not self._replies.empty():  # stale wake-ups of the old connection
                    self._replies.get_nowait()
                try:
                    self._handshake(sock)
                except DaemonRefused as exc:
                    sock.close()
                    if exc.code == "already_registered" and time.monotonic() < deadline:
                        # The old connection, half-open on the daemon's side (a network
                        # fault), is still registered there until the daemon finds it
                        # gone (PROTOCOL.md: within about 25 s): ask again.
                        log.warning("elastic: the daemon still holds the old connection; registering again in 1 s")
                        time.sleep(1.0)
                        continue
                    log.error("elastic: the restarted daemon refused the job: %s", exc)
                    return False
                except OSError:
                    sock.close()
                    if time.monotonic() > deadline:
                        return False
                    time.sleep(0.1)
                    continue
                self._sock = sock
                self.reconnects += 1
                self._connected.set()
                log.warning("elastic: reconnected to the daemon")
                return True
        return False

    def _handshake(self, sock: socket.socket) -> None:
        sock.settimeout(self.timeout)
        lines = [f"hello {PROTOCOL_VERSION} {self.env.job_id} {self.env.secret}"]
        if self._registered:
            lines.append("register")
        order = self._current_order
        lines.append("resume" + (f" order={order}" if order else "") + "".join(f" {h}" for h in self.hosts))
        for line in lines:
            sock.sendall(line.encode("ascii") + b"\n")
            while True:
                reply = self._next_line(sock)
                if reply is None:
                    raise OSError("connection closed during the handshake")
                if reply.split(" ", 1)[0] in UNSOLICITED_VERBS:
                    self._order_idle.clear()
                    self._orders.put(reply)
                    continue
                break
            if reply.startswith("error "):
                if line.startswith("resume"):
                    # Only what this end believes: the daemon's `hosts` line says what holds.
                    log.warning("elastic: the daemon did not take the resume: %s", reply)
                    continue
                raise DaemonRefused(*parse_error(reply))
        sock.settimeout(None)

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
                if self._closed.is_set():
                    return
                log.warning("elastic: the connection dropped while handling %r", line)
            except Exception:
                log.exception("elastic: handling order %r failed", line)
            finally:
                self.orders_handled += 1
                if self._orders.empty():
                    self._order_idle.set()

    def _call(self, fn: Callable[..., Any], *args: Any) -> Any:
        mark = _IN_HOOK.set(True)
        try:
            if inspect.iscoroutinefunction(fn):
                if self._loop is None:
                    raise ElasticAppError("async handler methods need register() from a coroutine")
                return asyncio.run_coroutine_threadsafe(fn(*args), self._loop).result()
            return fn(*args)
        finally:
            _IN_HOOK.reset(mark)

    def _handle_order(self, line: str) -> None:
        try:
            msg = parse(line.encode("ascii", "replace"), DAEMON_VERBS)
            if msg.verb == "hosts":
                self._hosts_changed(list(msg.args), msg.options.get("reason", ""), msg.options.get("order"))
                return
            n = parse_count(msg)
        except MalformedMessage as exc:
            log.error("elastic: unreadable line from the daemon %r: %s", line, exc)
            return
        words = [msg.verb, *msg.args]
        args = list(msg.args)
        order = msg.options.get("order", "0")
        h = self.handler
        if h is None:
            self._answer(f"refuse order={order} no handler registered")
            return
        self._current_order = order
        try:
            self._answer_order(h, words[0], n, args, order)
        finally:
            self._current_order = None

    def _hosts_changed(self, hosts: list[str], reason: str, order: str | None) -> None:
        """The daemon changed the job's hosts on its own (a node failed, a deadline passed,
        a grow could not be launched): the library's view follows, and the handler is told."""
        lost = [x for x in self.hosts if x not in hosts]
        log.warning("elastic: the daemon set the job's hosts to %s (%s%s)", " ".join(hosts), reason,
                    f", order {order} void" if order else "")
        self.hosts = list(hosts)
        h = self.handler
        if h is not None:
            self._call(h.on_hosts_changed, list(hosts), lost, reason)

    def _answer_order(self, h: MalleableHandler, verb: str, n: int, args: list[str], order: str) -> None:
        removed: list[str] | None = None
        try:
            if verb == "shrink":
                chosen = self._call(h.pre_shrink, n)
                removed = self._last_hosts(n) if chosen is None else [str(x) for x in chosen]
                self._answer(f"shrunk order={order} " + " ".join(removed))
                self.hosts = [x for x in self.hosts if x not in set(removed)]
            else:
                new = args[1 : 1 + n]
                continued = list(self.hosts)
                self._call(h.pre_grow, n)
                self._call(h.post_grow, n, continued, new)
                # The view changes once the daemon has taken the answer: a `release` made on
                # seeing the new hosts must not reach it before `grown` (busy: order open),
                # and a `grown` settled without (expired) leaves the hosts it then sets.
                grown = continued + new
                self._answer(f"grown order={order} " + " ".join(grown))
                self.hosts = grown
        except Refuse as r:
            self._answer(f"refuse order={order} {_one_line(r.reason)}".rstrip())
        except Defer as d:
            self._answer(f"defer order={order} {seconds_text(d.seconds)}")
        except DaemonRefused as exc:
            if exc.code in _ORDER_GONE:
                # Settled without this answer (a deadline passed): the daemon's `hosts`
                # message, which follows, says what the job holds now.
                log.warning("elastic: order %s was settled without this answer: %s", order, exc)
                return
            log.error("elastic: the daemon refused the answer to order %s: %s", order, exc)
            self._fallback_refuse(order, f"handler answer refused: {_one_line(exc.message)}")
        except ChannelClosed:
            raise
        except Exception as exc:
            log.exception("elastic: handler failed on %s", verb)
            self._fallback_refuse(order, f"handler raised {type(exc).__name__}")
        else:
            if removed is not None:
                # The shrink is done: what post_shrink raises is logged (_order_loop), not
                # sent as a refusal of an order the daemon has settled.
                self._current_order = None
                self._call(h.post_shrink, n, removed)

    def _last_hosts(self, n: int) -> list[str]:
        """pre_shrink's default: the last `n` hosts of the job's list, never the leader's
        (where this process runs and talks to the daemon)."""
        others = [x for x in self.hosts if x != self.env.host]
        if n > len(others):
            raise Refuse(f"cannot give back {n} of {len(self.hosts)} hosts without the leader's ({self.env.host})")
        return others[len(others) - n:]

    def _fallback_refuse(self, order: str, reason: str) -> None:
        """Refuse an order whose answer could not be given; a refusal of that too is logged
        (the deadline settles the order then), never raised into the order thread."""
        try:
            self._answer(f"refuse order={order} {reason}")
        except DaemonRefused as exc:
            log.error("elastic: the daemon refused the refusal of order %s too: %s", order, exc)

    def _answer(self, line: str) -> str:
        """Send an order's answer. One the daemon could not save (`state_write_failed`: its
        state directory is full) was not taken: it is sent again, every second or two, until
        it is. The daemon, if it still cannot save it at the order's deadline, settles the
        order with this same answer and takes the retry that follows (`ok`), so the hosts
        the handler gave up are the ones that go, whatever the disk does."""
        delay, warned = 0.5, False
        while True:
            try:
                return self._request(line)
            except DaemonRefused as exc:
                if exc.code not in RETRY_CODES:
                    raise
                if not warned:
                    log.warning("elastic: the daemon could not save the answer %r (%s); sending it again until "
                                "it can", line, exc)
                    warned = True
            time.sleep(delay)
            delay = min(2.0, delay * 2)


def _one_line(text: str) -> str:
    return " ".join(text.replace("=", ":").split())[:400]
