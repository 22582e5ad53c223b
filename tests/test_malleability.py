"""Shrink and grow end to end: a real daemon, real application processes, real orders."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from conftest import RunningDaemon, alive, read_pid, start_daemon, stop_daemon, wait_until, write_job
from elastic_protocol.framing import LineSocket

RECORDER = Path(__file__).parent / "apps" / "recorder.py"


def recorder_job(folder: Path, mode: str = "normal", nodes: str = "{ min = 1, max = 4 }", kind: str = "malleable",
                 env: str = "") -> Path:
    return write_job(folder, "rec", f'''
        name = "recorder"
        command = ["{sys.executable}", "{RECORDER}"]
        nodes = {nodes}
        kind = "{kind}"
        working_dir = "."
        env = {{ MODE = "{mode}"{env} }}
        time_limit = "2"
    ''')


def resize(d: RunningDaemon, job_id: int, nodes: int, *flags: str) -> subprocess.CompletedProcess[str]:
    """`elasticd resize`, which waits for the outcome (exit 1 unless it happened)."""
    return d.cli("elasticd", "resize", str(job_id), str(nodes), *flags)


def pid_of(folder: Path, host: str, joining: bool = False) -> int:
    return read_pid(folder / f"pid-{host}{'-joining' if joining else ''}")


def app_log(folder: Path) -> list[str]:
    p = folder / "events.log"
    return p.read_text().splitlines() if p.exists() else []


def finish(d: RunningDaemon, folder: Path, job_id: int, state: str = "COMPLETED") -> dict:
    (folder / "finish").touch()
    d.wait([job_id], timeout=60)
    info = d.job(job_id)
    assert info["state"] == state, info
    return info


@pytest.fixture
def fast_daemon(tmp_path: Path) -> Iterator[RunningDaemon]:
    d = start_daemon(tmp_path / "state", extra=["--order-deadline", "3"])
    try:
        yield d
    finally:
        stop_daemon(d.record)


def test_shrink_then_grow_changes_hosts_and_ends_released_processes(daemon: RunningDaemon, workdir: Path) -> None:
    jid = daemon.submit(recorder_job(workdir))
    daemon.wait_event(jid, "registered")
    assert daemon.job(jid)["hosts"] == ["node1", "node2", "node3", "node4"]
    old = {h: pid_of(workdir, h) for h in ("node3", "node4")}

    r = resize(daemon, jid, 2)
    assert r.returncode == 0, r.stderr
    info = daemon.wait_event(jid, "shrunk")
    assert info["hosts"] == ["node1", "node2"] and info["nodes"] == 2
    assert info["state"] == "RUNNING"
    for pid in old.values():
        assert not alive(pid), "a process of the job is left on a released host"
    assert "pre_shrink 2" in app_log(workdir) and "post_shrink 2 node3,node4" in app_log(workdir)

    r = resize(daemon, jid, 3)
    assert r.returncode == 0, r.stderr
    info = daemon.wait_event(jid, "grown")
    assert info["hosts"] == ["node1", "node2", "node3"]
    assert alive(pid_of(workdir, "node3", joining=True))
    assert "post_grow 1 node1,node2 node3" in app_log(workdir)

    info = finish(daemon, workdir, jid)
    events = [e["event"] for e in info["events"]]
    assert events.index("shrink_ordered") < events.index("shrunk") < events.index("grow_ordered") < events.index("grown")
    shrunk = next(e for e in info["events"] if e["event"] == "shrunk")
    assert shrunk["nodes"] == 2
    # Node-seconds follow the sizes: more than 2 nodes' worth of the whole run.
    assert info["node_seconds"] > 2 * info["time_used"] * 0.9


def test_application_chooses_which_hosts_to_release(daemon: RunningDaemon, workdir: Path) -> None:
    jid = daemon.submit(recorder_job(workdir, mode="choose_first"))
    daemon.wait_event(jid, "registered")
    node2 = pid_of(workdir, "node2")
    assert resize(daemon, jid, 3).returncode == 0
    info = daemon.wait_event(jid, "shrunk")
    assert info["hosts"] == ["node1", "node3", "node4"]
    assert not alive(node2)
    finish(daemon, workdir, jid)


def test_refused_order_leaves_the_job_as_it_was(daemon: RunningDaemon, workdir: Path) -> None:
    jid = daemon.submit(recorder_job(workdir, mode="refuse"))
    daemon.wait_event(jid, "registered")
    r = resize(daemon, jid, 2)
    assert r.returncode == 1 and "did not happen: refused: order 1: busy with a phase that cannot be split" in r.stderr
    info = daemon.wait_event(jid, "refused")
    assert info["state"] == "RUNNING" and info["nodes"] == 4
    refused = next(e for e in info["events"] if e["event"] == "refused")
    assert "cannot be split" in refused["detail"]
    # It can be asked again (a refusal is not a deferral).
    assert resize(daemon, jid, 2).returncode == 1
    daemon.wait_event(jid, "refused", count=2)
    finish(daemon, workdir, jid)


def test_deferred_order_blocks_further_orders_for_the_time_asked(daemon: RunningDaemon, workdir: Path) -> None:
    jid = daemon.submit(recorder_job(workdir, mode="defer"))
    daemon.wait_event(jid, "registered")
    r = resize(daemon, jid, 2)
    assert r.returncode == 1 and "did not happen: deferred: order 1: 60 s" in r.stderr
    daemon.wait_event(jid, "deferred")
    r = resize(daemon, jid, 2)
    assert r.returncode == 1 and "cannot take an order now" in r.stderr
    finish(daemon, workdir, jid)


def test_a_policy_orders_again_when_the_deferral_ends_not_at_its_next_periodic_pass(tmp_path: Path,
                                                                                    workdir: Path) -> None:
    # minAgree shrinks the malleable job for a waiting one; the application defers each
    # shrink for 1 s. When the deferral ends nothing happens, yet the policy may order again:
    # the daemon asks it then, not at its next periodic pass (here 10 minutes away).
    d = start_daemon(tmp_path / "state", nodes=2, policy="malleable",
                     extra=["--min-resize-interval", "0", "--schedule-interval", "600"])
    try:
        jid = d.submit(recorder_job(workdir, mode="defer", nodes="{ min = 1, max = 2 }", env=', DEFER = "1"'))
        d.wait_event(jid, "grown")
        d.submit(write_job(workdir, "waiter", f"""
            name = "waiter"
            command = ["{sys.executable}", "-c", "pass"]
            nodes = 1
            working_dir = "."
        """))
        info = d.wait_event(jid, "deferred", count=3, timeout=30)
        first, _, third = [e["time"] for e in info["events"] if e["event"] == "deferred"][:3]
        assert 2.0 <= third - first < 2.0 + 3.0, info["events"]
        finish(d, workdir, jid)
    finally:
        stop_daemon(d.record)


def test_a_deferral_the_library_sends_is_a_plain_decimal_the_daemon_takes(daemon: RunningDaemon, workdir: Path) -> None:
    """Python's `:g` wrote 0.00001 s as `1e-05`, which PROTOCOL.md forbids (plain decimals
    only) and the daemon refuses as malformed: the application's answer was lost."""
    jid = daemon.submit(recorder_job(workdir, mode="defer", env=', DEFER = "0.00001"'))
    daemon.wait_event(jid, "registered")
    r = resize(daemon, jid, 2)
    assert r.returncode == 1 and "did not happen: deferred: order 1" in r.stderr, r.stderr
    finish(daemon, workdir, jid)


def test_a_job_whose_application_has_not_answered_its_order_is_resizing_in_the_table_and_json(
        daemon: RunningDaemon, workdir: Path) -> None:
    # The default 30 s order deadline: the 3 s of fast_daemon had passed, on a loaded machine,
    # before equeue (a CLI start-up) asked.
    jid = daemon.submit(recorder_job(workdir, mode="hang"))
    daemon.wait_event(jid, "registered")
    assert resize(daemon, jid, 3, "--no-wait").returncode == 0
    assert daemon.job(jid)["state"] == "RESIZING"
    assert any("RESIZING" in line for line in daemon.cli("equeue").stdout.splitlines())
    assert "deadline_missed" not in daemon.events(jid)
    assert daemon.cli("ecancel", str(jid)).returncode == 0
    daemon.wait([jid])


def test_missed_deadline_ends_the_job_on_hosts_the_daemon_picks(fast_daemon: RunningDaemon, workdir: Path) -> None:
    d = fast_daemon
    jid = d.submit(recorder_job(workdir, mode="hang"))
    d.wait_event(jid, "registered")
    node4 = pid_of(workdir, "node4")
    assert resize(d, jid, 3, "--no-wait").returncode == 0
    info = d.wait_event(jid, "deadline_missed", timeout=30)
    info = d.wait_event(jid, "shrunk", timeout=30)
    events = [e["event"] for e in info["events"]]
    assert events.index("shrink_ordered") < events.index("deadline_missed") < events.index("shrunk"), events
    assert info["hosts"] == ["node1", "node2", "node3"]
    assert not alive(node4)
    assert info["state"] == "RUNNING"
    finish(d, workdir, jid)


def test_resize_reports_a_shrink_settled_at_the_missed_deadline_as_done_and_the_daemons_choice(
        fast_daemon: RunningDaemon, workdir: Path) -> None:
    """An outside user's report: `elasticd resize` said `the resize to 2 nodes did not happen:
    deadline missed` (exit 1) while the job ran on 2 nodes, the daemon having chosen the hosts
    as documented; and `eacct -l` gave that shrink the cause `user`, the README `daemon`."""
    d = fast_daemon
    jid = d.submit(recorder_job(workdir, mode="hang"))
    d.wait_event(jid, "registered")
    r = resize(d, jid, 2)
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"job {jid}: shrunk to 2 nodes (node1, node2)" in r.stdout, r.stdout
    assert "did not answer in time, so the daemon chose the hosts to give back: node3 node4" in r.stdout
    assert d.job(jid)["hosts"] == ["node1", "node2"]
    acct = json.loads(d.cli("eacct", "-j", str(jid), "--json").stdout)
    shrinks = [(c["event"], c["nodes"], c["cause"]) for c in acct["jobs"][0]["timeline"] if c["event"] == "shrunk"]
    assert shrinks == [("shrunk", 2, "daemon")], acct["jobs"][0]["timeline"]
    finish(d, workdir, jid)


def test_an_evolving_job_that_deregistered_is_refused_a_request_by_the_library(
        daemon: RunningDaemon, workdir: Path) -> None:
    """An outside user's report: `request 1` after `deregister` was `ok request 1` and
    `requested: 1` stayed in equeue for ever, though no order comes after a deregister."""
    (workdir / "late.py").write_text(
        "import pathlib, time\n"
        "from elastic_apps import DaemonRefused, JobChannel, MalleableHandler\n"
        "job = JobChannel.connect()\n"
        "job.register(MalleableHandler())\n"
        "job.disable()\n"
        "try:\n"
        "    job.request_grow(1)\n"
        "    out = 'ok'\n"
        "except DaemonRefused as exc:\n"
        "    out = f'{exc.code}: {exc.message}'\n"
        "pathlib.Path('result').write_text(out)\n"
        "while not pathlib.Path('finish').exists():\n"
        "    time.sleep(0.02)\n")
    jid = daemon.submit(write_job(workdir, "late", f'''
        name = "late"
        command = ["{sys.executable}", "late.py"]
        nodes = {{ min = 1, max = 3 }}
        kind = "evolving"
        working_dir = "."
        time_limit = "2"
    '''))
    result = workdir / "result"
    assert wait_until(lambda: result.exists() and result.read_text() != "", 30)
    assert result.read_text().startswith("deregistered: "), result.read_text()
    info = daemon.job(jid)
    assert info["requested"] == 0 and "requested" not in [e["event"] for e in info["events"]]
    assert "deregistered" in [e["event"] for e in info["events"]]
    finish(daemon, workdir, jid)


def test_disabled_handler_receives_no_more_orders(daemon: RunningDaemon, workdir: Path) -> None:
    jid = daemon.submit(recorder_job(workdir))
    daemon.wait_event(jid, "registered")
    (workdir / "disable").touch()
    daemon.wait_event(jid, "deregistered")
    r = resize(daemon, jid, 2)
    assert r.returncode == 1
    assert "it deregistered for good" in r.stderr
    assert not any(line.startswith("pre_shrink") for line in app_log(workdir))
    finish(daemon, workdir, jid)


def test_rigid_job_cannot_be_resized(daemon: RunningDaemon, workdir: Path) -> None:
    jid = daemon.submit(write_job(workdir, "r", 'name = "r"\ncommand = ["sleep", "30"]\nnodes = 2\nworking_dir = "."\n'))
    r = resize(daemon, jid, 1)
    assert r.returncode == 1 and "only malleable and evolving jobs resize" in r.stderr
    daemon.cli("ecancel", str(jid))


def test_evolving_request_is_granted_when_nodes_are_free_and_queued_otherwise(daemon: RunningDaemon, workdir: Path) -> None:
    jid = daemon.submit(recorder_job(workdir, nodes="{ min = 1, max = 3 }", kind="evolving"))
    daemon.wait_event(jid, "registered")
    assert daemon.job(jid)["hosts"] == ["node1"]
    (workdir / "request-2").touch()
    info = daemon.wait_event(jid, "grown")
    assert info["hosts"] == ["node1", "node2", "node3"]
    # Now take the last node with a rigid job and ask for one more: queued.
    (workdir / "release-node3").touch()
    info = daemon.wait_event(jid, "released")
    assert info["hosts"] == ["node1", "node2"]
    blocker = daemon.submit(write_job(workdir, "b", 'name = "b"\ncommand = ["sleep", "60"]\nnodes = 2\nworking_dir = "."\n'))
    assert wait_until(lambda: daemon.job(blocker)["state"] == "RUNNING", 30)
    (workdir / "request-1").touch()
    daemon.wait_event(jid, "requested")
    assert daemon.job(jid)["hosts"] == ["node1", "node2"]  # nothing free: waits
    daemon.cli("ecancel", str(blocker))
    info = daemon.wait_event(jid, "grown", count=2)
    assert len(info["hosts"]) == 3
    finish(daemon, workdir, jid)


def test_application_that_dies_during_a_resize_leaves_the_daemon_consistent(
        fast_daemon: RunningDaemon, workdir: Path) -> None:
    daemon = fast_daemon
    jid = daemon.submit(recorder_job(workdir, mode="die_on_shrink"))
    daemon.wait_event(jid, "registered")
    # Its connection closed with the order open: the order waits for a reconnection (as
    # after a restart of the daemon) until its deadline, which then decides.
    r = resize(daemon, jid, 2)
    assert r.returncode == 0 and f"job {jid}: shrunk to 2 nodes (node1, node2)" in r.stdout, r.stdout + r.stderr
    info = daemon.wait_event(jid, "deadline_missed")
    assert "order_failed" not in daemon.events(jid)
    assert wait_until(lambda: daemon.job(jid)["hosts"] == ["node1", "node2"], 30)
    info = finish(daemon, workdir, jid, state="FAILED")
    assert info["exit"] == "7:0"
    status = daemon.cli("elasticd", "status")
    assert "nodes: 4 (4 idle)" in status.stdout


def _app_socket(d: RunningDaemon) -> LineSocket:
    s = socket.create_connection((d.record.app_host, d.record.app_port), timeout=10)
    return LineSocket(s, 8192)


def test_garbage_from_an_application_gets_errors_then_the_connection_is_closed(daemon: RunningDaemon, workdir: Path) -> None:
    jid = daemon.submit(recorder_job(workdir))
    daemon.wait_event(jid, "registered")
    secret = (workdir / "secret").read_text()
    io = _app_socket(daemon)
    io.send_line(f"hello 1 {jid} {secret}".encode())
    assert io.read_line() == b"ok hello 1"
    for junk in (b"hullo", b"\x01\x02", b"shrunk", b"request -3", b"grown order=x"):
        io.send_line(junk)
        line = io.read_line()
        assert line is not None and line.startswith(b"error malformed"), line
    assert io.read_line() is None  # closed after 5 malformed lines
    io.close()
    # The job kept its nodes and its registered connection.
    assert daemon.job(jid)["state"] == "RUNNING"
    assert resize(daemon, jid, 3).returncode == 0
    daemon.wait_event(jid, "shrunk")
    finish(daemon, workdir, jid)


def test_application_cannot_claim_another_jobs_id(daemon: RunningDaemon, workdir: Path) -> None:
    a_dir, b_dir = workdir / "a", workdir / "b"
    a_dir.mkdir()
    b_dir.mkdir()
    a = daemon.submit(recorder_job(a_dir, nodes="{ min = 1, max = 2 }"))
    b = daemon.submit(recorder_job(b_dir, nodes="{ min = 1, max = 2 }"))
    daemon.wait_event(a, "registered")
    daemon.wait_event(b, "registered")
    io = _app_socket(daemon)
    io.send_line(f"hello 1 {b} {(a_dir / 'secret').read_text()}".encode())
    assert io.read_line().startswith(b"error auth_failed")
    assert io.read_line() is None
    io.close()
    log = (daemon.state_dir / "daemon.log").read_text()
    assert f"claiming job {b}: wrong secret" in log
    (a_dir / "finish").touch()
    (b_dir / "finish").touch()
    daemon.wait([a, b])


def test_async_handler_methods_run_on_the_applications_event_loop(daemon: RunningDaemon, workdir: Path) -> None:
    app = Path(__file__).parent / "apps" / "async_app.py"
    jid = daemon.submit(write_job(workdir, "a", f'''
        name = "asyncapp"
        command = ["{sys.executable}", "{app}"]
        nodes = {{ min = 1, max = 3 }}
        kind = "malleable"
        working_dir = "."
    '''))
    daemon.wait_event(jid, "registered")
    assert resize(daemon, jid, 1).returncode == 0
    info = daemon.wait_event(jid, "shrunk")
    assert info["hosts"] == ["node1"]
    assert app_log(workdir) == ["pre_shrink 2 on_loop=True", "post_shrink 2 node2,node3"]
    finish(daemon, workdir, jid)


def test_registered_connection_that_sends_garbage_is_closed_and_the_job_runs_on_as_rigid(daemon: RunningDaemon, workdir: Path) -> None:
    # A malleable job whose own processes never register: this connection is its leader.
    jid = daemon.submit(write_job(workdir, "quiet", """
        name = "quiet"
        command = ["sh", "-c", "[ $ELASTIC_NODE_INDEX = 0 ] && echo $ELASTIC_JOB_SECRET > secret; sleep 60"]
        nodes = { min = 1, max = 4 }
        kind = "malleable"
        working_dir = "."
        time_limit = "2"
    """))
    assert wait_until(lambda: (workdir / "secret").exists() and (workdir / "secret").read_text().strip() != "", 30)
    secret = (workdir / "secret").read_text().strip()
    io = _app_socket(daemon)
    io.send_line(f"hello 1 {jid} {secret}".encode())
    assert io.read_line() == b"ok hello 1"
    io.send_line(b"register")  # this connection now receives the job's orders
    assert io.read_line() == b"ok register"
    for _ in range(5):
        io.send_line(b"\xffgarbage")
        assert io.read_line().startswith(b"error malformed")
    assert io.read_line() is None
    io.close()
    info = daemon.wait_event(jid, "unregistered")
    assert info["state"] == "RUNNING" and info["nodes"] == 4
    r = resize(daemon, jid, 2)
    assert r.returncode == 1 and "its application's connection closed; it runs as rigid" in r.stderr, r.stderr
    assert any(j["note"] == "Disconnected" for j in daemon.jobs(jid).values())
    log = (daemon.state_dir / "daemon.log").read_text()
    assert "too many bad lines" in log
    assert daemon.cli("ecancel", str(jid)).returncode == 0
    daemon.wait([jid], timeout=60)


def test_resize_to_the_size_a_job_already_has_returns_at_once_and_sends_no_order(
        daemon: RunningDaemon, workdir: Path) -> None:
    """The daemon sends nothing for it (PROTOCOL.md), so `elasticd resize` used to wait for
    an outcome that never came (120 s) and fail."""
    jid = daemon.submit(recorder_job(workdir))
    daemon.wait_event(jid, "registered")
    r = daemon.cli("elasticd", "resize", str(jid), "4", timeout=30)
    assert r.returncode == 0 and r.stdout.strip() == f"job {jid}: already runs on 4 nodes", r
    r = daemon.cli("elasticd", "resize", str(jid), "4", "--hold", timeout=30)
    assert r.returncode == 0 and r.stdout.strip() == f"job {jid}: already runs on 4 nodes; held at that size", r
    assert daemon.job(jid)["held"]
    events = daemon.events(jid)
    assert "shrink_ordered" not in events and "grow_ordered" not in events
    assert not any(line.startswith(("pre_", "post_")) for line in app_log(workdir))
    finish(daemon, workdir, jid)


def test_an_evolving_jobs_waiting_request_is_its_requested_count_in_the_queue_document(
        daemon: RunningDaemon, workdir: Path) -> None:
    """PROTOCOL.md sends a client whose request waits to `requested` in `equeue --json`,
    which the document did not have."""
    jid = daemon.submit(recorder_job(workdir, nodes="{ min = 1, max = 3 }", kind="evolving"))
    daemon.wait_event(jid, "registered")
    assert daemon.job(jid)["requested"] == 0
    blocker = daemon.submit(write_job(workdir, "b", 'name = "b"\ncommand = ["sleep", "60"]\nnodes = 3\nworking_dir = "."\n'))
    assert wait_until(lambda: daemon.job(blocker)["state"] == "RUNNING", 30)
    (workdir / "request-2").touch()
    info = daemon.wait_event(jid, "requested")
    assert info["requested"] == 2 and info["hosts"] == ["node1"]
    doc = json.loads(daemon.cli("equeue", "--json").stdout)
    assert next(j for j in doc["jobs"] if j["job_id"] == jid)["requested"] == 2
    daemon.cli("ecancel", str(blocker))
    info = daemon.wait_event(jid, "grown")
    assert info["requested"] == 0 and len(info["hosts"]) == 3
    finish(daemon, workdir, jid)
