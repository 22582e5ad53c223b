"""The application channel under faults, through a real daemon and the real client library
(tests/apps/recorder.py): one leader per job, deadlines the application is told of, hosts
the application always knows, a paused daemon that fails nothing, and input that arrived
before a deadline handled before it."""

from __future__ import annotations

import json
import os
import signal
import socket
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from conftest import RunningDaemon, start_daemon, stop_daemon, wait_until, write_job
from elastic_protocol.framing import LineSocket

RECORDER = Path(__file__).parent / "apps" / "recorder.py"


def recorder(folder: Path, mode: str = "normal", **env: str) -> Path:
    more = "".join(f', {k} = "{v}"' for k, v in env.items())
    return write_job(folder, "rec", f'''
        name = "recorder"
        command = ["{sys.executable}", "{RECORDER}"]
        nodes = {{ min = 1, max = 4 }}
        kind = "malleable"
        working_dir = "."
        env = {{ MODE = "{mode}"{more} }}
        time_limit = "2"
    ''')


def app_log(folder: Path) -> list[str]:
    p = folder / "events.log"
    return p.read_text().splitlines() if p.exists() else []


class Raw:
    """A second connection of the job, as another of its processes (or a buggy client) opens."""

    def __init__(self, d: RunningDaemon, folder: Path, job_id: int) -> None:
        # write_text makes the file before it writes the secret: wait for its content.
        assert wait_until(lambda: (folder / "secret").exists() and (folder / "secret").read_text() != "", 30)
        s = socket.create_connection((d.record.app_host, d.record.app_port), timeout=10)
        self.lines = LineSocket(s, 8192)
        assert self.ask(f"hello 1 {job_id} {(folder / 'secret').read_text()}") == "ok hello 1"

    def ask(self, line: str) -> str:
        self.lines.send_line(line.encode())
        reply = self.lines.read_line()
        assert reply is not None, f"closed after {line!r}"
        return reply.decode()

    def close(self) -> None:
        self.lines.close()


@pytest.fixture
def quick(tmp_path: Path) -> Iterator[RunningDaemon]:
    d = start_daemon(tmp_path / "state", extra=["--order-deadline", "2"])
    try:
        yield d
    finally:
        stop_daemon(d.record)


def test_one_leader_a_second_register_is_refused_and_only_the_leader_deregisters(
    daemon: RunningDaemon, workdir: Path
) -> None:
    jid = daemon.submit(recorder(workdir))
    daemon.wait_event(jid, "registered")
    other = Raw(daemon, workdir, jid)
    try:
        assert other.ask("register").startswith("error already_registered ")
        assert other.ask("deregister").startswith("error not_registered only the registered connection")
        # The job's first host runs its leader: it cannot be released.
        assert other.ask("release node1").startswith("error bad_hosts release: node1 is the job's first host")
        # resume names the job's own hosts only.
        assert other.ask("resume node1 node9") == "error bad_hosts resume: not hosts of job 1: node9"
        assert daemon.job(jid)["nodes"] == 4 and "deregistered" not in daemon.events(jid)
    finally:
        other.close()
    (workdir / "finish").touch()
    daemon.wait([jid], timeout=60)
    assert daemon.job(jid)["state"] == "COMPLETED"


def test_a_workers_resume_never_touches_the_leaders_open_order(daemon: RunningDaemon, workdir: Path) -> None:
    """A worker keeps a connection for put/get and, after a drop, follows the reconnect
    steps too: hello, then resume (it never registered). Its resume, refused for its hosts
    or taken, dropped the leader's open order (found by a client written from the spec)."""
    jid = daemon.submit(recorder(workdir, "slow_shrink", SLOW="3"))
    daemon.wait_event(jid, "registered")
    assert daemon.cli("elasticd", "resize", str(jid), "2", "--no-wait").returncode == 0
    assert wait_until(lambda: "shrink_ordered" in daemon.events(jid), 30)
    worker = Raw(daemon, workdir, jid)
    try:
        assert worker.ask("resume node9").startswith("error bad_hosts ")
        assert worker.ask("resume node3") == "ok resume"
    finally:
        worker.close()
    # The leader's answer, after its 3 s, settles the order as the user asked.
    daemon.wait_event(jid, "shrunk", timeout=30)
    assert "order_failed" not in daemon.events(jid), daemon.events(jid)
    assert daemon.job(jid)["hosts"] == ["node1", "node2"]
    (workdir / "finish").touch()
    daemon.wait([jid], timeout=60)
    assert daemon.job(jid)["state"] == "COMPLETED"


def test_a_missed_deadline_is_told_to_the_application_with_the_hosts_taken_and_its_late_answer_refused(
    quick: RunningDaemon, workdir: Path
) -> None:
    d = quick
    jid = d.submit(recorder(workdir, "slow_shrink", SLOW="4"))
    d.wait_event(jid, "registered")
    assert d.cli("elasticd", "resize", str(jid), "3", "--no-wait").returncode == 0
    d.wait_event(jid, "deadline_missed", timeout=30)
    # The documented rule: the last hosts of the job's list go.
    assert wait_until(lambda: d.job(jid)["hosts"] == ["node1", "node2", "node3"], 30), d.job(jid)["hosts"]
    assert wait_until(lambda: any(ln.startswith("hosts_changed") for ln in app_log(workdir)), 30), app_log(workdir)
    assert "hosts_changed deadline node1,node2,node3 lost=node4" in app_log(workdir)
    log = (d.state_dir / "daemon.log").read_text()
    assert "told the application: hosts node1 node2 node3 reason=deadline order=1" in log
    # Its answer, sent after the deadline, was refused as expired (not taken for a new shrink).
    assert wait_until(lambda: "expired" in (d.state_dir / "daemon.log").read_text(), 30)
    (workdir / "finish").touch()
    d.wait([jid], timeout=60)
    assert d.job(jid)["state"] == "COMPLETED"
    assert app_log(workdir)[-1] == "finished hosts=node1,node2,node3"


def test_a_daemon_paused_past_every_client_timeout_fails_nothing_and_takes_the_answer_sent_meanwhile(
    tmp_path: Path
) -> None:
    workdir = tmp_path / "work"
    workdir.mkdir()
    d = start_daemon(tmp_path / "state", extra=["--order-deadline", "3"])
    try:
        # A library that waits 1 s for a reply; the daemon stops for far longer.
        jid = d.submit(recorder(workdir, "slow_shrink", SLOW="1", CHANNEL_TIMEOUT="1"))
        d.wait_event(jid, "registered")
        assert d.cli("elasticd", "resize", str(jid), "3", "--no-wait").returncode == 0
        assert wait_until(lambda: "pre_shrink 1" in app_log(workdir), 30)
        os.kill(d.record.pid, signal.SIGSTOP)
        try:
            time.sleep(5)  # the pause itself is what is tested: past the 3 s deadline and the 1 s timeout
        finally:
            os.kill(d.record.pid, signal.SIGCONT)
        # The answer that waited in the socket wins over the deadline that fell due meanwhile.
        info = d.wait_event(jid, "shrunk", timeout=30)
        assert info["nodes"] == 3
        assert "deadline_missed" not in d.events(jid)

        # The job ends its work while the daemon is paused again: its deregistration waits,
        # and the job still ends COMPLETED, not FAILED.
        os.kill(d.record.pid, signal.SIGSTOP)
        try:
            (workdir / "disable").touch()
            # The recorder takes the file away, then deregisters: that waits on the daemon.
            assert wait_until(lambda: not (workdir / "disable").exists(), 30)
            (workdir / "finish").touch()
            time.sleep(4)  # longer than the library's 1 s reply timeout
        finally:
            os.kill(d.record.pid, signal.SIGCONT)
        d.wait([jid], timeout=60)
        info = d.job(jid)
        assert info["state"] == "COMPLETED", (info, app_log(workdir))
        assert "disabled" in app_log(workdir)
    finally:
        os.kill(d.record.pid, signal.SIGCONT)
        stop_daemon(d.record)


def test_the_hostfile_follows_every_size_change(daemon: RunningDaemon, workdir: Path) -> None:
    jid = daemon.submit(recorder(workdir))
    daemon.wait_event(jid, "registered")
    hostfile = daemon.state_dir / "jobs" / str(jid) / "hostfile"
    assert hostfile.read_text().split() == ["node1", "node2", "node3", "node4"]
    assert daemon.cli("elasticd", "resize", str(jid), "2").returncode == 0
    assert wait_until(lambda: hostfile.read_text().split() == ["node1", "node2"], 30), hostfile.read_text()
    assert daemon.cli("elasticd", "resize", str(jid), "3").returncode == 0
    assert wait_until(lambda: hostfile.read_text().split() == ["node1", "node2", "node3"], 30), hostfile.read_text()
    (workdir / "finish").touch()
    daemon.wait([jid], timeout=60)


def test_a_grows_process_that_dies_at_start_voids_the_grow_at_once_and_its_grown_is_refused(
    daemon: RunningDaemon, workdir: Path
) -> None:
    jid = daemon.submit(recorder(workdir, "slow_grow", SLOW="3", CRASH_JOINING="1"))
    daemon.wait_event(jid, "registered")
    assert daemon.cli("elasticd", "resize", str(jid), "2").returncode == 0
    r = daemon.cli("elasticd", "resize", str(jid), "3")
    # The grow is void as soon as its process died: the resize says why, naming the exit.
    assert r.returncode == 1, r.stdout
    assert "the process started on node3 for the grow exited 3:0 before the application took it" in r.stderr
    info = daemon.job(jid)
    assert info["hosts"] == ["node1", "node2"] and info["state"] == "RUNNING"
    # Its host went back at once, and the application was told.
    assert wait_until(lambda: any(ln.startswith("hosts_changed launch_failed node1,node2") for ln in app_log(workdir)),
                      10), app_log(workdir)
    assert wait_until(lambda: "expired" in (daemon.state_dir / "daemon.log").read_text(), 30)
    def node3() -> str:
        doc = json.loads(daemon.cli("elasticd", "status", "--json").stdout)
        return str({n["name"]: n["state"] for n in doc["nodes"]}["node3"])

    assert wait_until(lambda: node3() == "idle", 30), node3()
    (workdir / "finish").touch()
    daemon.wait([jid], timeout=60)
    assert daemon.job(jid)["state"] == "COMPLETED"


def test_a_grows_process_that_fails_after_the_application_ended_does_not_fail_the_job(
    daemon: RunningDaemon, workdir: Path
) -> None:
    # The race at a job's end: a grow is ordered as the application finishes its work, and
    # the grow's new process, which finds no application to join, fails. The job did its
    # work: it ends COMPLETED, and the void grow is in its history.
    jid = daemon.submit(recorder(workdir, "slow_grow", SLOW="30", CRASH_JOINING="late"))
    daemon.wait_event(jid, "registered")
    assert daemon.cli("elasticd", "resize", str(jid), "2").returncode == 0
    assert daemon.cli("elasticd", "resize", "--no-wait", str(jid), "3").returncode == 0
    assert wait_until(lambda: any(ln.startswith("post_grow") for ln in app_log(workdir)), 30), app_log(workdir)
    (workdir / "finish").touch()  # the leader ends while the grow is not answered
    assert wait_until(lambda: any(ln.startswith("finished") for ln in app_log(workdir)), 30), app_log(workdir)
    (workdir / "crash-joining").touch()
    daemon.wait([jid], timeout=30)
    info = daemon.job(jid)
    assert info["state"] == "COMPLETED", (info["state"], daemon.events(jid))
    assert "order_failed" in daemon.events(jid) or "order_dropped" in daemon.events(jid), daemon.events(jid)


def test_resize_hold_and_release_from_the_command_line(daemon: RunningDaemon, workdir: Path) -> None:
    jid = daemon.submit(recorder(workdir))
    daemon.wait_event(jid, "registered")
    r = daemon.cli("elasticd", "resize", str(jid), "2", "--hold")
    assert r.returncode == 0 and f"job {jid}: shrunk to 2 nodes" in r.stdout, r.stderr
    info = daemon.job(jid)
    assert info["held"] is True and "held" in [e["event"] for e in info["events"]]
    r = daemon.cli("elasticd", "release", str(jid))
    assert r.returncode == 0 and f"job {jid}: released" in r.stdout
    assert daemon.job(jid)["held"] is False
    r = daemon.cli("elasticd", "release", str(jid))
    assert r.returncode == 1 and r.stderr.strip() == f"elasticd: error: job {jid} is not held [resize_rejected]"
    # Held again and ended so: its hold went with it, and a release says the job is over
    # (it used to answer `released; the policy may resize it again`, exit 0).
    assert daemon.cli("elasticd", "resize", str(jid), "3", "--hold").returncode == 0
    (workdir / "finish").touch()
    daemon.wait([jid], timeout=60)
    r = daemon.cli("elasticd", "release", str(jid))
    assert r.returncode == 1, r.stdout
    assert r.stderr.strip() == f"elasticd: error: job {jid} is COMPLETED, not running [resize_rejected]"


def test_a_request_to_a_paused_daemon_times_out_saying_it_may_still_be_carried_out(daemon: RunningDaemon,
                                                                                   tmp_path: Path) -> None:
    """A paused daemon reads the request once it resumes, so a timed-out submission was not
    refused: the message must not invite a second one. Before: 'connection to the daemon
    failed: timed out'."""
    from elastic_protocol.control import Submit
    from elasticd.errors import DaemonError
    from elasticd.jobfile import load_job_file

    spec = load_job_file(write_job(tmp_path, "later", f'name = "later"\ncommand = ["true"]\nnodes = 1\n'
                                                      f'working_dir = "{tmp_path}"\noutput = "/dev/null"\n'))
    with daemon.client() as c:
        os.kill(daemon.record.pid, signal.SIGSTOP)
        try:
            with pytest.raises(DaemonError) as err:
                c.request(Submit(spec=spec), timeout=1.0)
        finally:
            os.kill(daemon.record.pid, signal.SIGCONT)
    assert err.value.code == "timeout", err.value
    assert f"pid {daemon.record.pid}" in str(err.value) and "may still be carried out" in str(err.value)
    # It was: the job is there once the daemon runs again.
    assert wait_until(lambda: any(j["name"] == "later" for j in daemon.jobs().values()), 30)
