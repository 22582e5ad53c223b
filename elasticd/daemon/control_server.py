"""The control channel server: authenticated JSON-line requests from the command-line tools.

A bad request gets a typed error line and the connection stays usable; only a broken frame
(over-long line, half a line) or a failed hello closes it. Nothing on the wire is ever a
traceback: unexpected failures are logged here and answered with code `internal`.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
import os
from collections import Counter
from typing import TYPE_CHECKING, Any

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
from elastic_protocol.jobspec import env_problems, format_validation_errors
from elastic_protocol.version import PROTOCOL_VERSION
from elasticd import __version__
from elasticd.core.states import JobState
from elasticd.daemon.line_server import LineServer
from elasticd.daemon.views import job_info, job_note, node_infos
from elasticd.errors import ElasticError, UnknownJob

if TYPE_CHECKING:  # the daemon hands itself over; only its type is named here
    from elasticd.daemon.service import Daemon

log = logging.getLogger("elasticd.control")


def _error(code: str, message: str, details: list[str] | None = None) -> bytes:
    resp = Response(ok=False, error=ErrorBody(code=code, message=message, details=details or []))
    return resp.model_dump_json().encode() + b"\n"


def _ok(data: dict[str, Any] | None = None) -> bytes:
    return Response(ok=True, data=data or {}).model_dump_json().encode() + b"\n"


class _Refused(Exception):
    pass


class ControlServer(LineServer):
    channel = "control"

    def __init__(self, daemon: Daemon) -> None:
        super().__init__(daemon, daemon.config.max_line_bytes, log)

    def busy_line(self) -> bytes:
        return _error("busy", "too many connections; try again")

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = writer.get_extra_info("peername")
        d = self.daemon
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
                if d._stopped.is_set():
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
            line = await asyncio.wait_for(read_line(reader, self.max_line), self.daemon.config.hello_timeout)
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
        if not hmac.compare_digest(hello.secret.encode(), self.daemon.secret.encode()):
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
        d = self.daemon
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
                    if d.core.job(jid).state.is_final:
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
            return _ok(self._queue(req).model_dump())
        if isinstance(req, Status):
            return _ok(self._status().model_dump())
        if isinstance(req, Wait):
            for jid in req.job_ids or []:
                d.core.job(jid)  # raises UnknownJob before we wait on it
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
            pending = d.core.pending_ids
            ended = await d.stop()
            cancelled = [j for j in pending if d.core.job(j).state is JobState.CANCELLED]
            return _ok({"ended_jobs": ended, "cancelled_pending": cancelled, "not_ended": d.stop_not_ended,
                        "not_saved": d.stop_unsaved, "not_reached": d.stop_unreached})
        if isinstance(req, Hello):
            return _error("bad_request", "hello was already received on this connection")
        return _error("bad_request", f"unsupported request {type(req).__name__}")

    def _queue(self, req: Queue) -> QueueDocument:
        d = self.daemon
        now = d.now()
        if req.job_ids is not None:
            jobs = [d.core.job(j) for j in req.job_ids]
        else:
            jobs = [j for j in d.core.jobs.values() if req.all or not j.state.is_final]
        pending = d.core.pending_ids
        # The first that waits for nodes: one the cluster is too small for waits for no turn.
        head = next((j for j in pending if j not in d.core.cannot_start), None)
        blocked = bool(pending) and d.storage_problem() is not None
        cut_off = set(d.cut_off())
        return QueueDocument(generated_at=now,
                             jobs=[job_info(j, now, job_note(j, now, j.job_id == head, blocked, j.job_id in d.joining,
                                                             j.job_id in cut_off))
                                   for j in jobs])

    def _status(self) -> StatusInfo:
        d = self.daemon
        counts = Counter(j.state.value for j in d.core.jobs.values())
        return StatusInfo(
            version=__version__,
            protocol=PROTOCOL_VERSION,
            pid=os.getpid(),
            mode=d.config.mode,
            policy=d.core.policy.name,
            policy_params={k: (v if isinstance(v, (int, float, str, bool)) else str(v)) for k, v in d.policy_settings.items()},
            started_at=d.started_at,
            control_address=d.control_address,
            app_address=d.app_address,
            nodes=node_infos(d.core.nodes),
            jobs_by_state=dict(counts),
            journal=None if d.journal is None else str(d.journal.path),
            recovered_jobs=d.recovered_jobs,
            salvaged=d.salvaged,
            storage=d.storage_problem(),
            applications=d.app_channel_problem(),
            allocation=None if d.allocation is None else d.allocation.status(),
            metrics=d.metrics_url,
        )


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
