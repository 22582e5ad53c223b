"""The application channel server: a running job's own connection to the daemon.

The application proves which job it is with that job's secret (given in its environment);
after that it may only act on itself. A connection that keeps sending garbage is closed
and the job runs on as rigid.
"""

from __future__ import annotations

import asyncio
import hmac
import logging

from elastic_protocol.appchannel import APP_VERBS, Message, error_line, parse, parse_count
from elastic_protocol.errors import FrameTooLong, MalformedMessage, ProtocolError
from elastic_protocol.framing import read_line
from elastic_protocol.version import MAX_APP_LINE_BYTES, PROTOCOL_VERSION

from elasticd.daemon.line_server import LineServer
from elasticd.daemon.service import Daemon
from elasticd.errors import OrderRejected, UnknownJob

log = logging.getLogger("elasticd.app")

MAX_BAD_LINES = 5
MAX_VALUES = 1024
# Orders are small; a peer that does not read them for this long is not a peer.
MAX_OUTBOUND_BYTES = 1 << 20


class _Link:
    """One authenticated application connection; what the daemon sends orders through."""

    def __init__(self, writer: asyncio.StreamWriter) -> None:
        self.writer = writer

    def send(self, line: bytes) -> bool:
        if self.writer.is_closing():
            return False
        if self.writer.transport.get_write_buffer_size() > MAX_OUTBOUND_BYTES:
            return False
        self.writer.write(line)
        return True


class AppServer(LineServer):
    def __init__(self, daemon: Daemon) -> None:
        super().__init__(daemon, MAX_APP_LINE_BYTES)

    def busy_line(self) -> bytes:
        return error_line("busy", "too many connections") + b"\n"

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = writer.get_extra_info("peername")
        d = self.daemon
        link = _Link(writer)
        job_id: int | None = None
        try:
            job_id = await self._hello(reader, writer, peer)
            if job_id is None:
                return
            bad = 0
            while True:
                try:
                    line = await read_line(reader, MAX_APP_LINE_BYTES)
                except FrameTooLong as exc:
                    writer.write(error_line(exc.code, str(exc)) + b"\n")
                    log.warning("app: job %d: %s; connection closed", job_id, exc)
                    break
                if line is None:
                    break
                try:
                    reply = self._serve(job_id, parse(line, APP_VERBS), link)
                except MalformedMessage as exc:
                    bad += 1
                    log.warning("app: job %d sent a bad line (%d/%d): %s", job_id, bad, MAX_BAD_LINES, exc)
                    writer.write(error_line(exc.code, str(exc)) + b"\n")
                    if bad >= MAX_BAD_LINES:
                        log.warning("app: job %d: too many bad lines; closing, the job runs on as rigid", job_id)
                        break
                    continue
                except (OrderRejected, ProtocolError) as exc:
                    log.info("app: job %d: %s: %s", job_id, exc.code, exc)
                    writer.write(error_line(exc.code, str(exc)) + b"\n")
                    continue
                except UnknownJob:
                    break  # the job is gone (ended meanwhile)
                except Exception:
                    log.exception("app: job %d: internal error", job_id)
                    writer.write(error_line("internal", "internal error; see the daemon log") + b"\n")
                    continue
                d.persist()  # saved before the application hears of it
                writer.write(reply.encode() + b"\n")
                await writer.drain()
        except ProtocolError as exc:
            log.warning("app: %s from %s: %s", exc.code, peer, exc)
        except (ConnectionError, asyncio.CancelledError):
            pass
        finally:
            if job_id is not None:
                d.app_lost(job_id, link)

    async def _hello(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, peer: object) -> int | None:
        try:
            line = await asyncio.wait_for(read_line(reader, MAX_APP_LINE_BYTES), self.daemon.config.hello_timeout)
            if line is None:
                return None
            msg = parse(line, APP_VERBS)
        except TimeoutError:
            writer.write(error_line("timeout", "no hello received in time") + b"\n")
            return None
        except ProtocolError as exc:
            writer.write(error_line(exc.code, str(exc)) + b"\n")
            return None
        if msg.verb != "hello" or len(msg.args) != 3:
            writer.write(error_line("bad_request", "first line must be: hello VERSION JOB_ID SECRET") + b"\n")
            return None
        version, job_text, secret = msg.args
        if version != str(PROTOCOL_VERSION):
            writer.write(error_line("version_mismatch", f"daemon speaks version {PROTOCOL_VERSION}, not {version[:16]}") + b"\n")
            return None
        expected = self.daemon.job_secrets.get(int(job_text)) if job_text.isdigit() else None
        if expected is None or not hmac.compare_digest(secret.encode(), expected.encode()):
            log.warning("app: refused %s claiming job %s: wrong secret or job not running", peer, job_text[:20])
            writer.write(error_line("auth_failed", "wrong secret for that job, or the job is not running") + b"\n")
            return None
        writer.write(f"ok hello {PROTOCOL_VERSION}\n".encode())
        await writer.drain()
        return int(job_text)

    def _serve(self, job_id: int, msg: Message, link: _Link) -> str:
        d = self.daemon
        verb = msg.verb
        if verb == "ping":
            return "pong"
        if verb == "hello":
            raise OrderRejected("bad_request", "hello was already received on this connection")
        if verb == "register":
            job = d.core.job(job_id)
            if job.deregistered:
                raise OrderRejected("deregistered", f"job {job_id} deregistered for good")
            d.app_register(job_id, link)
            return "ok register"
        if verb == "deregister":
            d.app_deregister(job_id)
            return "ok deregister"
        if verb in ("shrunk", "grown", "refuse", "defer"):
            order_id = _order_id(msg)
            if d.app_links.get(job_id) is not link:
                raise OrderRejected("not_registered", "answers come from the registered connection")
            text = " ".join(msg.args)
            d.app_answer(job_id, verb, order_id, list(msg.args), text)
            return f"ok {verb} order={order_id}"
        if verb == "resume":
            text = msg.options.get("order")
            if text is not None and not text.isdigit():
                raise MalformedMessage("resume: order=ID must be a number")
            d.app_resume(job_id, None if text is None else int(text), list(msg.args))
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
            values = d.job_values.setdefault(job_id, {})
            if msg.args[0] not in values and len(values) >= MAX_VALUES:
                raise OrderRejected("busy", f"at most {MAX_VALUES} values per job")
            d.put_value(job_id, msg.args[0], msg.args[1])
            return f"ok put {msg.args[0]}"
        if verb == "get":
            if len(msg.args) != 1:
                raise MalformedMessage("get: needs KEY")
            value = d.job_values.get(job_id, {}).get(msg.args[0])
            if value is None:
                raise OrderRejected("not_found", msg.args[0])
            return f"ok get {msg.args[0]} {value}"
        raise MalformedMessage(f"unexpected message {verb!r}")


def _order_id(msg: Message) -> int:
    text = msg.options.get("order")
    if text is None or not text.isdigit():
        raise MalformedMessage(f"{msg.verb}: needs order=ID naming the order it answers")
    return int(text)
