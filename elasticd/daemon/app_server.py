"""The application channel server: a running job's own connection to the daemon.

The application proves which job it is with that job's secret (given in its environment);
after that it may only act on itself. A connection that keeps sending garbage is closed
and the job runs on as rigid.
"""

from __future__ import annotations

import asyncio
import hmac
import logging

from elastic_protocol.appchannel import APP_VERBS, Message, error_line, parse
from elastic_protocol.errors import FrameTooLong, ProtocolError
from elastic_protocol.framing import read_line
from elastic_protocol.version import MAX_APP_LINE_BYTES, PROTOCOL_VERSION

from elasticd.daemon.service import Daemon

log = logging.getLogger("elasticd.app")

MAX_BAD_LINES = 5


class AppServer:
    def __init__(self, daemon: Daemon) -> None:
        self.daemon = daemon
        self._writers: set[asyncio.StreamWriter] = set()

    async def start(self, host: str, port: int) -> asyncio.Server:
        return await asyncio.start_server(self._handle, host, port, limit=MAX_APP_LINE_BYTES + 1)

    async def close_all(self) -> None:
        for w in list(self._writers):
            w.close()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = writer.get_extra_info("peername")
        d = self.daemon
        if d.connections >= d.config.max_connections:
            writer.write(error_line("busy", "too many connections") + b"\n")
            writer.close()
            return
        d.connections += 1
        self._writers.add(writer)
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
                    reply = self._serve(job_id, parse(line, APP_VERBS))
                except ProtocolError as exc:
                    bad += 1
                    log.warning("app: job %d sent a bad line (%d/%d): %s", job_id, bad, MAX_BAD_LINES, exc)
                    writer.write(error_line(exc.code, str(exc)) + b"\n")
                    if bad >= MAX_BAD_LINES:
                        log.warning("app: job %d: too many bad lines; closing, job runs on as rigid", job_id)
                        break
                    continue
                writer.write(reply.encode() + b"\n")
                await writer.drain()
        except ProtocolError as exc:
            log.warning("app: %s from %s: %s", exc.code, peer, exc)
        except (ConnectionError, asyncio.CancelledError):
            pass
        finally:
            d.connections -= 1
            self._writers.discard(writer)
            if job_id is not None:
                self._lost(job_id)
            writer.close()

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
            writer.write(error_line("version_mismatch", f"daemon speaks version {PROTOCOL_VERSION}") + b"\n")
            return None
        expected = self.daemon.job_secrets.get(int(job_text)) if job_text.isdigit() else None
        if expected is None or not hmac.compare_digest(secret.encode(), expected.encode()):
            log.warning("app: refused %s claiming job %s: wrong secret or job not running", peer, job_text[:20])
            writer.write(error_line("auth_failed", "wrong secret for that job, or the job is not running") + b"\n")
            return None
        writer.write(f"ok hello {PROTOCOL_VERSION}\n".encode())
        await writer.drain()
        return int(job_text)

    def _serve(self, job_id: int, msg: Message) -> str:
        d = self.daemon
        if msg.verb == "ping":
            return "pong"
        if msg.verb == "hello":
            raise ProtocolError("hello was already received on this connection")
        if msg.verb == "register":
            d.set_malleable_ready(job_id, True)
            return "ok register"
        if msg.verb == "deregister":
            d.set_malleable_ready(job_id, False)
            return "ok deregister"
        raise ProtocolError(f"{msg.verb}: no order is outstanding for job {job_id}")

    def _lost(self, job_id: int) -> None:
        job = self.daemon.core.jobs.get(job_id)
        if job is not None and job.state.holds_nodes and job.malleable_ready:
            self.daemon.set_malleable_ready(job_id, False)
