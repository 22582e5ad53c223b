"""The daemon's limits (elasticd start --max-*) are enforced and refuse politely: a typed
error line, a log entry with the source, and the daemon goes on serving everyone else."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from conftest import RunningDaemon, start_daemon, stop_daemon, wait_until, write_job
from elastic_protocol.control import Hello, Status
from elastic_protocol.framing import LineSocket
from elastic_protocol.version import PROTOCOL_VERSION
from elasticd.errors import DaemonError

pytestmark = pytest.mark.timeout(60)

LIMITS = ["--max-connections", "8", "--max-unauthenticated", "4", "--hello-timeout", "1",
          "--max-line-bytes", "2048", "--max-app-line-bytes", "512", "--max-queued-jobs", "2"]


@pytest.fixture(scope="module")
def small(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningDaemon]:
    d = start_daemon(tmp_path_factory.mktemp("limits") / "state", nodes=1, extra=LIMITS)
    try:
        yield d
    finally:
        stop_daemon(d.record)


def connect(d: RunningDaemon, channel: str) -> LineSocket:
    host, port = (d.record.control_host, d.record.control_port) if channel == "control" else \
        (d.record.app_host, d.record.app_port)
    return LineSocket(socket.create_connection((host, port), timeout=10), 1 << 20)


def log_text(d: RunningDaemon) -> str:
    return (d.state_dir / "daemon.log").read_text()


def test_a_channel_past_its_connection_limit_answers_busy_and_the_other_channel_still_serves(small: RunningDaemon) -> None:
    held = [small.client() for _ in range(8)]
    try:
        io = connect(small, "control")
        reply = json.loads(io.read_line())
        assert reply["error"]["code"] == "busy"
        assert io.read_line() is None
        io.close()
        app = connect(small, "app")
        app.send_line(b"ping")
        assert app.read_line().startswith(b"error bad_request")
        app.close()
    finally:
        for c in held:
            c.close()
    # Served again once the daemon has seen the held connections close (a loaded machine
    # takes its time to, and a tool until then is told `busy`).
    def served() -> bool:
        try:
            with small.client() as c:
                return bool(c.request(Status())["pid"] == small.record.pid)
        except DaemonError:
            return False

    assert wait_until(served, 30)
    assert "too many connections (limit 8)" in log_text(small)


def test_connections_that_say_nothing_cannot_lock_a_tool_out(small: RunningDaemon) -> None:
    """8 idle connections fill the channel; past their grace (half the 1 s hello timeout)
    the oldest is dropped for a tool, which is then served before the idle ones time out."""
    idle = [connect(small, "control") for _ in range(8)]
    try:
        time.sleep(0.6)
        t0 = time.monotonic()
        with small.client() as c:
            c.request(Status())
        assert time.monotonic() - t0 < 0.3, "the tool waited for idle connections to time out"
        assert idle[0].read_line() is None  # the oldest was dropped
        for io in idle[1:]:
            line = io.read_line()
            assert line is None or json.loads(line)["error"]["code"] == "timeout"
    finally:
        for io in idle:
            io.close()
    assert "dropped before its hello to make room" in log_text(small)


def test_a_burst_of_connections_saying_hello_at_once_is_not_taken_for_a_flood(small: RunningDaemon) -> None:
    """More simultaneous connections than the unauthenticated cap (4), each saying hello at once."""
    socks = [connect(small, "control") for _ in range(7)]
    hello = Hello(version=PROTOCOL_VERSION, secret=small.record.secret).model_dump_json().encode()
    for io in socks:
        io.send_line(hello)
    try:
        assert all(json.loads(io.read_line())["ok"] for io in socks)
    finally:
        for io in socks:
            io.close()


def test_half_a_hello_times_out_with_a_typed_error(small: RunningDaemon) -> None:
    for channel in ("control", "app"):
        io = connect(small, channel)
        io.sock.sendall(b"hel")
        t0 = time.monotonic()
        line = io.read_line()
        assert 0.5 < time.monotonic() - t0 < 5
        assert b"timeout" in line, line
        assert io.read_line() is None
        io.close()


def test_line_limits_are_the_configured_ones(small: RunningDaemon) -> None:
    io = connect(small, "control")
    io.send_line(Hello(version=PROTOCOL_VERSION, secret=small.record.secret).model_dump_json().encode())
    assert json.loads(io.read_line())["ok"]
    io.send_line(b'{"op":"status"' + b" " * 2100 + b"}")
    assert json.loads(io.read_line())["error"]["code"] == "line_too_long"
    io.close()
    app = connect(small, "app")
    app.send_line(b"hello " + b"1" * 600)
    assert app.read_line().startswith(b"error line_too_long")
    app.close()


def test_a_full_queue_refuses_a_submission_with_queue_full(small: RunningDaemon, tmp_path: Path) -> None:
    job = write_job(tmp_path, "s", f'name = "s"\ncommand = ["sleep", "300"]\nnodes = 1\nworking_dir = "{tmp_path}"')
    r = small.cli("esubmit", "--parsable", str(job), str(job), str(job))
    assert r.returncode == 0, r.stderr
    ids = [int(x) for x in r.stdout.split()]
    r = small.cli("esubmit", str(job))
    assert r.returncode == 1
    assert "[queue_full]" in r.stderr and "2 pending jobs" in r.stderr, r.stderr
    states = {j: info["state"] for j, info in small.jobs(*ids).items()}
    assert states == {ids[0]: "RUNNING", ids[1]: "PENDING", ids[2]: "PENDING"}
    r = small.cli("ecancel", *map(str, ids))
    assert r.returncode == 0, r.stderr


def test_a_jobs_value_store_past_its_limits_answers_busy_and_keeps_what_it_holds(
        daemon: RunningDaemon, tmp_path: Path) -> None:
    """PROTOCOL.md: at most 1,024 keys and 256 KiB of keys and values per job, `busy` past
    either; replacing a value stays possible."""
    work = tmp_path / "w"
    work.mkdir()
    jid = daemon.submit(write_job(work, "w", """
        name = "w"
        command = ["sh", "-c", "echo $ELASTIC_JOB_SECRET > secret; sleep 60"]
        nodes = 1
        working_dir = "."
        time_limit = "2"
    """))
    secret = work / "secret"
    assert wait_until(lambda: secret.exists() and secret.read_text().strip() != "", 30)
    io = connect(daemon, "app")
    try:
        def ask(line: str) -> str:
            io.send_line(line.encode())
            reply = io.read_line()
            assert reply is not None
            return reply.decode()

        assert ask(f"hello 1 {jid} {secret.read_text().strip()}") == "ok hello 1"
        big = "v" * 8000
        answers = [ask(f"put k{i} {big}") for i in range(33)]
        assert answers[:32] == [f"ok put k{i}" for i in range(32)]
        assert answers[32].startswith("error busy at most 262144 bytes of values per job"), answers[32]
        assert ask("put k0 small") == "ok put k0"  # replacing makes room
        for i in range(32):
            assert ask(f"put k{i} x") == f"ok put k{i}"
        answers = [ask(f"put n{i} x") for i in range(1024 - 32 + 1)]
        assert all(a.startswith("ok put ") for a in answers[:-1])
        assert answers[-1] == "error busy at most 1024 values per job"
        assert ask("get k5") == "ok get k5 x"
    finally:
        io.close()
    daemon.cli("ecancel", str(jid))
