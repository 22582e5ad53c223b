"""The client library across a daemon that dies around the very first hello, or refuses a
reconnection's resume.

A scripted peer on a real loopback socket stands in for the daemon: it drops the first
connection without answering (the daemon was killed), then, like a restarted daemon on the
same port, takes a new connection. Found in the 50-job SIGKILL test: the library said hello
twice on the new connection, which the daemon refuses as a second hello -- the job failed.
"""

from __future__ import annotations

import socket
import threading

import pytest

from elastic_apps.channel import JobChannel
from elastic_apps.env import JobEnv
from elastic_apps.handler import MalleableHandler

pytestmark = pytest.mark.timeout(30)


def _lines(conn: socket.socket, n: int) -> list[str]:
    buf = b""
    while buf.count(b"\n") < n:
        chunk = conn.recv(4096)
        if not chunk:
            break
        buf += chunk
    return buf.decode().splitlines()


def _first_connection_dropped(read_first: bool) -> list[str]:
    """A peer that drops the first connection (after reading its hello, or at once, before
    the library has said anything), then, as a restarted daemon on the same port, serves a
    new one: every line the library sends there, up to and with a ping."""
    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]
    second: list[str] = []

    def daemon() -> None:
        first, _ = server.accept()
        if read_first:
            assert _lines(first, 1)[0].startswith("hello ")
        first.close()  # killed before it answered
        conn, _ = server.accept()
        with conn:
            conn.settimeout(5)
            while not second or second[-1] != "ping":
                line = _lines(conn, 1)[0]
                second.append(line)
                conn.sendall(b"pong\n" if line == "ping" else f"ok {line.split()[0]}{' 1' if line.startswith('hello') else ''}\n".encode())

    peer = threading.Thread(target=daemon, daemon=True)
    peer.start()
    env = JobEnv(job_id=7, name="j", hosts=("n1",), host="n1", index=0, app_address=("127.0.0.1", port),
                 secret="s3cret", joining=False, hostfile=None)
    ch = JobChannel(env, timeout=5.0)
    try:
        ch.open()
        ch.ping()
        peer.join(10)
        assert not peer.is_alive()
    finally:
        ch.close()
        server.close()
    return second


def test_a_hello_cut_off_by_a_daemon_crash_is_said_once_on_the_new_connection() -> None:
    assert _first_connection_dropped(read_first=True) == ["hello 1 7 s3cret", "ping"]


def test_a_connection_dropped_before_the_first_hello_gets_one_hello_on_the_next() -> None:
    """Found with the 50-job SIGKILL test under load: the reader thread saw the first
    connection drop, reconnected and said hello (and resume) itself, and the hello of open()
    then went to the new connection as a second one -- `bad_request`, and the job failed. The
    hello is now said before the reader starts, once per connection."""
    assert _first_connection_dropped(read_first=False) == ["hello 1 7 s3cret", "ping"]


def test_a_resume_the_daemon_refuses_does_not_end_the_reconnection() -> None:
    """`resume` only says what the application believes: a daemon that does not take it
    (bad_hosts: it took hosts while the connection was down) leaves the connection hello'd
    and registered, and its `hosts` line sets the library's view. The library used to give
    the channel up for good."""
    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]
    after: list[str] = []

    def daemon() -> None:
        first, _ = server.accept()
        with first:
            first.settimeout(5)
            for want in ("hello", "register"):
                assert _lines(first, 1)[0].split()[0] == want
                first.sendall(f"ok {want}{' 1' if want == 'hello' else ''}\n".encode())
        conn, _ = server.accept()  # the connection dropped; the library reconnects
        with conn:
            conn.settimeout(5)
            for want in ("hello", "register", "resume"):
                line = _lines(conn, 1)[0]
                after.append(line)
                assert line.split()[0] == want
                if want == "register":
                    conn.sendall(b"hosts n1 reason=deadline\n")
                reply = {"hello": "ok hello 1", "register": "ok register",
                         "resume": "error bad_hosts resume: not hosts of job 7: n2"}[want]
                conn.sendall(f"{reply}\n".encode())
            line = _lines(conn, 1)[0]  # the next request still goes here
            after.append(line)
            conn.sendall(b"pong\n")

    peer = threading.Thread(target=daemon, daemon=True)
    peer.start()
    env = JobEnv(job_id=7, name="j", hosts=("n1", "n2"), host="n1", index=0, app_address=("127.0.0.1", port),
                 secret="s3cret", joining=False, hostfile=None)
    ch = JobChannel(env, timeout=5.0)
    try:
        ch.open()
        ch.register(_Handler())
        assert _wait(lambda: ch.reconnects == 1)
        ch.ping()
        peer.join(10)
        assert not peer.is_alive()
        assert after == ["hello 1 7 s3cret", "register", "resume n1 n2", "ping"]
        assert _wait(lambda: ch.hosts == ["n1"])
    finally:
        ch.close()
        server.close()


class _Handler(MalleableHandler):
    def on_hosts_changed(self, hosts: list[str], lost_hosts: list[str], reason: str) -> None:
        pass


def _wait(pred, timeout: float = 10.0) -> bool:  # type: ignore[no-untyped-def]
    import time

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(0.02)
    return bool(pred())
