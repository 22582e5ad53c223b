"""The client library's `job.hosts`: the list the daemon has confirmed, in every hook and
on every path; after a grow, the new hosts appear once the daemon has taken the `grown`
answer, not before it is sent.

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
import time

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


class _Seen(MalleableHandler):
    """Records `job.hosts` in every hook, with the hook's arguments; overrides pre_shrink
    only to look (None: the library's default choice)."""

    def __init__(self) -> None:
        self.job: JobChannel | None = None
        self.seen: list[tuple[str, list[str], tuple[object, ...]]] = []

    def _note(self, hook: str, *args: object) -> None:
        assert self.job is not None
        self.seen.append((hook, list(self.job.hosts), args))

    def pre_shrink(self, n: int) -> list[str] | None:
        self._note("pre_shrink", n)
        return None

    def post_shrink(self, n: int, removed_hosts: list[str]) -> None:
        self._note("post_shrink", n, removed_hosts)

    def pre_grow(self, n: int) -> None:
        self._note("pre_grow", n)

    def post_grow(self, n: int, continued_hosts: list[str], new_hosts: list[str]) -> None:
        self._note("post_grow", n, continued_hosts, new_hosts)

    def on_hosts_changed(self, hosts: list[str], lost_hosts: list[str], reason: str) -> None:
        self._note("on_hosts_changed", hosts, lost_hosts, reason)


def test_job_hosts_in_every_hook_is_the_list_the_daemon_has_confirmed() -> None:
    """The rule of docs/APP_GUIDE.md, on every path: before the answer is taken (pre_shrink,
    pre_grow, post_grow) the list before the order, after it (post_shrink, on_hosts_changed,
    after a release) the list after; a `hosts` line at a reconnection too."""
    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]
    said: list[str] = []
    released = threading.Event()

    def expect(conn: socket.socket, buf: bytearray, answers: list[tuple[str, str | None]]) -> None:
        for want, answer in answers:
            line = _line(conn, buf)
            said.append(line)
            assert line == want or line.split()[0] == want, line
            if answer is not None:
                conn.sendall(f"{answer}\n".encode())

    def daemon() -> None:
        conn, _ = server.accept()
        buf = bytearray()
        with conn:
            conn.settimeout(10)
            expect(conn, buf, [("hello", "ok hello 1"), ("register", "ok register")])
            conn.sendall(b"shrink 1 order=1 deadline=30\n")
            expect(conn, buf, [("shrunk order=1 n3", "ok shrunk order=1")])
            conn.sendall(b"grow 1 n4 order=2 deadline=30\n")
            expect(conn, buf, [("grown order=2 n1 n2 n4", "ok grown order=2")])
            conn.sendall(b"hosts n1 n4 reason=node_failed\n")
            expect(conn, buf, [("release n4", "ok release n4")])
            released.set()
        # The connection drops; the library comes back and is told what changed meanwhile.
        conn, _ = server.accept()
        buf = bytearray()
        with conn:
            conn.settimeout(10)
            expect(conn, buf, [("hello", "ok hello 1"), ("register", None)])
            conn.sendall(b"hosts n1 n5 reason=daemon\nok register\n")
            expect(conn, buf, [("resume n1", "ok resume"), ("ping", "pong")])

    peer = threading.Thread(target=daemon, daemon=True)
    peer.start()
    env = JobEnv(job_id=7, name="j", hosts=("n1", "n2", "n3"), host="n1", index=0,
                 app_address=("127.0.0.1", port), secret="s3cret", joining=False, hostfile=None)
    ch = JobChannel(env, timeout=5.0)
    ch.reconnect_for = 10.0
    handler = _Seen()
    handler.job = ch
    try:
        ch.open()
        ch.register(handler)

        def told_of_the_lost_host() -> bool:
            return any(hook == "on_hosts_changed" for hook, _, _ in handler.seen)

        deadline = time.monotonic() + 10
        while not told_of_the_lost_host() and time.monotonic() < deadline:
            time.sleep(0.01)
        assert ch.wait_idle(10)
        assert ch.hosts == ["n1", "n4"]
        ch.release(["n4"])
        assert released.wait(10)
        assert ch.hosts == ["n1"]
        deadline = time.monotonic() + 10
        while len(handler.seen) < 6 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert ch.wait_idle(10)
        ch.ping()
        peer.join(10)
        assert not peer.is_alive()
    finally:
        ch.close()
        server.close()
    assert handler.seen == [
        ("pre_shrink", ["n1", "n2", "n3"], (1,)),
        ("post_shrink", ["n1", "n2"], (1, ["n3"])),
        ("pre_grow", ["n1", "n2"], (1,)),
        ("post_grow", ["n1", "n2"], (1, ["n1", "n2"], ["n4"])),
        ("on_hosts_changed", ["n1", "n4"], (["n1", "n4"], ["n2"], "node_failed")),
        ("on_hosts_changed", ["n1", "n5"], (["n1", "n5"], [], "daemon")),
    ]
    assert ch.hosts == ["n1", "n5"]
