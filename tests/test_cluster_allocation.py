"""The daemon's own Slurm allocation shrinks (`--release-idle`) and grows (`--grow-allocation`)
on the virtual cluster, and Slurm agrees: `scontrol show job` / `squeue` are asked, not the
daemon. Needs root and the packages, as tests/test_cluster_vcluster.py."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest

from conftest import RunningDaemon, stop_daemon, wait_until, write_job
from test_cluster_environment import HOLD, allocation, daemon_in, kill_and_restart, restartable
from test_cluster_vcluster import (  # noqa: F401 - the fixture
    VCluster,
    assert_no_job_process_left,
    first_line,
    recorder_job,
    vcluster,
)


def slurm(env: dict[str, str], *argv: str) -> str:
    return subprocess.run(list(argv), env=env, capture_output=True, text=True, timeout=30, check=True).stdout


def slurm_nodes(env: dict[str, str], job: str) -> list[str]:
    """The job's nodes as Slurm has them."""
    m = re.search(r"(?:^|\s)NodeList=(\S+)", slurm(env, "scontrol", "show", "job", "-o", job))
    assert m is not None
    return slurm(env, "scontrol", "show", "hostnames", m.group(1)).split()


def status(d: RunningDaemon) -> dict:
    r = d.cli("elasticd", "status", "--json")
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def main_job(d: RunningDaemon) -> str:
    return str(status(d)["allocation"]["slurm_job"])


def sleeper(folder: Path, name: str, nodes: int) -> Path:
    return write_job(folder, name, f'''
        name = "{name}"
        command = ["sh", "-c", "hostname; while [ ! -e go-{name} ]; do sleep 0.1; done"]
        nodes = {nodes}
        working_dir = "."
        output = "{name}-%N.out"
        time_limit = "3"
    ''')


@pytest.mark.timeout(170)
def test_release_idle_gives_idle_nodes_back_to_slurm_and_never_the_first(
    vcluster: VCluster, tmp_path: Path  # noqa: F811
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    state = tmp_path / "state"
    env = vcluster.env(ELASTIC_STATE_DIR=str(state))
    # Started, killed with -9 by the test once the allocation shrank, started again.
    script = restartable("elasticd start --launcher ssh --kill-wait 1 --release-idle 3", tmp_path)
    with allocation(vcluster, tmp_path, script, env, name="shrink") as salloc:
        d = daemon_in(state, salloc, tmp_path, "shrink")
        try:
            job = main_job(d)
            # Three nodes at the start (checked in the accounting at the end: on a loaded
            # machine, 3 s idle may pass before this line, and two may be back with Slurm).
            assert slurm_nodes(env, job) in (["node1", "node2", "node3"], ["node1"])
            one = d.submit(sleeper(work, "one", 1))
            assert wait_until(lambda: d.job(one)["state"] == "RUNNING", 60)
            assert d.job(one)["hosts"] == ["node1"]
            # The nodes no job uses go back to Slurm (in one update); the first node stays.
            assert wait_until(lambda: slurm_nodes(env, job) == ["node1"], 60), slurm_nodes(env, job)
            assert slurm(env, "squeue", "-h", "-j", job, "-o", "%D %N").split() == ["1", "node1"]
            idle = slurm(env, "scontrol", "show", "hostnames",
                         slurm(env, "sinfo", "-h", "-t", "idle", "-o", "%N").strip()).split()
            assert {"node2", "node3"} <= set(idle)
            assert [n["name"] for n in status(d)["nodes"]] == ["node1"]
            assert wait_until(lambda: status(d)["allocation"]["node_seconds"]["given_back"] > 0, 30)
            assert status(d)["allocation"]["node_seconds"]["released_nodes"] == 2
            # A daemon restarted after kill -9 manages what Slurm holds now, not the
            # allocation's first node list (SLURM_JOB_NODELIST), and the job runs on.
            d = kill_and_restart(d, salloc, tmp_path, "shrink")
            assert [n["name"] for n in status(d)["nodes"]] == ["node1"]
            assert d.job(one)["state"] == "RUNNING"
            (work / "go-one").touch()
            d.wait([one], timeout=30)
            assert d.job(one)["state"] == "COMPLETED"
            # The node left still runs jobs; a job wider than what is left waits (no growth asked).
            again = d.submit(sleeper(work, "again", 1))
            assert wait_until(lambda: d.job(again)["state"] == "RUNNING", 60)
            (work / "go-again").touch()
            d.wait([again], timeout=30)
            alloc = status(d)["allocation"]  # this run's: one node, busy most of the time
            assert alloc["node_seconds"]["held"] >= alloc["node_seconds"]["used"] > 0
            text = d.cli("elasticd", "status").stdout
            assert "given back" in text and f"Slurm job {job}" in text
            assert slurm_nodes(env, job) == ["node1"]
        finally:
            stop_daemon(d.record)
    assert_no_job_process_left()
    # The accounting from the event log agrees with what the daemon said.
    r = d.cli("eacct", str(state), "--allocation", "--json")
    assert r.returncode == 0, r.stderr
    first_run, second_run = json.loads(r.stdout)["allocation"]
    assert (first_run["nodes_at_start"], first_run["released"], first_run["added"]) == (3, 2, 0)
    assert (second_run["nodes_at_start"], second_run["released"]) == (1, 0)
    ns = first_run["node_seconds"]  # up to its last event: the run was killed
    assert ns["held"] > ns["used"] > 0
    assert abs(ns["held"] + ns["given_back"] - 3 * (first_run["end"] - first_run["start"])) < 1.0


@pytest.mark.timeout(200)
def test_grow_allocation_adds_a_companion_allocations_node_runs_a_job_there_and_gives_it_back(
    vcluster: VCluster, tmp_path: Path  # noqa: F811
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    state = tmp_path / "state"
    env = vcluster.env(ELASTIC_STATE_DIR=str(state))
    # One sbatch option, given as users write it (the value starts with --).
    script = (f"elasticd start --launcher ssh --kill-wait 1 --grow-allocation 2 --release-idle 2 "
              f"--sbatch-args=--comment=elastic-test && {HOLD}")
    with allocation(vcluster, tmp_path, script, env, name="grow", nodes=1) as salloc:
        d = daemon_in(state, salloc, tmp_path, "grow")
        try:
            job = main_job(d)
            assert slurm_nodes(env, job) == ["node1"]
            wide = d.submit(sleeper(work, "wide", 2))
            # A companion allocation is asked for, Slurm starts it, its node joins, the job runs.
            assert wait_until(lambda: d.job(wide)["state"] == "RUNNING", 60), status(d)["allocation"]
            hosts = d.job(wide)["hosts"]
            assert hosts[0] == "node1" and len(hosts) == 2
            new = hosts[1]
            companions = status(d)["allocation"]["companions"]
            assert len(companions) == 1 and companions[0]["hosts"] == [new]
            cid = companions[0]["slurm_id"]
            assert slurm(env, "squeue", "-h", "-j", cid, "-o", "%j|%T|%N|%k").strip() == \
                f"elastic-grow-{job}|RUNNING|{new}|elastic-test"
            assert first_line(work / f"wide-{new}.out") == new  # the process ran on the new node
            (work / "go-wide").touch()
            d.wait([wide], timeout=30)
            assert d.job(wide)["state"] == "COMPLETED"
            # Idle, nothing pending: the companion is given back (scancel); the first node stays.
            assert wait_until(lambda: slurm(env, "squeue", "-h", "-t", "running", "-j", cid, "-o", "%T").strip() == "",
                              30)
            assert wait_until(lambda: [n["name"] for n in status(d)["nodes"]] == ["node1"], 30)
            alloc = status(d)["allocation"]
            assert alloc["companions"] == [] and alloc["node_seconds"]["released_nodes"] == 1
            assert slurm_nodes(env, job) == ["node1"]
        finally:
            stop_daemon(d.record)
    assert_no_job_process_left()
    # The history replays with the 2-node job the grown allocation took, and accounts for it.
    r = d.cli("eacct", str(state), "--allocation", "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert [(j["job_id"], j["state"], j["max_nodes"]) for j in doc["jobs"]] == [(wide, "COMPLETED", 2)]
    (run,) = doc["allocation"]
    assert (run["nodes_at_start"], run["added"], run["released"]) == (1, 1, 1)


# --release-idle of the shrink test. Node2 and node3 are idle from the daemon's start until the
# malleable job grows onto them, and go back to Slurm once idle this long: the job must be
# submitted, launched over ssh, registered and grown before then (~3 s after the daemon's
# start unloaded; with 3 s, a loaded machine gave the nodes back first). The job is also
# shrunk this long after its grow.
SHRINK_RELEASE_IDLE = 10.0


@pytest.mark.timeout(170)
def test_release_policy_shrink_takes_lent_nodes_back_from_a_malleable_job_and_gives_them_to_slurm(
    vcluster: VCluster, tmp_path: Path  # noqa: F811
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    state = tmp_path / "state"
    env = vcluster.env(ELASTIC_STATE_DIR=str(state))
    # minAgree lends every idle node to the malleable job: no node is ever idle while it runs.
    script = (f"elasticd start --launcher ssh --kill-wait 1 --policy malleable "
              f"--release-idle {SHRINK_RELEASE_IDLE:g} --release-policy shrink && {HOLD}")
    with allocation(vcluster, tmp_path, script, env, name="shrinkjob") as salloc:
        d = daemon_in(state, salloc, tmp_path, "shrinkjob")
        try:
            mall = d.submit(recorder_job(work, "{ min = 1, max = 3, preferred = 1 }"))  # first: the idle clock runs
            job = main_job(d)
            d.wait_event(mall, "grown", timeout=30)
            # Held above its preferred size that long: shrunk to it, and the nodes leave.
            info = d.wait_event(mall, "shrunk", timeout=40)
            grown = next(e for e in info["events"] if e["event"] == "grown")
            shrunk = next(e for e in info["events"] if e["event"] == "shrunk")
            assert len(grown["hosts"]) == 3, info["events"]
            assert shrunk["time"] - grown["time"] >= SHRINK_RELEASE_IDLE - 0.01, info["events"]
            assert len(info["hosts"]) == 1
            assert wait_until(lambda: slurm_nodes(env, job) == info["hosts"], 60), slurm_nodes(env, job)
            assert [n["name"] for n in status(d)["nodes"]] == info["hosts"] == ["node1"]
            assert d.job(mall)["state"] == "RUNNING"
            assert "grown" not in [e["event"] for e in d.job(mall)["events"]][-1:]
            (work / "finish").touch()
            d.wait([mall], timeout=40)
            assert d.job(mall)["state"] == "COMPLETED"
            assert status(d)["allocation"]["node_seconds"]["released_nodes"] == 2
        finally:
            stop_daemon(d.record)
    assert_no_job_process_left()


@pytest.mark.timeout(150)
def test_a_companion_allocation_ended_by_slurm_under_a_job_is_a_node_failure_for_it(
    vcluster: VCluster, tmp_path: Path  # noqa: F811
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    state = tmp_path / "state"
    env = vcluster.env(ELASTIC_STATE_DIR=str(state))
    script = f"elasticd start --launcher ssh --kill-wait 1 --grow-allocation 2 --release-idle 2 && {HOLD}"
    with allocation(vcluster, tmp_path, script, env, name="lostcompanion", nodes=1) as salloc:
        d = daemon_in(state, salloc, tmp_path, "lostcompanion")
        try:
            wide = d.submit(sleeper(work, "wide", 2))
            assert wait_until(lambda: d.job(wide)["state"] == "RUNNING", 60), status(d)["allocation"]
            (companion,) = status(d)["allocation"]["companions"]
            slurm(env, "scancel", companion["slurm_id"])  # an administrator, or its time limit
            assert wait_until(lambda: d.job(wide)["state"] == "NODE_FAIL", 30), d.job(wide)
            assert wait_until(lambda: [n["name"] for n in status(d)["nodes"]] == ["node1"], 30), status(d)
            assert status(d)["allocation"]["companions"] == []
        finally:
            stop_daemon(d.record)
    assert_no_job_process_left()
