"""Framing at its edges, as PROTOCOL.md states it for both channels: a trailing `\\r` is no
part of a line (a line of exactly the limit ended by `\\r\\n` is taken), a first line on
the application channel that is not a 3-argument hello -- empty, not ASCII, control
characters -- is `bad_request`, and times are plain decimal numbers of seconds. Found by a
client written from the spec alone: such lines got `line_too_long` and `malformed`, and a
deadline of a million seconds was sent as `deadline=1e+06`. Real daemon, raw loopback
sockets."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest

from conftest import RunningDaemon, start_daemon, stop_daemon, wait_until, write_job
from elastic_protocol.control import Hello
from elastic_protocol.framing import LineSocket
from elastic_protocol.version import MAX_APP_LINE_BYTES, MAX_LINE_BYTES, PROTOCOL_VERSION

pytestmark = pytest.mark.timeout(60)


def _waiting_job(d: RunningDaemon, folder: Path, nodes: str = "1", kind: str = "rigid") -> tuple[int, str]:
    jid = d.submit(write_job(folder, "w", f"""
        name = "w"
        command = ["sh", "-c", "[ $ELASTIC_NODE_INDEX = 0 ] && echo $ELASTIC_JOB_SECRET > secret; sleep 60"]
        nodes = {nodes}
        kind = "{kind}"
        working_dir = "."
        time_limit = "2"
    """))
    secret = folder / "secret"
    assert wait_until(lambda: secret.exists() and secret.read_text().strip() != "", 30)
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


@pytest.mark.parametrize("deadline", ["1000000", "2.5"])
def test_an_orders_deadline_is_a_plain_decimal_number_of_seconds(tmp_path: Path, deadline: str) -> None:
    work = tmp_path / "w"
    work.mkdir()
    d = start_daemon(tmp_path / "state", extra=["--order-deadline", deadline])
    try:
        jid, secret = _waiting_job(d, work, "{ min = 1, max = 4 }", "malleable")
        io = LineSocket(_raw(d.record.app_host, d.record.app_port), 1 << 20)
        try:
            for line, reply in ((f"hello {PROTOCOL_VERSION} {jid} {secret}", b"ok hello 1"), ("register", b"ok register")):
                io.send_line(line.encode())
                assert io.read_line() == reply
            assert d.cli("elasticd", "resize", "--no-wait", str(jid), "3").returncode == 0
            order = (io.read_line() or b"").decode()
            assert order.startswith("shrink 1 order=") and order.endswith(f" deadline={deadline}"), order
        finally:
            io.close()
    finally:
        stop_daemon(d.record)
