"""MPI jobs across the virtual cluster's namespace nodes (deploy/vcluster.sh): mpirun on the
job's first node reaches the others over ssh; the Jacobi example grows from 2 to 4 ranks
(1 -> 2 nodes) and shrinks back, by spawning and by restarting, with the result of a run
without resizes; no rank is left on the released node (checked from outside, by network
namespace). Needs root and the packages, as tests/test_cluster_vcluster.py."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest

from conftest import RunningDaemon, alive, read_pid, stop_daemon, wait_until, write_job
from mpi_support import jacobi_job, job_ranks, mpi_skip_reason
from test_cluster_environment import HOLD, allocation, daemon_in
from test_cluster_vcluster import (  # noqa: F401 - the fixture
    VCluster,
    assert_no_job_process_left,
    cluster_daemon,
    job_processes,
    node_of,
    node_states,
    set_link,
    vcluster,
)

NET = "10.200.0.0/24"


def ranks_by_node(d: RunningDaemon, job_id: int) -> dict[str, list[int]]:
    return job_ranks(job_id, d.state_dir, node_of)


def jacobi(folder: Path, name: str, mode: str, nodes: str, delay: float) -> Path:
    # Two ranks per node, and MPI's own traffic kept on the namespaces' network.
    args = f'["--mca", "btl_tcp_if_include", "{NET}", "--mca", "oob_tcp_if_include", "{NET}"]'
    return jacobi_job(folder, name, mode, nodes, delay, points=4000, iterations=700, time_limit="3",
                      mpi_fields=f"ranks_per_node = 2, mpirun_args = {args}")


@pytest.mark.timeout(170)
def test_jacobi_grows_and_shrinks_across_namespace_nodes_by_spawn_and_by_restart(
    vcluster: VCluster, tmp_path: Path  # noqa: F811
) -> None:
    reason = mpi_skip_reason()
    if reason:
        pytest.skip(reason)
    work = tmp_path / "work"
    work.mkdir()
    d = cluster_daemon(vcluster, tmp_path / "state", "node[1-3]", extra=["--order-deadline", "25"])
    try:
        ref = d.submit(jacobi(work, "ref", "spawn", "1", 0.0))
        d.wait([ref], timeout=60)
        assert d.job(ref)["state"] == "COMPLETED", (work / "ref.out").read_text()
        for mode in ("spawn", "restart"):
            filler = d.submit(write_job(work, "filler", 'name = "filler"\ncommand = ["sleep", "300"]\nnodes = 2\nworking_dir = "."\n'))
            jid = d.submit(jacobi(work, mode, mode, "{ min = 1, max = 2 }", 0.008))
            d.wait_event(jid, "registered", timeout=30)
            first = d.job(jid)["hosts"]
            assert len(first) == 1
            assert d.cli("ecancel", str(filler)).returncode == 0
            d.wait([filler], timeout=30)
            assert d.cli("elasticd", "resize", str(jid), "2").returncode == 0
            d.wait_event(jid, "grown", timeout=40)
            if mode == "restart":  # the restarted run registers again before it takes orders
                d.wait_event(jid, "registered", count=2, timeout=40)
            hosts = d.job(jid)["hosts"]
            spread = wait_until(lambda: {h: len(p) for h, p in ranks_by_node(d, jid).items()} == {h: 2 for h in hosts},  # noqa: B023 - called at once
                                30)
            assert spread, (hosts, ranks_by_node(d, jid))
            assert d.cli("elasticd", "resize", str(jid), "1").returncode == 0
            info = d.wait_event(jid, "shrunk", timeout=40)
            released = [h for h in hosts if h not in info["hosts"]]
            assert released and not ranks_by_node(d, jid).get(released[0]), ranks_by_node(d, jid)
            d.wait([jid], timeout=90)
            out = (work / f"{mode}.out").read_text()
            assert d.job(jid)["state"] == "COMPLETED", out
            assert (work / f"{mode}.bin").read_bytes() == (work / "ref.bin").read_bytes(), out
            assert ranks_by_node(d, jid) == {}
            log = (d.state_dir / "daemon.log").read_text()
            assert f"job {jid}: verified no MPI rank left on {released[0]}" in log
    finally:
        stop_daemon(d.record)


def mpi_args() -> str:
    return f'["--mca", "btl_tcp_if_include", "{NET}", "--mca", "oob_tcp_if_include", "{NET}"]'


@pytest.mark.timeout(150)
def test_mpi_ranks_are_told_the_host_they_run_on_and_mpirun_uses_ssh_not_slurm_in_an_allocation(
    vcluster: VCluster, tmp_path: Path  # noqa: F811
) -> None:
    reason = mpi_skip_reason()
    if reason:
        pytest.skip(reason)
    work = tmp_path / "work"
    work.mkdir()
    state = tmp_path / "state"
    # One file per rank: lines of ranks printing at once interleave in a shared output.
    probe = ("from mpi4py import MPI; import os, socket; e = os.environ; r = MPI.COMM_WORLD.rank; "
             "open(f'rank-{r}', 'w').write(' '.join(map(str, (r, socket.gethostname(), e.get('ELASTIC_HOST'), "
             "e.get('ELASTIC_NODE_INDEX'), len([k for k in e if k.startswith('SLURM_')])))))")
    hello = write_job(work, "hello", f'''
        name = "hello"
        command = ["python3", "-c", "{probe}"]
        nodes = 3
        launcher = "mpi"
        mpi = {{ ranks_per_node = 2, mpirun_args = {mpi_args()} }}
        working_dir = "."
        output = "hello.out"
        time_limit = "2"
    ''')
    env = vcluster.env(ELASTIC_STATE_DIR=str(state))
    with allocation(vcluster, tmp_path, f"elasticd start --launcher ssh --kill-wait 2 && {HOLD}", env,
                    name="mpi-hosts") as salloc:
        d = daemon_in(state, salloc, tmp_path, "mpi-hosts")
        try:
            jid = d.submit(hello)
            d.wait([jid], timeout=60)
            out = (work / "hello.out").read_text()
            assert d.job(jid)["state"] == "COMPLETED", out
            hosts = next(e["hosts"] for e in d.job(jid)["events"] if e["event"] == "started")
            lines = [(work / f"rank-{r}").read_text().split() for r in range(6)]
            for _rank, host, told, index, slurm in lines:
                assert told == host, f"a rank on {host} was told it runs on {told}"
                assert int(index) == hosts.index(host)
                assert slurm == "0", "the allocation's SLURM_* reached a rank: mpirun would use Slurm's launcher"
        finally:
            stop_daemon(d.record)


@pytest.mark.timeout(170)
def test_two_spawn_mode_mpi_jobs_on_disjoint_nodes_of_an_allocation_run_at_once(
    vcluster: VCluster, tmp_path: Path  # noqa: F811
) -> None:
    reason = mpi_skip_reason()
    if reason:
        pytest.skip(reason)
    work = tmp_path / "work"
    work.mkdir()
    state = tmp_path / "state"
    env = vcluster.env(ELASTIC_STATE_DIR=str(state))
    jobs = [jacobi_job(work, f"j{i}", "spawn", "{ min = 1, max = 2, preferred = 1 }", 0.02, points=2000,
                       iterations=600, time_limit="3", mpi_fields=f"ranks_per_node = 1, mpirun_args = {mpi_args()}")
            for i in (1, 2)]
    with allocation(vcluster, tmp_path, f"elasticd start --launcher ssh --kill-wait 2 && {HOLD}", env,
                    name="mpi-two") as salloc:
        d = daemon_in(state, salloc, tmp_path, "mpi-two")
        try:
            a, b = d.submit(jobs[0]), d.submit(jobs[1])
            d.wait_event(a, "registered", timeout=40)
            d.wait_event(b, "registered", timeout=40)
            assert set(d.job(a)["hosts"]).isdisjoint(d.job(b)["hosts"])
            # Both compute at the same moment, each on its own node.
            assert wait_until(lambda: bool(ranks_by_node(d, a)) and bool(ranks_by_node(d, b)), 60), \
                (ranks_by_node(d, a), ranks_by_node(d, b))
            # mpirun reached the nodes over ssh: no Slurm job step holds the allocation's CPUs.
            steps = subprocess.run(["squeue", "-h", "-s", "-o", "%i %j", "-n", "mpi-two"], env=vcluster.env(),
                                   capture_output=True, text=True, timeout=30, check=False)
            assert steps.returncode == 0 and "orted" not in steps.stdout, steps.stdout
            assert set(ranks_by_node(d, a)) == set(d.job(a)["hosts"])
            assert set(ranks_by_node(d, b)) == set(d.job(b)["hosts"])
            d.wait([a, b], timeout=90)
            for j, name in ((a, "j1"), (b, "j2")):
                assert d.job(j)["state"] == "COMPLETED", (work / f"{name}.out").read_text()
            ra, rb = d.job(a), d.job(b)
            assert ra["start_time"] < rb["end_time"] and rb["start_time"] < ra["end_time"], (ra, rb)
        finally:
            stop_daemon(d.record)


def stray_leaving_job(work: Path) -> Path:
    """A rigid MPI job, one rank per node, each leaving a process that setsids and ignores
    SIGTERM (its pid in work/stray-NODE)."""
    stray = f"setsid sh -c 'trap \\\"\\\" TERM; echo $$ > {work}/stray-$(hostname); exec sleep 600' & exec sleep 600"
    return write_job(work, "strays", f'''
        name = "strays"
        command = ["sh", "-c", "{stray}"]
        nodes = 3
        launcher = "mpi"
        mpi = {{ ranks_per_node = 1, mpirun_args = {mpi_args()} }}
        working_dir = "."
        output = "strays.out"
        time_limit = "3"
    ''')


def resume_node3(vc: VCluster) -> None:
    """Slurm took node3 for down too (longer than its SlurmdTimeout): the allocations of the
    tests that follow need it back now, not at its next registration."""
    subprocess.run(["scontrol", "update", "NodeName=node3", "State=RESUME"], env=vc.env(),
                   capture_output=True, timeout=30, check=False)


@pytest.mark.timeout(170)
def test_what_an_mpi_job_left_on_a_node_lost_under_it_is_ended_before_the_node_is_used_again(
    vcluster: VCluster, tmp_path: Path  # noqa: F811
) -> None:
    """A rigid MPI job's rank on node3 leaves a process that setsids and ignores SIGTERM; node3
    drops off the network, the job ends NODE_FAIL, and node3 comes back. The ranks mpirun
    started there carry the run's ELASTIC_MPI_TAG, not the host launcher's ELASTIC_TAG, so
    the sweep of a node reached again never found them and the failed rank scan counted as
    "none left": the process ran on, on a node shown idle. Now node3 stays down until it
    is ended."""
    reason = mpi_skip_reason(need_mpi4py=False)
    if reason:
        pytest.skip(reason)
    work = tmp_path / "work"
    work.mkdir()
    job = stray_leaving_job(work)
    d = cluster_daemon(vcluster, tmp_path / "state", "node[1-3]",
                       extra=["--kill-wait", "2", "--node-timeout", "3", "--node-retry", "1"])
    try:
        jid = d.submit(job)
        pid = read_pid(work / "stray-node3", 60)
        assert node_of(pid) == "node3"
        set_link("node3", False)
        try:
            d.wait([jid], timeout=60)
            assert d.job(jid)["state"] == "NODE_FAIL", d.job(jid)
            # The fault itself: out of reach for longer than the daemon tries to end the
            # run's ranks on its hosts (a node that answers within that time is served).
            time.sleep(40)
            assert alive(pid), "ended while its node was out of reach?"
        finally:
            set_link("node3", True)
        assert wait_until(lambda: node_states(d)["node3"] != "down", 60), node_states(d)
        left = [p for p in job_processes() if p[1] == "node3"]
        assert not alive(pid) and not left, f"node3 is {node_states(d)['node3']} with the job's processes on it: {left}"
        log = (d.state_dir / "daemon.log").read_text()
        assert "ended what MPI run" in log, log[-3000:]
    finally:
        set_link("node3", True)
        stop_daemon(d.record)
        resume_node3(vcluster)
    assert_no_job_process_left()


@pytest.mark.timeout(170)
def test_a_stop_that_cannot_reach_the_node_an_mpi_job_was_lost_on_names_it_and_the_next_start_ends_its_ranks(
    vcluster: VCluster, tmp_path: Path  # noqa: F811
) -> None:
    """The same job lost with node3, then `elasticd stop` while node3 is still out of reach:
    the stop named only nodes where the host launcher's own processes were lost (mpirun's
    node answers), exit 0, and the next start swept node3 by ELASTIC_TAG, which the ranks
    there do not carry: the stray ran on for good. Now the stop names node3 (exit 1) and the
    next start ends what the run left there, found by ELASTIC_MPI_OWNER."""
    reason = mpi_skip_reason(need_mpi4py=False)
    if reason:
        pytest.skip(reason)
    work = tmp_path / "work"
    work.mkdir()
    state = tmp_path / "state"
    loss = ["--kill-wait", "2", "--node-timeout", "3", "--node-retry", "600", "--connect-timeout", "3"]
    d = cluster_daemon(vcluster, state, "node[1-3]", extra=loss)
    try:
        try:
            jid = d.submit(stray_leaving_job(work))
            pid = read_pid(work / "stray-node3", 60)
            set_link("node3", False)
            d.wait([jid], timeout=60)
            assert d.job(jid)["state"] == "NODE_FAIL", d.job(jid)
            r = d.cli("elasticd", "stop")
            assert r.returncode == 1, r.stdout + r.stderr
            assert f"could not reach node3: the processes of job {jid} there may still run" in r.stderr, r.stderr
            assert alive(pid)
        finally:
            set_link("node3", True)
        d = cluster_daemon(vcluster, state, "node[1-3]", extra=loss)
        assert wait_until(lambda: not alive(pid), 30), f"job {jid}'s process on node3 outlived the next start"
        assert node_states(d)["node3"] == "idle", node_states(d)
        assert not [p for p in job_processes() if p[1] == "node3"]
    finally:
        set_link("node3", True)
        stop_daemon(d.record)
        resume_node3(vcluster)
    assert_no_job_process_left()
