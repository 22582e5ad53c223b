"""Framing at its edges, as PROTOCOL.md states it for both channels: a trailing `\\r` is no
part of a line (a line of exactly the limit ended by `\\r\\n` is taken), and a first line
on the application channel that is not a 3-argument hello -- empty, not ASCII, control
characters -- is `bad_request`. Found by a client written from the spec alone: such lines
got `line_too_long` and `malformed`. Real daemon, raw loopback sockets."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest

from conftest import RunningDaemon, wait_until, write_job
from elastic_protocol.control import Hello
from elastic_protocol.framing import LineSocket
from elastic_protocol.version import MAX_APP_LINE_BYTES, MAX_LINE_BYTES, PROTOCOL_VERSION

pytestmark = pytest.mark.timeout(60)


def _waiting_job(d: RunningDaemon, folder: Path) -> tuple[int, str]:
    jid = d.submit(write_job(folder, "w", """
        name = "w"
        command = ["sh", "-c", "echo $ELASTIC_JOB_SECRET > secret; sleep 60"]
        nodes = 1
        working_dir = "."
        time_limit = "2"
    """))
    secret = folder / "secret"
    assert wait_until(lambda: secret.exists() and secret.read_text().strip() != "", 10)
    return jid, secret.read_text().strip()


def _raw(host: str, port: int) -> socket.socket:
    s = socket.create_connection((host, port), timeout=10)
    return s


def _reply(s: socket.socket) -> bytes | None:
    return LineSocket(s, 1 << 20).read_line()


def test_an_application_line_of_exactly_the_limit_ended_by_crlf_is_taken(daemon: RunningDaemon, workdir: Path) -> None:
    jid, secret = _waiting_job(daemon, workdir)
    s = _raw(daemon.record.app_host, daemon.record.app_port)
    io = LineSocket(s, 1 << 20)
    try:
        io.send_line(f"hello {PROTOCOL_VERSION} {jid} {secret}".encode())
        assert io.read_line() == b"ok hello 1"
        head = b"put k "
        line = head + b"v" * (MAX_APP_LINE_BYTES - len(head))
        s.sendall(line + b"\r\n")
        assert io.read_line() == b"ok put k"
        s.sendall(line + b"v\r\n")  # one byte more is too long, `\r` or not
        assert io.read_line() == b"error line_too_long line longer than 8192 bytes"
        assert io.read_line() is None
    finally:
        io.close()
    daemon.cli("ecancel", str(jid))


def test_a_control_request_of_exactly_the_limit_ended_by_crlf_is_taken(daemon: RunningDaemon) -> None:
    s = _raw(daemon.record.control_host, daemon.record.control_port)
    io = LineSocket(s, 1 << 20)
    try:
        io.send_line(Hello(version=PROTOCOL_VERSION, secret=daemon.record.secret, client="edge").model_dump_json().encode())
        assert json.loads(io.read_line() or b"{}")["ok"]
        head = b'{"op": "queue", "all": false, "job_ids": null}'
        line = head + b" " * (MAX_LINE_BYTES - len(head))
        s.sendall(line + b"\r\n")
        assert json.loads(io.read_line() or b"{}")["ok"]
    finally:
        io.close()


@pytest.mark.parametrize("first", [b"", b" ", b"\xffhello", b"hello\x01 1 2 3", b"HELLO 1 1 x"],
                         ids=["empty", "blank", "not-ascii", "control-character", "upper-case"])
def test_any_first_application_line_that_is_not_a_hello_is_bad_request(daemon: RunningDaemon, first: bytes) -> None:
    s = _raw(daemon.record.app_host, daemon.record.app_port)
    io = LineSocket(s, 1 << 20)
    try:
        s.sendall(first + b"\n")
        reply = io.read_line()
        assert reply is not None and reply.startswith(b"error bad_request first line must be: hello "), reply
        assert io.read_line() is None
    finally:
        io.close()
    assert daemon.cli("elasticd", "status").returncode == 0
