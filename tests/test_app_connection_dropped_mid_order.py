"""A job's registered connection that drops while an order is open, the daemon running on
(PROTOCOL.md, "Reconnecting ... resume"): an application cannot tell a dropped connection
from a restarted daemon, so it reconnects and resumes the same way, and the order is
settled as after a restart -- answered on the new connection, dropped if the application
does not name it, or decided at its deadline -- and the application is told which.

Found by a client written from the spec alone: the daemon used to fail the order the moment
the connection closed, said nothing to the reconnected application, and answered its
`shrunk` with `unknown_order`, which the spec lets a reconnecting client take as done --
the library did, and the application gave up hosts the job still held.

Real daemons, real job processes, the application side on raw loopback sockets (and once
the client library, behind a proxy that cuts its connection).
"""

from __future__ import annotations

import socket
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from conftest import RunningDaemon, start_daemon, stop_daemon, wait_until, write_job
from elastic_protocol.framing import LineSocket

pytestmark = pytest.mark.timeout(90)

RECORDER = Path(__file__).parent / "apps" / "recorder.py"

# The job's processes only publish the job's secret and wait: the test is its leader.
_WAITER = (
    "import os, pathlib, time\n"
    "here = pathlib.Path.cwd()\n"
    "if os.environ['ELASTIC_NODE_INDEX'] == '0':\n"
    "    (here / 'secret').write_text(os.environ['ELASTIC_JOB_SECRET'])\n"
    "while not (here / 'finish').exists():\n"
    "    time.sleep(0.05)\n"
)


def waiter_job(folder: Path) -> Path:
    (folder / "waiter.py").write_text(_WAITER)
    return write_job(folder, "waiter", f'''
        name = "waiter"
        command = ["{sys.executable}", "waiter.py"]
        nodes = {{ min = 1, max = 4 }}
        kind = "malleable"
        working_dir = "."
        time_limit = "2"
    ''')


class App:
    """The application's side of the channel, as a client written from the spec has it."""

    def __init__(self, d: RunningDaemon, folder: Path, job_id: int) -> None:
        # write_text makes the file before it writes the secret: wait for its content.
        assert wait_until(lambda: (folder / "secret").exists() and (folder / "secret").read_text() != "", 30)
        s = socket.create_connection((d.record.app_host, d.record.app_port), timeout=15)
        self.io = LineSocket(s, 8192)
        self.unasked: list[str] = []
        assert self.ask(f"hello 1 {job_id} {(folder / 'secret').read_text()}") == "ok hello 1"

    def read(self) -> str:
        line = self.io.read_line()
        assert line is not None, "the daemon closed the connection"
        return line.decode()

    def ask(self, line: str) -> str:
        """Send a line; its reply (shrink/grow/hosts lines met on the way are kept)."""
        self.io.send_line(line.encode())
        while True:
            reply = self.read()
            if reply.split(" ", 1)[0] in ("shrink", "grow", "hosts"):
                self.unasked.append(reply)
                continue
            return reply

    def next_unasked(self) -> str:
        return self.unasked.pop(0) if self.unasked else self.read()

    def drop(self) -> None:
        self.io.close()


@pytest.fixture
def daemon_2s(tmp_path: Path) -> Iterator[RunningDaemon]:
    d = start_daemon(tmp_path / "state", extra=["--order-deadline", "2"])
    try:
        yield d
    finally:
        stop_daemon(d.record)


@pytest.fixture
def daemon_30s(tmp_path: Path) -> Iterator[RunningDaemon]:
    d = start_daemon(tmp_path / "state", extra=["--order-deadline", "30"])
    try:
        yield d
    finally:
        stop_daemon(d.record)


def _registered_with_a_shrink_open(d: RunningDaemon, folder: Path, to: int) -> tuple[int, App, str]:
    jid = d.submit(waiter_job(folder))
    app = App(d, folder, jid)
    assert app.ask("register") == "ok register"
    assert d.cli("elasticd", "resize", "--no-wait", str(jid), str(to)).returncode == 0
    order = app.next_unasked()
    assert order.startswith(f"shrink {4 - to} order="), order
    return jid, app, order.split("order=")[1].split()[0]


def _finish(d: RunningDaemon, folder: Path, jid: int) -> None:
    (folder / "finish").touch()
    d.wait([jid], timeout=60)
    assert d.job(jid)["state"] == "COMPLETED"


def test_a_connection_dropped_mid_shrink_is_resumed_and_its_answer_taken(
        daemon_30s: RunningDaemon, workdir: Path) -> None:
    d = daemon_30s
    jid, app, oid = _registered_with_a_shrink_open(d, workdir, 2)
    app.drop()
    d.wait_event(jid, "unregistered")

    again = App(d, workdir, jid)
    assert again.ask("register") == "ok register"
    assert again.ask(f"resume order={oid} node1 node2 node3 node4") == "ok resume"
    assert again.ask(f"shrunk order={oid} node3 node4") == f"ok shrunk order={oid}"
    info = d.wait_event(jid, "shrunk")
    assert info["hosts"] == ["node1", "node2"]
    assert "order_failed" not in d.events(jid)
    assert again.unasked == []  # nothing for it to correct
    again.drop()
    _finish(d, workdir, jid)


def test_an_order_settled_while_the_connection_was_down_is_told_at_register_and_its_answer_is_expired(
        daemon_2s: RunningDaemon, workdir: Path) -> None:
    d = daemon_2s
    jid, app, oid = _registered_with_a_shrink_open(d, workdir, 3)
    app.drop()
    d.wait_event(jid, "deadline_missed", timeout=30)
    assert wait_until(lambda: d.job(jid)["hosts"] == ["node1", "node2", "node3"], 30)

    again = App(d, workdir, jid)
    assert again.ask("register") == "ok register"
    # Told before anything else: the order it holds is void, and what the job holds now.
    assert again.unasked == [f"hosts node1 node2 node3 reason=deadline order={oid}"]
    # Its resume, sent before it read that line, may still name the host taken.
    assert again.ask(f"resume order={oid} node1 node2 node3 node4") == "ok resume"
    reply = again.ask(f"shrunk order={oid} node4")
    assert reply.startswith(f"error expired order {oid} was settled without this answer (deadline)"), reply
    assert again.ask("resume node1 node9").startswith("error bad_hosts ")  # still only its own
    again.drop()
    _finish(d, workdir, jid)


def test_an_open_order_the_reconnected_application_does_not_name_is_dropped_and_it_is_told(
        daemon_30s: RunningDaemon, workdir: Path) -> None:
    d = daemon_30s
    jid, app, oid = _registered_with_a_shrink_open(d, workdir, 3)
    app.drop()
    d.wait_event(jid, "unregistered")

    again = App(d, workdir, jid)
    assert again.ask("register") == "ok register"
    assert again.ask("resume node1 node2 node3 node4") == "ok resume"
    assert again.unasked == [f"hosts node1 node2 node3 node4 reason=order_dropped order={oid}"]
    failed = d.wait_event(jid, "order_failed")
    assert failed["nodes"] == 4
    # Not "application not connected": it was, and resumed without the order.
    detail = next(e for e in failed["events"] if e["event"] == "order_failed")["detail"]
    assert "reconnected without it" in detail, detail
    assert again.ask(f"shrunk order={oid} node4").startswith(f"error expired order {oid} ")
    again.drop()
    _finish(d, workdir, jid)


class _Cutter:
    """A loopback proxy in front of the application channel; cut() drops every connection."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = self.server.getsockname()[1]
        self.socks: list[socket.socket] = []
        self.lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                c, _ = self.server.accept()
            except OSError:
                return
            u = socket.create_connection(self.target)
            with self.lock:
                self.socks += [c, u]
            for a, b in ((c, u), (u, c)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    @staticmethod
    def _pump(a: socket.socket, b: socket.socket) -> None:
        try:
            while data := a.recv(65536):
                b.sendall(data)
        except OSError:
            pass
        for s in (a, b):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def cut(self) -> None:
        with self.lock:
            for s in self.socks:
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
            self.socks.clear()

    def close(self) -> None:
        self.cut()
        self.server.close()


def test_the_library_reconnects_after_a_drop_inside_its_handler_and_its_answer_is_taken(
        daemon_30s: RunningDaemon, workdir: Path) -> None:
    d = daemon_30s
    cutter = _Cutter((d.record.app_host, d.record.app_port))
    try:
        job = write_job(workdir, "rec", f'''
            name = "recorder"
            command = ["sh", "-c", "ELASTIC_APP_ADDRESS=127.0.0.1:{cutter.port} exec {sys.executable} {RECORDER}"]
            nodes = {{ min = 1, max = 4 }}
            kind = "malleable"
            working_dir = "."
            env = {{ MODE = "slow_shrink", SLOW = "3" }}
            time_limit = "2"
        ''')
        jid = d.submit(job)
        d.wait_event(jid, "registered")
        assert d.cli("elasticd", "resize", "--no-wait", str(jid), "2").returncode == 0
        events = workdir / "events.log"
        assert wait_until(lambda: "pre_shrink 2" in events.read_text(), 30)
        cutter.cut()  # the handler is inside pre_shrink; its answer goes on a new connection
        info = d.wait_event(jid, "shrunk", timeout=60)
        assert info["hosts"] == ["node1", "node2"]
        assert "order_failed" not in d.events(jid) and "deadline_missed" not in d.events(jid)
        assert d.events(jid).count("registered") == 2
        assert wait_until(lambda: "post_shrink 2 node3,node4" in events.read_text(), 30)
        (workdir / "finish").touch()
        d.wait([jid], timeout=60)
        assert d.job(jid)["state"] == "COMPLETED"
        # The library's view and the daemon's agree.
        assert events.read_text().splitlines()[-1] == "finished hosts=node1,node2"
    finally:
        cutter.close()
