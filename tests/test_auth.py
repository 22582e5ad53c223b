"""Authentication and authorization on both channels, over real sockets to a real daemon.

The control channel takes only the daemon's secret; the application channel takes only the
secret of the job a connection claims to be, and what that connection says can only ever
touch that job. Every refusal is a typed error line, is logged with the peer's address, and
leaves the daemon with every job it had.
"""

from __future__ import annotations

import json
import re
import socket
from pathlib import Path

import pytest

from conftest import RunningDaemon, wait_until, write_job
from elastic_protocol.control import Cancel, Hello, Queue, Resize
from elastic_protocol.framing import LineSocket
from elastic_protocol.version import (
    MAX_APP_LINE_BYTES,
    MAX_LINE_BYTES,
    PROTOCOL_VERSION,
)

pytestmark = pytest.mark.timeout(60)


def secret_job(d: RunningDaemon, folder: Path, nodes: str = "1", kind: str = "rigid") -> tuple[int, str, list[str]]:
    """A sleeping job that writes the secret it was given; (id, secret, hosts) once running."""
    folder.mkdir(parents=True, exist_ok=True)
    path = write_job(folder, "job", f'''
        name = "sleeper"
        command = ["sh", "-c", "printf %s \\"$ELASTIC_JOB_SECRET\\" > s.$ELASTIC_NODE_INDEX && mv s.$ELASTIC_NODE_INDEX secret; exec sleep 300"]
        nodes = {nodes}
        kind = "{kind}"
        working_dir = "."
    ''')
    r = d.cli("esubmit", "--parsable", str(path))
    assert r.returncode == 0, r.stderr
    job_id = int(r.stdout)
    assert wait_until((folder / "secret").exists, 30), "the job never started"
    info = d.job(job_id)
    return job_id, (folder / "secret").read_text(), info["hosts"]


def control_socket(d: RunningDaemon) -> LineSocket:
    return LineSocket(socket.create_connection((d.record.control_host, d.record.control_port), timeout=10),
                      MAX_LINE_BYTES)


def app_socket(d: RunningDaemon) -> LineSocket:
    return LineSocket(socket.create_connection((d.record.app_host, d.record.app_port), timeout=10),
                      MAX_APP_LINE_BYTES)


def app_as(d: RunningDaemon, job_id: int, secret: str) -> LineSocket:
    io = app_socket(d)
    assert ask(io, f"hello {PROTOCOL_VERSION} {job_id} {secret}") == "ok hello 1"
    return io


def ask(io: LineSocket, line: str) -> str:
    io.send_line(line.encode())
    reply = io.read_line()
    assert reply is not None, f"connection closed after {line!r}"
    return reply.decode()


def control_refused(d: RunningDaemon, first_line: bytes) -> dict:
    """Send one first line; the daemon must answer with an error and close."""
    io = control_socket(d)
    io.send_line(first_line)
    reply = json.loads(io.read_line())
    assert io.read_line() is None, "the connection stayed open after a refused hello"
    port = io.sock.getsockname()[1]
    io.close()
    assert reply["ok"] is False
    assert "Traceback" not in json.dumps(reply)
    reply["port"] = port
    return reply["error"] | {"port": port}


def logged_refusal(d: RunningDaemon, channel: str, port: int, text: str) -> bool:
    """The refusal is in the daemon's log with the peer's address and port."""
    pattern = re.compile(rf"{channel}: refused 127\.0\.0\.1:{port}: .*{re.escape(text)}")
    return wait_until(lambda: pattern.search((d.state_dir / "daemon.log").read_text()) is not None, 30)


def assert_running(d: RunningDaemon, *job_ids: int) -> None:
    jobs = d.jobs(*job_ids)
    assert all(jobs[j]["state"] == "RUNNING" for j in job_ids), {j: jobs[j]["state"] for j in job_ids}


# ---- the control channel ------------------------------------------------------------------
def test_control_hello_without_a_secret_is_refused_and_logged_with_its_source(daemon: RunningDaemon, tmp_path: Path) -> None:
    job, _, _ = secret_job(daemon, tmp_path / "a")
    err = control_refused(daemon, json.dumps({"op": "hello", "version": PROTOCOL_VERSION}).encode())
    assert err["code"] == "bad_request" and "secret" in err["message"]
    assert logged_refusal(daemon, "control", err["port"], "no secret")
    err = control_refused(daemon, Queue().model_dump_json().encode())
    assert err["code"] == "bad_request"
    assert logged_refusal(daemon, "control", err["port"], "no secret")
    assert_running(daemon, job)


def test_control_channel_refuses_a_wrong_secret_and_a_jobs_own_secret(daemon: RunningDaemon, tmp_path: Path) -> None:
    job, job_secret, _ = secret_job(daemon, tmp_path / "a")
    for secret in ("0" * 64, "", job_secret, daemon.record.secret[:-1]):
        err = control_refused(daemon, Hello(version=PROTOCOL_VERSION, secret=secret, client="intruder")
                              .model_dump_json().encode())
        assert err["code"] == "auth_failed", secret
        assert logged_refusal(daemon, "control", err["port"], "wrong secret")
    assert_running(daemon, job)


def test_tools_refuse_a_secret_file_that_others_can_read(daemon: RunningDaemon) -> None:
    record = daemon.state_dir / "daemon.json"
    for mode in (0o644, 0o640, 0o604):
        record.chmod(mode)
        r = daemon.cli("equeue")
        assert r.returncode == 1
        assert "readable by others" in r.stderr and f"chmod 600 {record}" in r.stderr, r.stderr
        assert "Traceback" not in r.stderr
    record.chmod(0o600)
    assert daemon.cli("equeue").returncode == 0


# ---- the application channel --------------------------------------------------------------
def test_app_hello_without_a_secret_or_not_first_is_refused_and_logged(daemon: RunningDaemon, tmp_path: Path) -> None:
    job, _, _ = secret_job(daemon, tmp_path / "a")
    for first in (f"hello {PROTOCOL_VERSION} {job}", "register", f"ping {job}"):
        io = app_socket(daemon)
        port = io.sock.getsockname()[1]
        assert ask(io, first).startswith("error bad_request")
        assert io.read_line() is None
        io.close()
        assert logged_refusal(daemon, "app", port, "hello VERSION JOB_ID SECRET")
    assert_running(daemon, job)


def test_app_channel_refuses_another_jobs_secret_the_daemon_secret_and_a_wrong_one(
    daemon: RunningDaemon, tmp_path: Path
) -> None:
    a, a_secret, _ = secret_job(daemon, tmp_path / "a")
    b, b_secret, _ = secret_job(daemon, tmp_path / "b")
    claims = [(a, b_secret), (b, a_secret), (a, daemon.record.secret), (a, "0" * 32), (a, a_secret[:-1]),
              (999, a_secret), ("1" * 5000, a_secret)]
    for job, secret in claims:
        io = app_socket(daemon)
        port = io.sock.getsockname()[1]
        assert ask(io, f"hello {PROTOCOL_VERSION} {job} {secret}").startswith("error auth_failed"), (job, secret)
        assert io.read_line() is None
        io.close()
        assert logged_refusal(daemon, "app", port, "wrong secret or job not running")
    assert_running(daemon, a, b)


def test_a_job_can_act_only_on_itself_whatever_ids_or_hosts_it_names(daemon: RunningDaemon, tmp_path: Path) -> None:
    """Job A, authenticated, tries every verb on job B's order, hosts and values."""
    a, a_secret, a_hosts = secret_job(daemon, tmp_path / "a", "{ min = 1, max = 2 }", "evolving")
    b, b_secret, b_hosts = secret_job(daemon, tmp_path / "b", "{ min = 1, max = 2 }", "malleable")
    assert len(b_hosts) == 2, b_hosts
    a_io, b_io = app_as(daemon, a, a_secret), app_as(daemon, b, b_secret)
    assert ask(a_io, "register") == "ok register"
    assert ask(b_io, "register") == "ok register"
    assert ask(b_io, "put leader b-address") == "ok put leader"
    with daemon.client() as c:
        c.request(Resize(job_id=b, nodes=1))
    order = b_io.read_line().decode()
    assert order.startswith("shrink 1 order="), order
    order_id = re.search(r"order=(\d+)", order).group(1)

    foreign = b_hosts[-1]
    attempts = {
        f"shrunk {foreign} order={order_id}": "error unknown_order",
        f"grown {' '.join(b_hosts)} order={order_id}": "error unknown_order",
        f"refuse order={order_id}": "error unknown_order",
        f"defer 60 order={order_id}": "error unknown_order",
        f"shrunk {foreign} order={order_id} job={b}": "error unknown_order",
        f"release {foreign}": "error bad_hosts",
        f"release {foreign} job={b}": "error bad_hosts",
        f"release {' '.join(b_hosts)}": "error bad_hosts",
        f"hello {PROTOCOL_VERSION} {b} {b_secret}": "error bad_request",
        "get leader": "error not_found",
        "put leader a-address": "ok put leader",
    }
    for line, expected in attempts.items():
        assert ask(a_io, line).startswith(expected), line
    # A's connection is still A's, B's value and order are untouched.
    assert ask(a_io, "get leader") == "ok get leader a-address"
    assert ask(b_io, "get leader") == "ok get leader b-address"
    assert daemon.job(b)["state"] == "RESIZING"
    assert ask(b_io, f"shrunk {foreign} order={order_id}") == f"ok shrunk order={order_id}"
    info = daemon.wait_event(b, "shrunk")
    assert info["hosts"] == b_hosts[:1]
    a_info = daemon.job(a)
    assert a_info["state"] == "RUNNING" and a_info["hosts"] == a_hosts
    assert not {"shrunk", "released", "grown", "refused", "deferred"} & {e["event"] for e in a_info["events"]}
    a_io.close()
    b_io.close()


def test_an_ended_jobs_connection_authenticates_nothing_more(daemon: RunningDaemon, tmp_path: Path) -> None:
    a, a_secret, _ = secret_job(daemon, tmp_path / "a")
    io = app_as(daemon, a, a_secret)
    with daemon.client() as c:
        c.request(Cancel(job_ids=[a]))
    daemon.wait([a])
    assert ask(io, "put k v").startswith("error job_ended")
    assert io.read_line() is None
    io.close()
    io = app_socket(daemon)
    assert ask(io, f"hello {PROTOCOL_VERSION} {a} {a_secret}").startswith("error auth_failed")
    io.close()
