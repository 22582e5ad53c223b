"""The control channel server: authenticated JSON-line requests from the command-line tools.

A bad request gets a typed error line and the connection stays usable; only a broken frame
(over-long line, half a line) or a failed hello closes it. Nothing on the wire is ever a
traceback: unexpected failures are logged here and answered with code `internal`.

It is the wire only: it knows the daemon through `ControlCalls` (one call per request) and
keeps no job state.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
import os
from dataclasses import dataclass
from typing import Any, Protocol

from pydantic import ValidationError

from elastic_protocol.control import (
    REQUEST_ADAPTER,
    Cancel,
    ErrorBody,
    Hello,
    Queue,
    QueueDocument,
    ReleaseHold,
    Resize,
    Response,
    Status,
    StatusInfo,
    Stop,
    Submit,
    Wait,
)
from elastic_protocol.errors import ProtocolError
from elastic_protocol.framing import read_line
from elastic_protocol.jobspec import JobSpec, env_problems, format_validation_errors
from elastic_protocol.version import PROTOCOL_VERSION
from elasticd import __version__
from elasticd.core.job import Job
from elasticd.core.states import JobState
from elasticd.daemon.line_server import ChannelLimits, LineServer
from elasticd.errors import ElasticError, UnknownJob

log = logging.getLogger("elasticd.control")


@dataclass(frozen=True)
class StopNotes:
    """What a stop could not do, in words for the operator (None: nothing of that kind)."""

    not_ended: str | None = None  # jobs not seen ending, left to the next start
    not_saved: str | None = None  # final states the journal could not take
    not_reached: str | None = None  # nodes where what the jobs left could not be ended


class ControlCalls(Protocol):
    """What this channel asks of the daemon (elasticd.daemon.service.Daemon answers): one
    call per request, and what the requests are checked against."""

    @property
    def secret(self) -> str:
        """What a client's hello must prove it holds (daemon.json, owner only)."""

    @property
    def stopping(self) -> bool: ...

    @property
    def stopped(self) -> bool:
        """The stop is answered: the connection closes after its reply."""

    def persist(self) -> None:
        """Save what changed: called before any reply is written."""

    def job(self, job_id: int) -> Job:
        """The job (UnknownJob when there is none)."""

    def pending_ids(self) -> list[int]: ...

    def submit(self, spec: JobSpec) -> int: ...

    def cancel(self, job_id: int) -> tuple[str, str | None]: ...

    def resize(self, job_id: int, nodes: int, hold: bool = False) -> None: ...

    def release_hold(self, job_id: int) -> None: ...

    async def wait_jobs(self, job_ids: list[int] | None, timeout: float | None) -> bool: ...

    async def stop(self) -> list[int]: ...

    def stop_notes(self) -> StopNotes: ...

    def queue(self, req: Queue) -> QueueDocument: ...

    def status(self) -> StatusInfo: ...


def _error(code: str, message: str, details: list[str] | None = None) -> bytes:
    resp = Response(ok=False, error=ErrorBody(code=code, message=message, details=details or []))
    return resp.model_dump_json().encode() + b"\n"


def _ok(data: dict[str, Any] | None = None) -> bytes:
    return Response(ok=True, data=data or {}).model_dump_json().encode() + b"\n"


class _Refused(Exception):
    pass


class ControlServer(LineServer):
    channel = "control"

    def __init__(self, calls: ControlCalls, limits: ChannelLimits, max_line: int) -> None:
        super().__init__(limits, max_line, log)
        self.calls = calls

    def busy_line(self) -> bytes:
        return _error("busy", "too many connections; try again")

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = writer.get_extra_info("peername")
        d = self.calls
        try:
            await self._hello(reader, writer, peer)
            while True:
                line = await read_line(reader, self.max_line)
                if line is None:
                    break
                reply = await self._dispatch(line)
                d.persist()  # saved before it is acknowledged
                writer.write(reply)
                await writer.drain()
                if d.stopped:
                    break
        except _Refused:
            pass
        except ProtocolError as exc:
            self.refused(peer, f"{exc.code}: {exc}")
            try:
                writer.write(_error(exc.code, str(exc)))
                await asyncio.wait_for(writer.drain(), 1.0)
                # Read what the client is still sending (a 10 MB line, say) before closing: a
                # close with unread data resets the connection, and the client would see
                # "connection reset" instead of this error.
                await asyncio.wait_for(_discard_line(reader), 5.0)
            except (ConnectionError, TimeoutError):
                pass
        except (ConnectionError, asyncio.CancelledError):
            pass
        finally:
            await _close(writer)

    async def _hello(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, peer: object) -> None:
        try:
            line = await asyncio.wait_for(read_line(reader, self.max_line), self.limits.hello_timeout)
        except TimeoutError:
            self.refused(peer, "no hello in time")
            writer.write(_error("timeout", "no hello received in time"))
            raise _Refused from None
        if line is None:
            self.refused(peer, "closed before its hello")
            raise _Refused
        try:
            hello = Hello.model_validate_json(line)
        except ValidationError:
            self.refused(peer, "first line is not a valid hello (no secret)")
            writer.write(_error("bad_request", "the first message must be a hello with version and secret"))
            raise _Refused from None
        if hello.version != PROTOCOL_VERSION:
            self.refused(peer, f"protocol version {hello.version}")
            writer.write(
                _error("version_mismatch", f"daemon speaks protocol {PROTOCOL_VERSION}, client {hello.version}")
            )
            raise _Refused
        if not hmac.compare_digest(hello.secret.encode(), self.calls.secret.encode()):
            self.refused(peer, f"wrong secret (client {hello.client[:64]!r})")
            writer.write(_error("auth_failed", "wrong secret"))
            raise _Refused
        self.proven(writer)
        writer.write(_ok({"protocol": PROTOCOL_VERSION, "version": __version__, "pid": os.getpid()}))
        await writer.drain()

    async def _dispatch(self, line: bytes) -> bytes:
        try:
            req = REQUEST_ADAPTER.validate_json(line)
        except ValidationError as exc:
            return _bad_request(line, exc)
        try:
            return await self._serve(req)
        except UnknownJob as exc:
            return _error(exc.code, str(exc))
        except ElasticError as exc:
            details = getattr(exc, "problems", None)
            return _error(exc.code, str(exc), details)
        except Exception:
            log.exception("control: internal error serving %s", type(req).__name__)
            return _error("internal", "internal error; see the daemon log")

    async def _serve(self, req: object) -> bytes:
        d = self.calls
        if isinstance(req, Submit):
            if d.stopping:
                return _error("stopping", "the daemon is stopping")
            if problems := env_problems(req.spec):
                return _error("invalid_job", "invalid job description", problems)
            wd = req.spec.working_dir
            if wd is not None and not os.path.isabs(wd):
                # The daemon does not know the submitter's directory: clients resolve it.
                return _error("bad_request", f"working_dir {wd!r} is relative: send an absolute path "
                              "(esubmit resolves it against the job file's folder)")
            return _ok({"job_id": d.submit(req.spec)})
        if isinstance(req, Cancel):
            results: dict[str, str | None] = {}
            ended: list[int] = []  # had ended before: nothing of them was left to cancel
            unsaved: dict[str, str] = {}  # carried out, not saved (a full disk): what that means
            for jid in req.job_ids:
                try:
                    if d.job(jid).state.is_final:
                        ended.append(jid)
                    results[str(jid)], why = d.cancel(jid)
                    if why is not None:
                        unsaved[str(jid)] = why
                except UnknownJob:
                    results[str(jid)] = None
            missing = [j for j, s in results.items() if s is None]
            if missing:
                return _error("unknown_job", f"no such job: {', '.join(missing)}",
                              [f"{j}: {s}" for j, s in results.items() if s is not None])
            return _ok({"states": results, "already_ended": ended, "not_saved": unsaved})
        if isinstance(req, Queue):
            return _ok(d.queue(req).model_dump())
        if isinstance(req, Status):
            return _ok(d.status().model_dump())
        if isinstance(req, Wait):
            for jid in req.job_ids or []:
                d.job(jid)  # raises UnknownJob before we wait on it
            done = await d.wait_jobs(req.job_ids, req.timeout)
            return _ok({"done": done})
        if isinstance(req, Resize):
            d.resize(req.job_id, req.nodes, req.hold)
            return _ok({"job_id": req.job_id, "nodes": req.nodes, "held": req.hold})
        if isinstance(req, ReleaseHold):
            d.release_hold(req.job_id)
            return _ok({"job_id": req.job_id})
        if isinstance(req, Stop):
            # The queue is cancelled too: said, so that a user does not expect those jobs at
            # the next start (a cancel the stop could not save is not among them).
            pending = d.pending_ids()
            ended = await d.stop()
            cancelled = [j for j in pending if d.job(j).state is JobState.CANCELLED]
            notes = d.stop_notes()
            return _ok({"ended_jobs": ended, "cancelled_pending": cancelled, "not_ended": notes.not_ended,
                        "not_saved": notes.not_saved, "not_reached": notes.not_reached})
        if isinstance(req, Hello):
            return _error("bad_request", "hello was already received on this connection")
        return _error("bad_request", f"unsupported request {type(req).__name__}")


def _bad_request(line: bytes, exc: ValidationError) -> bytes:
    try:
        op = json.loads(line).get("op")
    except (ValueError, AttributeError, RecursionError):
        # RecursionError: nesting deeper than the parser's stack, which pydantic refused too.
        return _error("bad_request", "not a JSON object")
    if op == "submit":
        details = format_validation_errors(exc.errors(), drop_prefix=("submit", "spec"))
        return _error("invalid_job", "invalid job description", details)
    details = format_validation_errors(exc.errors(), drop_prefix=(str(op),))
    return _error("bad_request", f"invalid request {str(op)[:40]!r}", details)


async def _close(writer: asyncio.StreamWriter) -> None:
    try:
        writer.close()
        await writer.wait_closed()
    except (ConnectionError, OSError):
        pass


async def _discard_line(reader: asyncio.StreamReader, most: int = 64 << 20) -> None:
    """Read and drop input up to the end of the current line (or of the stream)."""
    while most > 0:
        chunk = await reader.read(65536)
        if not chunk or b"\n" in chunk:
            return
        most -= len(chunk)
