"""A blocking control-channel client: what the command-line tools (and scripts) use."""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any, Self

from pydantic import BaseModel, ValidationError

from elastic_protocol.control import Hello, Response
from elastic_protocol.errors import ProtocolError
from elastic_protocol.framing import LineSocket
from elastic_protocol.version import MAX_JOB_FILE_BYTES, MAX_LINE_BYTES, MAX_REPLY_BYTES, PROTOCOL_VERSION
from elasticd.errors import DaemonError, DaemonNotRunning
from elasticd.statedir import DaemonRecord, default_state_dir, running_daemon


class ControlClient:
    def __init__(self, record: DaemonRecord, client_name: str = "elastic-client", timeout: float = 30.0) -> None:
        self.record = record
        try:
            sock = socket.create_connection((record.control_host, record.control_port), timeout=timeout)
        except OSError as exc:
            raise DaemonNotRunning(
                f"the daemon (pid {record.pid}) does not answer at {record.control_address}: {exc.strerror or exc}"
            ) from None
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._io = LineSocket(sock, MAX_REPLY_BYTES)
        self.server_info = self.request(Hello(version=PROTOCOL_VERSION, secret=record.secret, client=client_name))

    @classmethod
    def connect(cls, state_dir: Path | None = None, client_name: str = "elastic-client") -> ControlClient:
        return cls(running_daemon(state_dir or default_state_dir()), client_name)

    def request(self, req: BaseModel, timeout: float | None = 30.0) -> dict[str, Any]:
        """Send one request; return its data or raise DaemonError with the daemon's words."""
        self._io.sock.settimeout(timeout)
        data = req.model_dump_json(exclude_none=False).encode()
        if len(data) > MAX_LINE_BYTES:
            raise DaemonError("line_too_long", f"the request is {len(data)} bytes, more than the {MAX_LINE_BYTES} a "
                              "daemon takes in one line (a job file must stay under "
                              f"{MAX_JOB_FILE_BYTES // 1024} KiB); nothing was sent")
        try:
            self._io.send_line(data)
            line = self._io.read_line()
        except ProtocolError as exc:
            raise DaemonError(exc.code, f"unreadable reply from the daemon: {exc}") from None
        except TimeoutError:
            # Sent, unanswered: a paused daemon (SIGSTOP, a debugger, a hung disk) carries the
            # request out when it resumes, so "failed" would invite a second submission.
            raise DaemonError("timeout", f"the daemon (pid {self.record.pid}) did not answer within {timeout:g} s: "
                              "it may be paused (SIGSTOP, a debugger) or stuck on its disk; the request was "
                              "sent and may still be carried out when it resumes (check with equeue before "
                              "sending it again)") from None
        except OSError as exc:
            raise DaemonError("disconnected", f"connection to the daemon failed: {exc}") from None
        if line is None:
            raise DaemonError("disconnected", "the daemon closed the connection")
        try:
            resp = Response.model_validate_json(line)
        except ValidationError:
            raise DaemonError("bad_response", "the daemon sent an unreadable reply") from None
        if not resp.ok:
            err = resp.error
            assert err is not None
            raise DaemonError(err.code, err.message, err.details)
        return resp.data

    def close(self) -> None:
        self._io.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
