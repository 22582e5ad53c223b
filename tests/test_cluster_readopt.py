"""A daemon killed with -9 in cluster mode loses no job: restarted on its state directory it
takes over the processes its SSH and srun launchers started (rigid, malleable and MPI), from
the monitors' records on each node and from Slurm's step list, and every job ends exactly
once with its true exit status. Needs root and the packages, as tests/test_cluster_vcluster.py."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import BIN, stop_daemon, wait_until, write_job
from mpi_support import jacobi_job, mpi_skip_reason
from test_cluster_environment import allocation, daemon_in, kill_9, kill_and_restart, restartable
from test_cluster_vcluster import (  # noqa: F401 - the fixture
    RECORDER,
    VCluster,
    alive,
    assert_no_job_process_left,
    cluster_daemon,
    job_processes,
    node_of,
    node_states,
    pid_file,
    records,
    set_link,
    status_dir,
    vcluster,
)

NET = "10.200.0.0/24"


def waiting_job(folder: Path, name: str, code: int) -> Path:
    """Runs until the file `go-NAME` appears, then exits CODE."""
    return write_job(folder, name, f'''
        name = "{name}"
        command = ["sh", "-c", "echo $$ > pid-{name}-$ELASTIC_HOST; while [ ! -e go-{name} ]; do sleep 0.1; done; exit {code}"]
        nodes = 1
        working_dir = "."
        output = "{name}-%N.out"
        time_limit = "3"
    ''')


def malleable_job(folder: Path) -> Path:
    return write_job(folder, "mall", f'''
        name = "mall"
        command = ["{sys.executable}", "{RECORDER}"]
        nodes = {{ min = 1, max = 2, preferred = 1 }}
        kind = "malleable"
        working_dir = "."
        output = "mall-%N.out"
        time_limit = "3"
    ''')


def ended_once(state: Path) -> dict[int, int]:
    """How many times each job ended, by the daemon's event log (every start appended)."""
    counts: dict[int, int] = {}
    for line in (state / "events.jsonl").read_text().splitlines():
        rec = json.loads(line)
        e = rec.get("event") or {}
        if e.get("type") in ("Exited", "JobLost"):
            counts[e["job_id"]] = counts.get(e["job_id"], 0) + 1
    return counts


@pytest.mark.timeout(200)
def test_after_kill_9_ssh_jobs_rigid_malleable_and_mpi_are_taken_over_and_end_once_with_their_status(
    vcluster: VCluster, tmp_path: Path  # noqa: F811
) -> None:
    reason = mpi_skip_reason()
    if reason:
        pytest.skip(reason)
    work = tmp_path / "work"
    work.mkdir()
    state = tmp_path / "state"
    d = cluster_daemon(vcluster, state, "node[1-3]", extra=["--order-deadline", "20"])
    try:
        rigid = d.submit(waiting_job(work, "rigid", 7))
        args = f'["--mca", "btl_tcp_if_include", "{NET}", "--mca", "oob_tcp_if_include", "{NET}"]'
        # 500 x 30 ms: it must still run when the daemon comes back (~3 s after its start here,
        # 10 under load); the test waits for its end after everything else.
        mpi = d.submit(jacobi_job(work, "mpi", "spawn", "1", 0.03, points=2000, iterations=500, time_limit="3",
                                  mpi_fields=f"ranks_per_node = 2, mpirun_args = {args}"))
        assert wait_until(lambda: d.job(mpi)["state"] == "RUNNING" and d.job(rigid)["state"] == "RUNNING", 60)
        mall = d.submit(malleable_job(work))  # the one node left
        d.wait_event(mall, "registered", timeout=30)
        rigid_host = d.job(rigid)["hosts"][0]
        rigid_pid = pid_file(work, f"pid-rigid-{rigid_host}")
        mall_host = d.job(mall)["hosts"][0]
        leader = pid_file(work, f"pid-{mall_host}")
        assert node_of(rigid_pid) == rigid_host and node_of(leader) == mall_host

        kill_9(d)
        d = cluster_daemon(vcluster, state, "node[1-3]", extra=["--order-deadline", "20"])
        log = (state / "daemon.log").read_text()
        for jid in (rigid, mall, mpi):
            assert f"job {jid}: found again on" in log, log[-3000:]
            assert d.job(jid)["state"] == "RUNNING"
        assert alive(rigid_pid) and alive(leader), "a process of a taken-over job was ended"

        # The rigid job's own exit status, not a guess.
        (work / "go-rigid").touch()
        d.wait([rigid], timeout=30)
        info = d.job(rigid)
        assert (info["state"], info["exit_code"]) == ("FAILED", 7), info
        # The malleable job's application reconnected (resume) and takes orders again.
        d.wait_event(mall, "registered", count=2, timeout=30)
        assert d.cli("elasticd", "resize", str(mall), "2").returncode == 0
        grown = d.wait_event(mall, "grown", timeout=40)
        assert len(grown["hosts"]) == 2
        (work / "finish").touch()
        d.wait([mall, mpi], timeout=120)
        assert d.job(mall)["state"] == "COMPLETED", (work / f"mall-{mall_host}.out").read_text()
        assert d.job(mpi)["state"] == "COMPLETED", (work / "mpi.out").read_text()
        assert ended_once(state) == {rigid: 1, mall: 1, mpi: 1}
    finally:
        stop_daemon(d.record)
    assert_no_job_process_left()
    # The records the restart took the jobs over by, read back at their ends: none is left.
    assert not status_dir(state).exists(), sorted(map(str, status_dir(state).rglob("*")))


@pytest.mark.timeout(150)
def test_a_node_unreachable_when_the_daemon_restarts_is_a_node_failure_and_is_swept_when_it_returns(
    vcluster: VCluster, tmp_path: Path  # noqa: F811
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    state = tmp_path / "state"
    opts = ["--connect-timeout", "2", "--node-retry", "1", "--node-timeout", "4"]
    d = cluster_daemon(vcluster, state, "node[1-3]", extra=opts)
    try:
        ids = [d.submit(waiting_job(work, f"r{i}", 0)) for i in range(3)]
        assert wait_until(lambda: all(d.job(j)["state"] == "RUNNING" for j in ids), 60)
        by_host = {d.job(j)["hosts"][0]: j for j in ids}
        lost_job = by_host["node3"]
        name = f"r{ids.index(lost_job)}"
        lost_pid = pid_file(work, f"pid-{name}-node3")
        kill_9(d)
        set_link("node3", False)
        try:
            d = cluster_daemon(vcluster, state, "node[1-3]", extra=opts)
            # The job on the node that cannot be reached fails with it; the others are taken over.
            assert d.job(lost_job)["state"] == "NODE_FAIL", d.job(lost_job)
            assert all(d.job(j)["state"] == "RUNNING" for j in ids if j != lost_job)
            assert alive(lost_pid)  # out of reach: nothing could end it yet
        finally:
            set_link("node3", True)
        # Back: what the lost job left there is ended before the node takes work again.
        assert wait_until(lambda: not alive(lost_pid), 30), "the lost job's process survived its node's return"
        assert wait_until(lambda: node_states(d)["node3"] == "idle", 30)
        # Its record there goes with it (the job's end is settled: NODE_FAIL), not only at a stop.
        assert records(state, "node3", lost_job) == []
        for j in ids:
            (work / f"go-{'r' + str(ids.index(j))}").touch()
        d.wait([j for j in ids if j != lost_job], timeout=30)
        assert all(d.job(j)["state"] == "COMPLETED" for j in ids if j != lost_job)
        assert ended_once(state) == dict.fromkeys(ids, 1)
    finally:
        stop_daemon(d.record)
    assert_no_job_process_left()
    assert not status_dir(state).exists(), sorted(map(str, status_dir(state).rglob("*")))


@pytest.mark.timeout(200)
def test_after_kill_9_srun_steps_are_taken_over_and_end_once_with_their_status(
    vcluster: VCluster, tmp_path: Path  # noqa: F811
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    state = tmp_path / "state"
    env = vcluster.env(ELASTIC_STATE_DIR=str(state))
    script = restartable("elasticd start --launcher srun --kill-wait 2 --order-deadline 20", tmp_path)
    with allocation(vcluster, tmp_path, script, env, name="srun-readopt") as salloc:
        d = daemon_in(state, salloc, tmp_path, "srun-readopt")
        try:
            rigid = d.submit(waiting_job(work, "rigid", 5))
            other = d.submit(waiting_job(work, "other", 0))
            assert wait_until(lambda: d.job(rigid)["state"] == "RUNNING" == d.job(other)["state"], 60)
            mall = d.submit(malleable_job(work))  # the one node left
            d.wait_event(mall, "registered", timeout=40)
            rigid_pid = pid_file(work, f"pid-rigid-{d.job(rigid)['hosts'][0]}")
            mall_host = d.job(mall)["hosts"][0]
            leader = pid_file(work, f"pid-{mall_host}")
            d = kill_and_restart(d, salloc, tmp_path, "srun-readopt")
            log = (state / "daemon.log").read_text()
            assert f"job {rigid}: found again on" in log and f"job {mall}: found again on" in log, log[-3000:]
            assert alive(rigid_pid) and alive(leader)
            d.wait_event(mall, "registered", count=2, timeout=30)

            (work / "go-rigid").touch()
            (work / "go-other").touch()
            d.wait([rigid, other], timeout=30)
            info = d.job(rigid)
            assert (info["state"], info["exit_code"]) == ("FAILED", 5), info
            assert d.job(other)["state"] == "COMPLETED"
            assert d.cli("elasticd", "resize", str(mall), "2").returncode == 0
            assert len(d.wait_event(mall, "grown", timeout=40)["hosts"]) == 2
            (work / "finish").touch()
            d.wait([mall], timeout=60)
            assert d.job(mall)["state"] == "COMPLETED", (work / f"mall-{mall_host}.out").read_text()
            assert ended_once(state) == {rigid: 1, other: 1, mall: 1}
            steps = subprocess.run(["squeue", "-h", "-s", "-o", "%j"], env=env, capture_output=True, text=True,
                                   timeout=30, check=True)
            assert "elastic." not in steps.stdout, steps.stdout
        finally:
            stop_daemon(d.record)
    assert_no_job_process_left()



__all__ = ["BIN", "job_processes"]
