"""The application channel server: a running job's own connection to the daemon.

The application proves which job it is with that job's secret (given in its environment);
after that it may only act on itself. A connection that keeps sending garbage is closed
and the job runs on as rigid.

It is the wire only: it knows the daemon through `AppCalls` (the calls an application's
lines become), and keeps no job state but how many connections each job holds.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import select
import socket
from collections.abc import Mapping
from typing import Protocol

from elastic_protocol.appchannel import APP_VERBS, STATE_WRITE_FAILED, Message, error_line, parse, parse_count
from elastic_protocol.errors import FrameTooLong, MalformedMessage, ProtocolError
from elastic_protocol.framing import read_line
from elastic_protocol.version import PROTOCOL_VERSION
from elasticd.core.job import Job
from elasticd.daemon.app_channel import AppLink
from elasticd.daemon.line_server import ChannelLimits, LineServer, peer_text
from elasticd.errors import OrderRejected, StateWriteError, UnknownJob

log = logging.getLogger("elasticd.app")

MAX_BAD_LINES = 5
MAX_VALUES = 1024
MAX_VALUE_BYTES = 256 * 1024
# Orders are small; a peer that does not read them for this long is not a peer.
MAX_OUTBOUND_BYTES = 1 << 20


class AppCalls(Protocol):
    """What this channel asks of the daemon (elasticd.daemon.service.Daemon answers): the
    calls an application's lines become, and what they are checked against."""

    def job(self, job_id: int) -> Job:
        """The job (UnknownJob when there is none)."""

    def job_secret(self, job_id: int) -> str | None:
        """The secret a connection of the job proves itself with; None once the job ended."""

    def leader(self, job_id: int) -> AppLink | None:
        """The job's registered connection, the one that speaks for its orders."""

    def values(self, job_id: int) -> Mapping[str, str]:
        """The job's rendezvous values (put/get)."""

    def persist(self) -> None:
        """Save what changed: called before any reply is written."""

    def app_register(self, job_id: int, link: AppLink) -> None: ...

    def app_deregister(self, job_id: int) -> None: ...

    def app_lost(self, job_id: int, link: AppLink) -> None: ...

    def app_answer(self, job_id: int, verb: str, order_id: int, hosts: list[str], text: str) -> None: ...

    def app_resume(self, job_id: int, order_id: int | None, hosts: list[str], link: AppLink) -> None: ...

    def app_request(self, job_id: int, count: int) -> None: ...

    def app_release(self, job_id: int, hosts: list[str]) -> None: ...

    def put_value(self, job_id: int, key: str, value: str) -> None: ...


class _Link:
    """One authenticated application connection; what the daemon sends orders through."""

    def __init__(self, writer: asyncio.StreamWriter, reader: asyncio.StreamReader | None = None) -> None:
        self.writer = writer
        self.reader = reader

    def pending_input(self) -> bool:
        """Has the application sent something not handled yet (read or still in the socket)?
        A deadline checks this first: an answer that arrived in time wins over the timer
        (after a pause of the daemon both are due at once)."""
        if self.reader is not None and len(getattr(self.reader, "_buffer", b"")) > 0:
            return True
        sock = self.writer.get_extra_info("socket")
        if sock is None or self.writer.is_closing():
            return False
        try:
            readable, _, _ = select.select([sock.fileno()], [], [], 0)
        except (OSError, ValueError):
            return False
        return bool(readable)

    def send(self, line: bytes) -> bool:
        if self.writer.is_closing():
            return False
        if self.writer.transport.get_write_buffer_size() > MAX_OUTBOUND_BYTES:
            return False
        self.writer.write(line)
        return True


class AppServer(LineServer):
    channel = "app"

    def __init__(self, calls: AppCalls, limits: ChannelLimits, max_line: int) -> None:
        super().__init__(limits, max_line, log)
        self.calls = calls
        # Authenticated connections per job: a job may not take the whole channel.
        self._per_job: dict[int, int] = {}

    def busy_line(self) -> bytes:
        return error_line("busy", "too many connections") + b"\n"

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = writer.get_extra_info("peername")
        _keep_alive(writer)
        d = self.calls
        link = _Link(writer, reader)
        job_id: int | None = None
        try:
            job_id = await self._hello(reader, writer, peer)
            if job_id is None:
                return
            bad = 0
            while True:
                try:
                    line = await read_line(reader, self.max_line)
                except FrameTooLong as exc:
                    await _reply(writer, error_line(exc.code, str(exc)))
                    self.refused.note(f"job {job_id}: {exc}; connection closed")
                    break
                if line is None:
                    break
                if d.job_secret(job_id) is None:
                    # The job ended: its connection authenticates nothing any more.
                    await _reply(writer, error_line("job_ended", f"job {job_id} has ended"))
                    break
                try:
                    reply = self._serve(job_id, parse(line, APP_VERBS), link).encode()
                except MalformedMessage as exc:
                    bad += 1
                    self.refused.note(f"job {job_id} sent a bad line ({bad}/{MAX_BAD_LINES}): {exc}")
                    await _reply(writer, error_line(exc.code, str(exc)))
                    if bad >= MAX_BAD_LINES:
                        self.refused.note(f"job {job_id}: too many bad lines; closing, the job runs on as rigid")
                        break
                    continue
                except (OrderRejected, ProtocolError) as exc:
                    if exc.code != "not_found":  # a value not put yet is an answer, not a refusal
                        self.refused.note(f"job {job_id}: {exc.code}: {exc}")
                    reply = error_line(exc.code, str(exc))
                except UnknownJob:
                    break  # the job is gone (ended meanwhile)
                except StateWriteError as exc:
                    # Not a bug: the state directory cannot take the write (a full disk).
                    # Nothing was changed; the application sends the line again later.
                    reply = error_line(STATE_WRITE_FAILED, f"{exc}; not taken, nothing changed: send it again")
                except Exception:
                    log.exception("app: job %d: internal error", job_id)
                    reply = error_line("internal", "internal error; see the daemon log")
                d.persist()  # saved before the application hears of it
                await _reply(writer, reply)
        except ProtocolError as exc:
            self.refused(peer, f"{exc.code}: {exc}" if job_id is None else f"job {job_id}: {exc.code}: {exc}")
        except (ConnectionError, asyncio.CancelledError):
            pass
        except TimeoutError as exc:
            # TCP gave up on the peer (its keepalive probes or a write went unanswered: its
            # host reset or was cut off). The peer went away; the daemon did nothing wrong.
            log.warning("app: %s: connection from %s timed out (%s); closed",
                        "before its hello" if job_id is None else f"job {job_id}", peer_text(peer),
                        exc.strerror or exc)
        finally:
            if job_id is not None:
                self._per_job[job_id] -= 1
                if not self._per_job[job_id]:
                    del self._per_job[job_id]
                d.app_lost(job_id, link)

    async def _hello(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, peer: object) -> int | None:
        """The job this connection proved to be, or None (refused, told why, logged)."""
        try:
            line = await asyncio.wait_for(read_line(reader, self.max_line), self.limits.hello_timeout)
            if line is None:
                self.refused(peer, "closed before its hello")
                return None
            msg = parse(line, APP_VERBS)
        except TimeoutError:
            await self._refuse(writer, peer, "timeout", "no hello received in time")
            return None
        except MalformedMessage as exc:
            # Any first line that is not a 3-argument hello is bad_request (PROTOCOL.md),
            # an empty or non-ASCII one too.
            await self._refuse(writer, peer, "bad_request", f"first line must be: hello VERSION JOB_ID SECRET ({exc})")
            return None
        except ProtocolError as exc:
            await self._refuse(writer, peer, exc.code, str(exc))
            return None
        if msg.verb != "hello" or len(msg.args) != 3:
            await self._refuse(writer, peer, "bad_request", "first line must be: hello VERSION JOB_ID SECRET")
            return None
        version, job_text, secret = msg.args
        if version != str(PROTOCOL_VERSION):
            await self._refuse(writer, peer, "version_mismatch",
                               f"daemon speaks version {PROTOCOL_VERSION}, not {version[:16]}")
            return None
        # Job ids are small: a digit string longer than this names no job (and int() of
        # thousands of digits would raise).
        job_id = int(job_text) if job_text.isdigit() and len(job_text) <= 18 else None
        expected = self.calls.job_secret(job_id) if job_id is not None else None
        if job_id is None or expected is None or not hmac.compare_digest(secret.encode(), expected.encode()):
            await self._refuse(writer, peer, "auth_failed", "wrong secret for that job, or the job is not running",
                               f"claiming job {job_text[:20]}: wrong secret or job not running")
            return None
        try:
            widest = self.calls.job(job_id).spec.node_bounds[1]
        except UnknownJob:
            widest = 1
        cap = 2 * widest + 4
        if self._per_job.get(job_id, 0) >= cap:
            await self._refuse(writer, peer, "busy", f"job {job_id} already holds {cap} connections",
                               f"job {job_id}: more than {cap} connections")
            return None
        self._per_job[job_id] = self._per_job.get(job_id, 0) + 1
        self.proven(writer)
        await _reply(writer, f"ok hello {PROTOCOL_VERSION}".encode())
        return job_id

    async def _refuse(self, writer: asyncio.StreamWriter, peer: object, code: str, message: str,
                      why: str | None = None) -> None:
        self.refused(peer, why or f"{code}: {message}")
        try:
            await asyncio.wait_for(_reply(writer, error_line(code, message)), 1.0)
        except (ConnectionError, TimeoutError):
            pass

    def _serve(self, job_id: int, msg: Message, link: _Link) -> str:
        d = self.calls
        verb = msg.verb
        if verb == "ping":
            return "pong"
        if verb == "hello":
            raise OrderRejected("bad_request", "hello was already received on this connection")
        if verb == "register":
            job = d.job(job_id)
            if job.deregistered:
                raise OrderRejected("deregistered", f"job {job_id} deregistered for good")
            leader = d.leader(job_id)
            if leader is not None and leader is not link:
                raise OrderRejected("already_registered",
                                    f"job {job_id} is registered on another connection (one leader per job)")
            d.app_register(job_id, link)
            return "ok register"
        if verb == "deregister":
            if d.job(job_id).deregistered:
                return "ok deregister"  # for good already
            leader = d.leader(job_id)
            if leader is None:
                raise OrderRejected("not_registered", f"no connection of job {job_id} is registered; "
                                    "deregister from the one that registers")
            if leader is not link:
                raise OrderRejected("not_registered", "only the registered connection may deregister")
            d.app_deregister(job_id)
            return "ok deregister"
        if verb in ("shrunk", "grown", "refuse", "defer"):
            order_id = _order_id(msg)
            if d.leader(job_id) is not link:
                raise OrderRejected("not_registered", "answers come from the registered connection")
            text = msg.text_without("order")
            d.app_answer(job_id, verb, order_id, list(msg.args), text)
            return f"ok {verb} order={order_id}"
        if verb == "resume":
            order_text = msg.options.get("order")
            if order_text is not None and not order_text.isdigit():
                raise MalformedMessage("resume: order=ID must be a number")
            d.app_resume(job_id, None if order_text is None else int(order_text), list(msg.args), link)
            return "ok resume"
        if verb == "request":
            n = parse_count(msg)
            d.app_request(job_id, n)
            return f"ok request {n}"
        if verb == "release":
            if not msg.args:
                raise MalformedMessage("release: name the hosts to release")
            d.app_release(job_id, list(msg.args))
            return "ok release " + " ".join(msg.args)
        if verb == "put":
            if len(msg.args) != 2:
                raise MalformedMessage("put: needs KEY VALUE (tokens without spaces or '=')")
            values = d.values(job_id)
            if msg.args[0] not in values and len(values) >= MAX_VALUES:
                raise OrderRejected("busy", f"at most {MAX_VALUES} values per job")
            size = sum(len(k) + len(v) for k, v in values.items() if k != msg.args[0])
            if size + len(msg.args[0]) + len(msg.args[1]) > MAX_VALUE_BYTES:
                raise OrderRejected("busy", f"at most {MAX_VALUE_BYTES} bytes of values per job")
            d.put_value(job_id, msg.args[0], msg.args[1])
            return f"ok put {msg.args[0]}"
        if verb == "get":
            if len(msg.args) != 1:
                raise MalformedMessage("get: needs KEY")
            value = d.values(job_id).get(msg.args[0])
            if value is None:
                raise OrderRejected("not_found", msg.args[0])
            return f"ok get {msg.args[0]} {value}"
        raise MalformedMessage(f"unexpected message {verb!r}")


async def _reply(writer: asyncio.StreamWriter, line: bytes) -> None:
    """Every reply waits for the peer to take it: one that sends without reading stalls
    itself, not the daemon's memory."""
    writer.write(line + b"\n")
    await writer.drain()


def _order_id(msg: Message) -> int:
    text = msg.options.get("order")
    if text is None or not text.isdigit():
        raise MalformedMessage(f"{msg.verb}: needs order=ID naming the order it answers")
    return int(text)


# An application's connection is idle between orders, for hours. One whose peer went away
# without a word (its host reset, a network fault) would stay open, and a registered one
# would hold the job's registration against the application's reconnection: probed after
# 10 s idle, every 5 s, it is closed after 3 probes unanswered (PROTOCOL.md: about 25 s).
KEEPALIVE_IDLE, KEEPALIVE_INTERVAL, KEEPALIVE_PROBES = 10, 5, 3


def _keep_alive(writer: asyncio.StreamWriter) -> None:
    sock = writer.get_extra_info("socket")
    if sock is None:
        return
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE, KEEPALIVE_IDLE)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL, KEEPALIVE_INTERVAL)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPCNT, KEEPALIVE_PROBES)
    except (OSError, AttributeError):  # not TCP (a test's socketpair), or no such option here
        log.debug("application connection from %s: no TCP keepalive", writer.get_extra_info("peername"))
