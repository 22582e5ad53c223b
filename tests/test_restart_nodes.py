"""A restart after a crash takes running jobs over on the nodes they hold (README: a crash
loses nothing acknowledged). One whose nodes the restart leaves out cannot be taken over:
the start is refused before anything is changed, naming the jobs, their nodes and the option
that ends them; with that option they end NODE_FAIL, their processes are ended, and the
start says which."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest

from conftest import RunningDaemon, alive, read_pid, start_daemon, wait_gone, wait_until, write_job
from elasticd.statedir import read_record

pytestmark = pytest.mark.timeout(120)


def test_a_restart_without_nodes_that_running_jobs_hold_is_refused_unless_told_to_end_them(
        tmp_path: Path, daemons: list[RunningDaemon]) -> None:
    d = start_daemon(tmp_path / "state", nodes=4)
    daemons.append(d)
    job = write_job(tmp_path, "hold", f'''
        name = "hold"
        command = ["sh", "-c", "echo $$ > pid-$ELASTIC_HOST; exec sleep 300"]
        nodes = 1
        working_dir = "{tmp_path}"
        output = "hold-%N.out"
    ''')
    ids = [d.submit(job) for _ in range(4)]
    assert wait_until(lambda: all((tmp_path / f"pid-node{i}").exists() for i in range(1, 5)), 30)
    on = {h: d.job(j)["hosts"] for j in ids for h in d.job(j)["hosts"]}
    by_host = {d.job(j)["hosts"][0]: j for j in ids}
    assert sorted(on) == ["node1", "node2", "node3", "node4"]
    pids = {h: read_pid(tmp_path / f"pid-{h}") for h in on}
    os.kill(d.record.pid, signal.SIGKILL)
    wait_gone(d.record.pid, 30)

    refused = d.cli("elasticd", "start", "--local", "2", "--kill-wait", "1", timeout=60)
    assert refused.returncode == 1, refused.stdout + refused.stderr
    for host in ("node3", "node4"):
        assert f"job {by_host[host]} on {host}" in refused.stderr, refused.stderr
    assert "--drop-missing-nodes" in refused.stderr
    # The cause first, on one line: not the daemon's log lines before it (an INFO line on
    # containment came first), which stay in its log.
    first, *rest = refused.stderr.splitlines()
    assert first.startswith("elasticd: error: refusing to start: running job"), refused.stderr
    assert rest == [] and " INFO " not in refused.stderr, refused.stderr
    assert f"its log is {d.state_dir / 'daemon.log'}" in first
    left = read_record(d.state_dir)
    assert left is None or not alive(left.pid)  # no daemon runs
    assert all(alive(p) for p in pids.values())  # and no job process was touched

    forced = d.cli("elasticd", "start", "--local", "2", "--kill-wait", "1", "--drop-missing-nodes", timeout=60)
    assert forced.returncode == 0, forced.stdout + forced.stderr
    rec = read_record(d.state_dir)
    assert rec is not None
    d = RunningDaemon(d.state_dir, rec, 2)
    daemons.append(d)
    dropped = sorted([by_host["node3"], by_host["node4"]])
    assert f"ended NODE_FAIL, their processes ended: jobs {dropped[0]}, {dropped[1]}" in forced.stdout, forced.stdout
    for host, jid in by_host.items():
        info = d.job(jid)
        if host in ("node3", "node4"):
            assert info["state"] == "NODE_FAIL", info
            assert wait_until(lambda p=pids[host]: not alive(p), 30), f"process of job {jid} on {host} left"
        else:
            assert info["state"] == "RUNNING" and info["hosts"] == [host], info
            assert alive(pids[host])
    log = (d.state_dir / "daemon.log").read_text()
    assert f"job {by_host['node3']}: ends NODE_FAIL" in log and "node3, which this start leaves out" in log


def test_jobs_a_restart_on_fewer_nodes_cannot_start_wait_saying_why_and_hold_up_nothing(
        tmp_path: Path, daemons: list[RunningDaemon]) -> None:
    """An outside user's report: after a restart on 1 node, the waiting 4- and 2-node jobs
    showed `4-1` and `2-1` in equeue and a new 1-node job waited behind them (Priority) for
    ever. They wait, saying what they lack, out of the queue's way; a restart on enough nodes
    takes them back."""
    d = start_daemon(tmp_path / "state", nodes=4, policy="fcfs")
    daemons.append(d)

    def job(name: str, nodes: int) -> Path:
        return write_job(tmp_path, name, f'''
            name = "{name}"
            command = ["sleep", "300"]
            nodes = {nodes}
            working_dir = "{tmp_path}"
        ''')

    running = d.submit(job("r2", 2))
    assert wait_until(lambda: d.job(running)["state"] == "RUNNING", 30)
    wide, narrow = d.submit(job("r4", 4)), d.submit(job("r2", 2))
    os.kill(d.record.pid, signal.SIGKILL)
    wait_gone(d.record.pid, 30)

    def restart(nodes: int) -> RunningDaemon:
        r = d.cli("elasticd", "start", "--local", str(nodes), "--policy", "fcfs", "--kill-wait", "1",
                  "--drop-missing-nodes", timeout=60)
        assert r.returncode == 0, r.stdout + r.stderr
        rec = read_record(d.state_dir)
        assert rec is not None
        daemons.append(RunningDaemon(d.state_dir, rec, nodes))
        return daemons[-1]

    d = restart(1)
    assert d.job(running)["state"] == "NODE_FAIL"
    doc = json.loads(d.cli("equeue", "--json").stdout)
    waiting = {j["job_id"]: j for j in doc["jobs"]}
    for jid, lo in ((wide, 4), (narrow, 2)):
        info = waiting[jid]
        assert (info["state"], info["nodes_min"], info["nodes_max"]) == ("PENDING", lo, lo), info
        assert info["reason"] == f"needs {lo} nodes, the cluster has 1" and info["note"] == "PartitionNodeLimit"
    table = d.cli("equeue").stdout
    assert "4-4" in table and "(needs 4 nodes, the cluster has 1)" in table and "4-1" not in table, table
    one = d.submit(job("r1", 1))
    assert wait_until(lambda: d.job(one)["state"] == "RUNNING", 30), d.job(one)

    os.kill(d.record.pid, signal.SIGKILL)
    wait_gone(d.record.pid, 30)
    d = restart(4)
    info = d.jobs(wide, narrow)
    assert [(info[j]["reason"], info[j]["note"]) for j in (wide, narrow)] == [(None, "Resources"), (None, "Priority")]
    assert d.cli("ecancel", str(one)).returncode == 0
    assert wait_until(lambda: d.job(wide)["state"] == "RUNNING", 30), d.job(wide)
    assert d.job(wide)["hosts"] == ["node1", "node2", "node3", "node4"]
