"""Faults an operator meets in cluster mode (`--launcher ssh` on deploy/vcluster.sh's nodes),
each found from outside: the daemon paused longer than the node timeout, a node whose /tmp
(where the node monitors record the job's processes) is full, a restart with a node
that cannot be reached while a malleable job could grow onto it, processes that leave the
job's process group, a stop soon after a node loss (before the node is retried), and a grow
refused while its processes were still being started, and a stop while a grow's start waits on a
silent node. Needs root and the packages, as
tests/test_cluster_vcluster.py."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from conftest import RunningDaemon, alive, hosts_shown_free, read_pid, stop_daemon, wait_until, write_job
from elasticd.daemonctl import start_detached
from test_cluster_allocation import sleeper
from test_cluster_environment import kill_9
from test_cluster_vcluster import (  # noqa: F401 - the fixture
    NODES,
    RECORDER,
    VCluster,
    assert_no_job_process_left,
    cluster_daemon,
    job_processes,
    node_states,
    recorder_job,
    records,
    rigid_job,
    set_link,
    status_dir,
    vcluster,
)


# ---- the daemon paused ---------------------------------------------------------------------
@pytest.mark.timeout(150)
def test_a_daemon_paused_longer_than_the_node_timeout_keeps_its_jobs_and_nodes(
    vcluster: VCluster, tmp_path: Path  # noqa: F811
) -> None:
    # A swapped or stopped login node: the nodes went on sending heartbeats, which wait in
    # the sockets. The silence was the daemon's; it ended every job as NODE_FAIL.
    work = tmp_path / "work"
    work.mkdir()
    d = cluster_daemon(vcluster, tmp_path / "state", "node[1-3]", extra=["--node-timeout", "3"])
    try:
        jid = d.submit(rigid_job(work, 3))
        assert wait_until(lambda: d.job(jid)["state"] == "RUNNING", 60), d.job(jid)
        os.kill(d.record.pid, signal.SIGSTOP)
        try:
            time.sleep(20)  # the fault itself, as long as a swapped login node's pause
        finally:
            os.kill(d.record.pid, signal.SIGCONT)
        log = d.state_dir / "daemon.log"
        # The first heartbeat check after the pause has run once the daemon says so (fixed),
        # or once the job was ended for it (the bug).
        assert wait_until(lambda: "did not run for" in log.read_text() or d.job(jid)["state"] != "RUNNING", 30)
        assert d.job(jid)["state"] == "RUNNING", d.job(jid)
        # And the nodes' heartbeats are heard again: nothing is declared down later either.
        assert not wait_until(lambda: d.job(jid)["state"] != "RUNNING", 6), d.job(jid)
        assert node_states(d) == dict.fromkeys(NODES, "allocated")
        assert d.cli("ecancel", str(jid)).returncode == 0
        d.wait([jid], timeout=30)
        assert d.job(jid)["state"] == "CANCELLED"
    finally:
        stop_daemon(d.record)
    assert_no_job_process_left()


# ---- a node's /tmp full ----------------------------------------------------------------------
@contextlib.contextmanager
def small_tmpfs(path: Path) -> Iterator[Path]:
    """A 16 KiB file system mounted on PATH (the nodes share this machine's mounts)."""
    path.mkdir(parents=True, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16k,mode=700", "tmpfs", str(path)], check=True, timeout=10)
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False, timeout=10)


def fill(fs: Path) -> None:
    """Every byte of the file system taken."""
    with contextlib.suppress(OSError), open(fs / "filler", "ab", buffering=0) as f:
        while True:
            f.write(b"\0" * 4096)
    assert os.statvfs(fs).f_bavail == 0


@pytest.mark.timeout(150)
def test_a_full_tmp_on_a_node_starts_nothing_untracked_there_and_loses_no_exit_status(
    vcluster: VCluster, tmp_path: Path  # noqa: F811
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    state = tmp_path / "state"
    d = cluster_daemon(vcluster, state, "node[1-3]")
    try:
        with small_tmpfs(status_dir(state) / "node2") as fs:
            # Full before the start: the launch fails, naming why, and nothing runs on node2
            # (the job's command ran there on untracked, the node called idle).
            fill(fs)
            failed = d.submit(rigid_job(work, 3, "early"))
            d.wait([failed], timeout=60)
            info = d.job(failed)
            assert info["state"] == "FAILED", info
            assert_no_job_process_left()
            assert "cannot record the job's processes" in (info["reason"] or ""), info
            assert node_states(d) == dict.fromkeys(NODES, "idle")
            # Full while the job runs: its exit status still reaches the daemon (it passed for
            # FAILED 255:0, status unknown).
            (fs / "filler").unlink()
            jid = d.submit(sleeper(work, "late", 3))  # runs until go-late appears, then exits 0
            assert wait_until(lambda: d.job(jid)["state"] == "RUNNING", 60), d.job(jid)
            fill(fs)
            (work / "go-late").touch()
            d.wait([jid], timeout=60)
            info = d.job(jid)
            assert (info["state"], info["exit"]) == ("COMPLETED", "0:0"), info
    finally:
        stop_daemon(d.record)
    assert_no_job_process_left()


# ---- a restart with a node out of reach --------------------------------------------------------
@pytest.mark.timeout(180)
def test_a_restart_with_a_node_out_of_reach_orders_nothing_onto_it_before_its_jobs_are_taken_back(
    vcluster: VCluster, tmp_path: Path  # noqa: F811
) -> None:
    # The application reconnects while the restarted daemon still waits for the node's SSH
    # connect to time out: a pass then saw the node idle and the job not yet taken over, and
    # ordered it onto the node, failed, freed it, ordered again, hundreds of times a second.
    work = tmp_path / "work"
    work.mkdir()
    state = tmp_path / "state"
    opts = ["--hosts", "node[1-3]", "--ssh-config", str(vcluster.ssh_config), "--connect-timeout", "8",
            "--node-timeout", "3", "--node-retry", "1", "--min-resize-interval", "0"]

    def start() -> RunningDaemon:
        return RunningDaemon(state, start_detached(state, None, "malleable", 2.0, extra=opts, timeout=60), len(NODES))

    d = start()
    try:
        jid = d.submit(recorder_job(work, "{ min = 1, max = 3, preferred = 1 }"))
        d.wait_event(jid, "grown", timeout=60)
        assert wait_until(lambda: d.job(jid)["hosts"] == list(NODES) and d.job(jid)["state"] == "RUNNING", 60), \
            d.job(jid)
        set_link("node3", False)
        try:
            # The job goes on without node3 (a registered malleable job above its minimum),
            # its application connected: it reconnects to the restarted daemon at once.
            d.wait_event(jid, "node_failed", timeout=30)
            assert wait_until(lambda: d.job(jid)["hosts"] == ["node1", "node2"] and d.job(jid)["state"] == "RUNNING",
                              30), d.job(jid)
            seen = len(d.job(jid)["events"])
            kill_9(d)
            d = start()
            # Taken over on the nodes it holds, and not once ordered onto the one out of reach.
            info = d.job(jid)
            assert info["state"] == "RUNNING" and info["hosts"] == ["node1", "node2"], info
            assert node_states(d)["node3"] == "down"
            since = [e for e in info["events"][seen:] if e["event"] in ("grow_ordered", "order_failed", "node_failed")]
            assert since == [], (f"{len(since)} event(s) after the restart, the first {since[:3]}; every event since: "
                                 f"{info['events'][seen:]}; the log: "
                                 f"{(state / 'daemon.log').read_text(errors='replace')[-6000:]}")
        finally:
            set_link("node3", True)
        # Back: the job may grow onto it again.
        assert wait_until(lambda: d.job(jid)["hosts"] == list(NODES), 60), d.job(jid)
        assert d.cli("ecancel", str(jid)).returncode == 0
        d.wait([jid], timeout=30)
    finally:
        stop_daemon(d.record)
    assert_no_job_process_left()
    assert job_processes() == []


# ---- processes that leave the job's process group ------------------------------------------
@pytest.mark.timeout(150)
def test_processes_that_leave_the_job_process_group_end_with_the_job_on_its_node(
    vcluster: VCluster, tmp_path: Path  # noqa: F811
) -> None:
    # `setsid` (or a double fork) leaves the process group the node monitor ends: the process
    # ran on after the job's end and after a cancel, on a node shown idle, until a restart's
    # sweep. It carries the job's tag, by which the monitor now ends it with the group.
    work = tmp_path / "work"
    work.mkdir()
    d = cluster_daemon(vcluster, tmp_path / "state", "node[1-2]")
    try:
        jobs = {}
        for name, main in (("ends", f"while [ ! -e {work}/go ]; do sleep 0.1; done"), ("cancelled", "exec sleep 600")):
            jobs[name] = d.submit(write_job(work, name, f'''
                name = "{name}"
                command = ["sh", "-c", "setsid sh -c 'echo $$ > {work}/stray-{name}; exec sleep 600' & {main}"]
                nodes = 1
                working_dir = "."
                output = "{name}-%N.out"
                time_limit = "3"
            '''))
        strays = {name: read_pid(work / f"stray-{name}", 60) for name in jobs}
        assert all(alive(p) for p in strays.values())
        (work / "go").touch()
        d.wait([jobs["ends"]], timeout=60)
        assert d.job(jobs["ends"])["state"] == "COMPLETED", d.job(jobs["ends"])
        assert not alive(strays["ends"]), "a process that left the group outlived the job's end"
        assert d.cli("ecancel", str(jobs["cancelled"])).returncode == 0
        d.wait([jobs["cancelled"]], timeout=60)
        assert d.job(jobs["cancelled"])["state"] == "CANCELLED", d.job(jobs["cancelled"])
        assert not alive(strays["cancelled"]), "a process that left the group outlived the cancel"
    finally:
        stop_daemon(d.record)
    assert_no_job_process_left()


# ---- a stop soon after a node loss ---------------------------------------------------------
def lose_node3(d: RunningDaemon, work: Path, name: str) -> tuple[int, int]:
    """A rigid job on every node, node3's link taken down under it: the job ends NODE_FAIL
    and its process on node3, out of reach, runs on. The job and that process."""
    jid = d.submit(rigid_job(work, 3, name))
    assert wait_until(lambda: d.job(jid)["state"] == "RUNNING", 60), d.job(jid)
    pid = read_pid(work / f"pid-{name}-node3", 30)
    set_link("node3", False)
    d.wait([jid], timeout=60)
    assert d.job(jid)["state"] == "NODE_FAIL", d.job(jid)
    assert alive(pid)
    return jid, pid


LOSS = ["--node-timeout", "2", "--node-retry", "600", "--connect-timeout", "3"]


@pytest.mark.timeout(120)
def test_a_stop_before_the_node_retry_ends_the_lost_jobs_process_on_the_node_that_came_back(
    vcluster: VCluster, tmp_path: Path  # noqa: F811
) -> None:
    # The daemon ends a lost job's processes on a node when it reaches the node again, every
    # --node-retry: a stop in between cancelled that, and they ran on untracked.
    work = tmp_path / "work"
    work.mkdir()
    state = tmp_path / "state"
    d = cluster_daemon(vcluster, state, "node[1-3]", extra=LOSS)
    try:
        jid, pid = lose_node3(d, work, "lost")
        set_link("node3", True)  # back, 600 s before the daemon would look again
        r = d.cli("elasticd", "stop")
        assert r.returncode == 0, r.stdout + r.stderr
        assert not alive(pid), f"job {jid}'s process on node3 outlived `elasticd stop`"
    finally:
        set_link("node3", True)
        stop_daemon(d.record)
    assert_no_job_process_left()
    assert not status_dir(state).exists(), sorted(map(str, status_dir(state).rglob("*")))


@pytest.mark.timeout(150)
def test_a_stop_that_cannot_reach_a_lost_jobs_node_names_it_and_the_next_start_ends_what_is_left_there(
    vcluster: VCluster, tmp_path: Path  # noqa: F811
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    state = tmp_path / "state"
    d = cluster_daemon(vcluster, state, "node[1-3]", extra=LOSS)
    try:
        try:
            jid, pid = lose_node3(d, work, "lost")
            t0 = time.monotonic()
            r = d.cli("elasticd", "stop")
            took = time.monotonic() - t0
            assert r.returncode == 1, r.stdout + r.stderr
            assert f"could not reach node3: the processes of job {jid} there may still run" in r.stderr, r.stderr
            assert took < d.record.kill_wait + 5 + 3, took  # bounded as any stop (+ the tool's own start)
            assert alive(pid)
            assert records(state, "node3", jid)
        finally:
            set_link("node3", True)
        # The next start on the state directory ends them before it answers, and removes their
        # records (their job's end was settled: NODE_FAIL).
        d = cluster_daemon(vcluster, state, "node[1-3]", extra=LOSS)
        assert not alive(pid), f"job {jid}'s process on node3 outlived the next start"
        assert records(state, "node3", jid) == []
        assert node_states(d) == dict.fromkeys(NODES, "idle")
    finally:
        stop_daemon(d.record)
    assert_no_job_process_left()
    assert not status_dir(state).exists(), sorted(map(str, status_dir(state).rglob("*")))


@pytest.mark.timeout(150)
@pytest.mark.parametrize("node_timeout", ["2", "30"], ids=["lost-during-the-stop", "lost-after-the-stop"])
def test_a_stop_while_a_jobs_node_is_silently_gone_never_says_the_job_ended(
    vcluster: VCluster, tmp_path: Path, node_timeout: str  # noqa: F811
) -> None:
    """node3's link goes down under a running job and the stop comes before the daemon
    notices. Lost during the stop (node timeout 2 s), the job was said ended (CANCELLED),
    the stop exited 0, and its process ran on on node3; lost after it (30 s), the stop gave
    up waiting for the daemon's exit before it said which job it had not seen end. Either
    way the job is named, not said ended, and the next start ends what is left."""
    work = tmp_path / "work"
    work.mkdir()
    state = tmp_path / "state"
    d = cluster_daemon(vcluster, state, "node[1-3]",
                       extra=["--node-timeout", node_timeout, "--node-retry", "600", "--connect-timeout", "3"])
    try:
        try:
            jid = d.submit(rigid_job(work, 3, "gone"))
            assert wait_until(lambda: d.job(jid)["state"] == "RUNNING", 60), d.job(jid)
            pid = read_pid(work / "pid-gone-node3", 30)
            set_link("node3", False)
            r = d.cli("elasticd", "stop", timeout=60)
            assert r.returncode == 1, r.stdout + r.stderr
            assert f"ended running job {jid}" not in r.stdout, r.stdout
            named = (f"could not reach node3: the processes of job {jid} there may still run" if node_timeout == "2"
                     else f"job(s) {jid} not seen ending")
            assert named in r.stderr, r.stderr
            assert "elasticd stopped" in r.stdout, r.stdout
            assert alive(pid)
        finally:
            set_link("node3", True)
        d = cluster_daemon(vcluster, state, "node[1-3]", extra=LOSS)
        assert wait_until(lambda: not alive(pid), 30), f"job {jid}'s process on node3 outlived the next start"
    finally:
        stop_daemon(d.record)
    assert_no_job_process_left()


# ---- a grow refused while its processes are being started ---------------------------------
@pytest.mark.timeout(150)
def test_a_grow_refused_while_its_processes_start_frees_its_nodes_only_once_they_are_gone_there(
    vcluster: VCluster, tmp_path: Path  # noqa: F811
) -> None:
    """The grow's spawn on one new node waits (its network is gone) while the other new
    node's process runs already, and the application refuses the grow at once. The daemon
    shows both nodes free only once nothing of the job is left on them: the running one's
    process ended, the late one's ended as its start completes. Before, both were free the
    moment the refusal came, and the job's processes ran on there (found on the nodes)."""
    work = tmp_path / "work"
    work.mkdir()
    job = write_job(work, "rec", f'''
        name = "rec"
        command = ["sh", "-c", "hostname; exec {sys.executable} {RECORDER}"]
        nodes = {{ min = 1, max = 3, preferred = 1 }}
        kind = "malleable"
        working_dir = "."
        output = "rec-%N.out"
        env = {{ MODE = "refuse_grow" }}
        time_limit = "3"
    ''')
    d = None
    slow = ""
    try:
        d = cluster_daemon(vcluster, tmp_path / "state", "node[1-3]",
                           extra=["--node-timeout", "30", "--node-retry", "1", "--connect-timeout", "2"])
        rec = d.submit(job)
        info = d.wait_event(rec, "registered", timeout=30)
        if len(info["hosts"]) > 1:  # the policy started it larger: make room for the grow
            assert d.cli("elasticd", "resize", str(rec), "1").returncode == 0
            info = d.wait_event(rec, "shrunk", timeout=30)
        fast, slow = [n for n in NODES if n not in info["hosts"]]
        before = len(hosts_shown_free(d.state_dir, rec))
        set_link(slow, False)
        assert d.cli("elasticd", "resize", "--no-wait", str(rec), "3").returncode == 0
        read_pid(work / f"pid-{fast}-joining", 60)  # the grow's process there runs
        d.wait_event(rec, "refused", timeout=30)
        assert node_states(d)[slow] != "down", "the node was declared down before the refusal; raise --node-timeout"
        set_link(slow, True)
        assert wait_until(lambda: hosts_shown_free(d.state_dir, rec)[before:] != [], 60), \
            hosts_shown_free(d.state_dir, rec)
        assert sorted(hosts_shown_free(d.state_dir, rec)[before]) == sorted([fast, slow])
        # The moment the daemon says they are free, nothing of the job is left on them.
        left = [p for p in job_processes() if p[1] in (fast, slow)]
        assert not left, f"job processes on nodes shown free: {left}"
        assert d.job(rec)["state"] == "RUNNING"
        (work / "finish").touch()
        d.wait([rec], timeout=60)
        assert d.job(rec)["state"] == "COMPLETED", d.job(rec)
    finally:
        if slow:
            set_link(slow, True)
        if d is not None:
            stop_daemon(d.record)
    assert_no_job_process_left()


# ---- a stop while a grow waits on a node that went silent ---------------------------------
@pytest.mark.timeout(150)
def test_a_stop_while_a_grow_waits_on_a_silent_node_ends_the_grows_process_already_started_elsewhere(
    vcluster: VCluster, tmp_path: Path  # noqa: F811
) -> None:
    """A malleable job on one node grows onto the two others; one of them has gone silent, so
    the grow's start waits there while its process on the other runs already; then
    `elasticd stop`. The launcher ended a launch's processes only once all of its hosts had
    answered, which the stop does not wait for: the grow's process ran on after the stop,
    on a node that answers, until a next start. Now a terminate ends each as soon as it
    exists."""
    work = tmp_path / "work"
    work.mkdir()
    d = cluster_daemon(vcluster, tmp_path / "state", "node[1-3]", extra=["--node-timeout", "30", "--kill-wait", "2"])
    slow = ""
    try:
        rec = d.submit(recorder_job(work, "{ min = 1, max = 3, preferred = 1 }"))
        info = d.wait_event(rec, "registered", timeout=30)
        if len(info["hosts"]) > 1:  # the policy started it larger: make room for the grow
            assert d.cli("elasticd", "resize", str(rec), "1").returncode == 0
            info = d.wait_event(rec, "shrunk", timeout=30)
        fast, slow = [n for n in NODES if n not in info["hosts"]]
        set_link(slow, False)
        assert d.cli("elasticd", "resize", "--no-wait", str(rec), "3").returncode == 0
        joining = read_pid(work / f"pid-{fast}-joining", 60)
        assert node_states(d)[slow] != "down", "the node was declared down before the stop; raise --node-timeout"
        r = d.cli("elasticd", "stop")
        assert not alive(joining), f"the grow's process on {fast} outlived `elasticd stop` ({r.stdout}{r.stderr})"
        if r.returncode != 0:  # the start on the silent node was still pending: the job is named
            assert f"job(s) {rec} not seen ending" in r.stderr, r.stderr
    finally:
        if slow:
            set_link(slow, True)
        stop_daemon(d.record)
    assert_no_job_process_left()
