"""The client library's `job.hosts` after a grow: the new hosts appear once the daemon has
taken the `grown` answer, not before it is sent.

Found following the README with an evolving job: the application waited for `job.hosts` to
hold its granted hosts and released one at once; the library had set the new list before
sending `grown`, so the `release` could reach the daemon first and was refused (`busy: job
25 has order 12 open; answer it first`), and the application died of DaemonRefused.

A scripted peer on a real loopback socket stands in for the daemon and holds its reply to
`grown` while the test looks at the library's view.
"""

from __future__ import annotations

import socket
import threading

import pytest

from elastic_apps.channel import JobChannel
from elastic_apps.env import JobEnv
from elastic_apps.handler import MalleableHandler

pytestmark = pytest.mark.timeout(30)


def _line(conn: socket.socket, buf: bytearray) -> str:
    while b"\n" not in buf:
        chunk = conn.recv(4096)
        if not chunk:
            raise ConnectionError("the library closed the connection")
        buf += chunk
    line, _, rest = bytes(buf).partition(b"\n")
    buf[:] = rest
    return line.decode()


def _grow_with_held_reply(reply: str) -> tuple[list[str], list[str], list[str]]:
    """Send a grow, take the `grown`, and give `reply` to it only after the library's hosts
    have been read: (what the library said, its hosts while the reply was held, after it)."""
    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]
    said: list[str] = []
    got_answer, may_reply, replied = threading.Event(), threading.Event(), threading.Event()

    def daemon() -> None:
        conn, _ = server.accept()
        buf = bytearray()
        with conn:
            conn.settimeout(10)
            for want, answer in (("hello", "ok hello 1"), ("register", "ok register")):
                line = _line(conn, buf)
                assert line.split()[0] == want, line
                conn.sendall(f"{answer}\n".encode())
            conn.sendall(b"grow 1 n2 order=3 deadline=30\n")
            said.append(_line(conn, buf))
            got_answer.set()
            assert may_reply.wait(10)
            conn.sendall(f"{reply}\n".encode())
            if reply.startswith("error expired"):
                conn.sendall(b"hosts n1 reason=deadline order=3\n")
            replied.set()
            said.append(_line(conn, buf))  # the test's ping
            conn.sendall(b"pong\n")

    peer = threading.Thread(target=daemon, daemon=True)
    peer.start()
    env = JobEnv(job_id=7, name="j", hosts=("n1",), host="n1", index=0, app_address=("127.0.0.1", port),
                 secret="s3cret", joining=False, hostfile=None)
    ch = JobChannel(env, timeout=5.0)
    try:
        ch.open()
        ch.register(MalleableHandler())
        assert got_answer.wait(10)
        held = list(ch.hosts)
        may_reply.set()
        assert replied.wait(10)
        assert ch.wait_idle(10)
        ch.ping()
        after = list(ch.hosts)
        peer.join(10)
        assert not peer.is_alive()
    finally:
        ch.close()
        server.close()
    return said, held, after


def test_grown_hosts_appear_once_the_daemon_took_the_answer() -> None:
    said, held, after = _grow_with_held_reply("ok grown order=3")
    assert said == ["grown order=3 n1 n2", "ping"]
    assert held == ["n1"]  # sent, not yet taken: a release now would meet the open order
    assert after == ["n1", "n2"]


def test_a_grown_the_daemon_settled_without_leaves_the_hosts_it_then_sets() -> None:
    said, held, after = _grow_with_held_reply("error expired order 3 was settled without this answer (deadline)")
    assert said[0] == "grown order=3 n1 n2"
    assert held == ["n1"] and after == ["n1"]
