"""What the daemon does with an application's `shrunk` and `grown`, as PROTOCOL.md states it
for client authors (it said nothing of it): a shrink may give back the job's first host --
its processes there end, a leader's too -- and the job's list keeps its order; a `grown`
may list the hosts in any order and the list keeps the daemon's. Real daemon, real job
processes, the application on a raw loopback socket."""

from __future__ import annotations

import socket
import sys
from pathlib import Path

import psutil
import pytest

from conftest import RunningDaemon, read_pid, wait_until, write_job
from elastic_protocol.framing import LineSocket

pytestmark = pytest.mark.timeout(60)

_WAITER = (
    "import os, pathlib, time\n"
    "here = pathlib.Path.cwd()\n"
    "host = os.environ['ELASTIC_HOST']\n"
    "if os.environ['ELASTIC_NODE_INDEX'] == '0' and os.environ['ELASTIC_JOINING'] == '0':\n"
    "    (here / 'secret').write_text(os.environ['ELASTIC_JOB_SECRET'])\n"
    "(here / f'up-{host}').write_text(str(os.getpid()))\n"
    "while not (here / 'finish').exists():\n"
    "    time.sleep(0.05)\n"
)


def _job(d: RunningDaemon, folder: Path) -> tuple[int, LineSocket]:
    (folder / "waiter.py").write_text(_WAITER)
    jid = d.submit(write_job(folder, "waiter", f'''
        name = "waiter"
        command = ["{sys.executable}", "waiter.py"]
        nodes = {{ min = 1, max = 4 }}
        kind = "malleable"
        working_dir = "."
        time_limit = "2"
    '''))
    secret = folder / "secret"
    assert wait_until(lambda: secret.exists() and secret.read_text() != "", 30)
    io = LineSocket(socket.create_connection((d.record.app_host, d.record.app_port), timeout=15), 8192)
    for line, reply in ((f"hello 1 {jid} {secret.read_text()}", b"ok hello 1"), ("register", b"ok register")):
        io.send_line(line.encode())
        assert io.read_line() == reply
    return jid, io


def _order(d: RunningDaemon, io: LineSocket, jid: int, nodes: int) -> list[str]:
    assert d.cli("elasticd", "resize", "--no-wait", str(jid), str(nodes)).returncode == 0
    line = io.read_line()
    assert line is not None
    return line.decode().split()


def _answer(io: LineSocket, line: str) -> str:
    io.send_line(line.encode())
    reply = io.read_line()
    assert reply is not None
    return reply.decode()


def test_a_shrink_may_give_back_the_first_host_and_a_grown_may_list_hosts_in_any_order(
        daemon: RunningDaemon, workdir: Path) -> None:
    jid, io = _job(daemon, workdir)
    first = read_pid(workdir / "up-node1")  # written after the secret: maybe not yet
    try:
        order = _order(daemon, io, jid, 2)
        oid = order[2].split("=")[1]
        assert _answer(io, f"shrunk order={oid} node1 node3") == f"ok shrunk order={oid}"
        info = daemon.wait_event(jid, "shrunk")
        assert info["hosts"] == ["node2", "node4"]
        # The processes there ended, the first host's (index 0) too, and the hosts are free.
        assert wait_until(lambda: _gone(first), 30)
        assert wait_until(lambda: {n["name"]: n["state"] for n in _nodes(daemon)}["node1"] == "idle", 30)
        assert (daemon.state_dir / "jobs" / str(jid) / "hostfile").read_text() == "node2\nnode4\n"

        order = _order(daemon, io, jid, 4)
        assert order[:4] == ["grow", "2", "node1", "node3"], order
        oid = order[4].split("=")[1]
        assert _answer(io, f"grown order={oid} node3 node1 node4 node2") == f"ok grown order={oid}"
        info = daemon.wait_event(jid, "grown")
        assert info["hosts"] == ["node2", "node4", "node1", "node3"]
    finally:
        io.close()
    (workdir / "finish").touch()
    daemon.wait([jid], timeout=60)


def _nodes(d: RunningDaemon) -> list[dict]:
    from elastic_protocol.control import Status

    with d.client() as c:
        return list(c.request(Status())["nodes"])


def _gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def test_a_defer_time_with_an_exponent_is_refused_as_malformed_and_a_plain_decimal_is_taken(
        daemon: RunningDaemon, workdir: Path) -> None:
    """PROTOCOL.md: times are plain decimal numbers, never an exponent. The daemon read
    `2.5e1` as 25 s, so a client written against it broke on a daemon that keeps to the spec."""
    jid, io = _job(daemon, workdir)
    try:
        oid = _order(daemon, io, jid, 2)[2].split("=")[1]
        # Four: a fifth malformed line closes the connection.
        for bad in ("2.5e1", "nan", "-5", "0x10"):
            reply = _answer(io, f"defer order={oid} {bad}")
            assert reply.startswith("error malformed ") and "not a number of seconds" in reply, (bad, reply)
        assert _answer(io, f"defer order={oid} 3600.5") == f"ok defer order={oid}"
        info = daemon.wait_event(jid, "deferred")
        assert "3600.5" in str(info["events"][-1]), info["events"][-1]
    finally:
        io.close()
    (workdir / "finish").touch()
    daemon.wait([jid], timeout=60)


def test_five_malformed_defers_close_the_connection_as_any_five_malformed_lines(
        daemon: RunningDaemon, workdir: Path) -> None:
    """PROTOCOL.md: `defer` without a number is malformed, and 5 malformed lines close the
    connection. A bad defer time was answered `malformed` but not counted: the connection
    took any number of them."""
    jid, io = _job(daemon, workdir)
    try:
        oid = _order(daemon, io, jid, 2)[2].split("=")[1]
        for bad in ("1e2", "1E2", "inf", "5.", ""):
            reply = _answer(io, f"defer order={oid} {bad}".rstrip())
            assert reply.startswith("error malformed "), (bad, reply)
        assert io.read_line() is None  # closed by the daemon
    finally:
        io.close()
    (workdir / "finish").touch()
    daemon.wait([jid], timeout=60)
