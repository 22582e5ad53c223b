"""Cluster mode as a user meets it, on the virtual cluster (deploy/vcluster.sh): a job's
environment is the daemon's decision, not the user's shell's; a daemon killed with -9
leaves no process on a node it then calls idle; a state directory is its allocation's.
Needs root and the packages, as tests/test_cluster_vcluster.py."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from conftest import BIN, RunningDaemon, stop_daemon, wait_gone, wait_until, write_job
from elasticd.errors import DaemonError
from elasticd.statedir import read_record
from test_cluster_vcluster import (  # noqa: F401 - the fixture
    NODES,
    VCluster,
    alive,
    assert_no_job_process_left,
    cluster_daemon,
    job_processes,
    node_of,
    node_states,
    pid_file,
    rigid_job,
    status_dir,
    vcluster,
)


@contextlib.contextmanager
def allocation(vc: VCluster, tmp_path: Path, script: str, env: dict[str, str], name: str = "elastic-env",
               nodes: int = 3) -> Iterator[subprocess.Popen[bytes]]:
    """`salloc -N nodes sh -c script` in the background; the allocation ends with the script."""
    log = open(tmp_path / f"{name}.log", "w")  # noqa: SIM115 - closed once salloc has exited
    salloc = subprocess.Popen(["salloc", f"-N{nodes}", "-t", "5", "-J", name, "sh", "-c", script], env=env,
                              stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        yield salloc
    finally:
        try:
            salloc.wait(timeout=40)
        except subprocess.TimeoutExpired:
            # A failed test left the script waiting (a daemon to restart, say). salloc runs the
            # script in a process group of its own: both groups are ended, by force if
            # SIGTERM is not enough (one such salloc outlived its test by an hour).
            groups = {salloc.pid}
            with contextlib.suppress(psutil.Error, ProcessLookupError):
                groups |= {os.getpgid(k.pid) for k in psutil.Process(salloc.pid).children(recursive=True)}
            for sig in (signal.SIGTERM, signal.SIGKILL):
                for g in groups:
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(g, sig)
                try:
                    salloc.wait(timeout=30)
                    break
                except subprocess.TimeoutExpired:
                    continue
        log.close()


def daemon_in(state: Path, salloc: subprocess.Popen[bytes], tmp_path: Path, name: str) -> RunningDaemon:
    assert wait_until(lambda: read_record(state) is not None or salloc.poll() is not None, 60), \
        "the daemon did not start inside the allocation"
    rec = read_record(state)
    assert rec is not None, (tmp_path / f"{name}.log").read_text()
    return RunningDaemon(state, rec, len(NODES))


def is_running(d: RunningDaemon, job_id: int) -> bool:
    try:
        return d.job(job_id)["state"] == "RUNNING"
    except DaemonError:  # not submitted yet
        return False


HOLD = "while elasticd status >/dev/null 2>&1; do sleep 0.3; done"


def restartable(start: str, tmp_path: Path) -> str:
    """A salloc script: START, then once the test killed that daemon (kill_and_restart)
    START again in the same allocation, held until the second daemon is stopped."""
    return f"{start} && while [ ! -e {tmp_path}/restart ]; do sleep 0.2; done && {start} && {HOLD}"


def kill_9(d: RunningDaemon) -> None:
    """The daemon killed as the OOM killer or an operator would: no stop, no cleanup."""
    os.kill(d.record.pid, signal.SIGKILL)
    wait_gone(d.record.pid, 30)


def kill_and_restart(d: RunningDaemon, salloc: subprocess.Popen[bytes], tmp_path: Path, name: str) -> RunningDaemon:
    """kill -9 the daemon of a `restartable` allocation; the one started after it."""
    first = d.record.pid
    kill_9(d)
    (tmp_path / "restart").touch()
    assert wait_until(lambda: (rec := read_record(d.state_dir)) is not None and rec.pid != first, 60), \
        "the daemon was not started again"
    return daemon_in(d.state_dir, salloc, tmp_path, name)


@pytest.mark.timeout(150)
def test_jobs_run_the_daemons_python_whatever_the_shell_put_first_and_see_no_slurm_variables(
    vcluster: VCluster, tmp_path: Path  # noqa: F811
) -> None:
    # The user's shell (a .bashrc, a `module load python`) puts another python3 first.
    other = tmp_path / "other-python"
    other.mkdir()
    (other / "python3").write_text("#!/bin/sh\necho 'the wrong python3' >&2\nexit 3\n")
    (other / "python3").chmod(0o755)
    state = tmp_path / "state"
    work = tmp_path / "work"
    work.mkdir()
    env = vcluster.env(ELASTIC_STATE_DIR=str(state))
    env["PATH"] = f"{other}{os.pathsep}{env['PATH']}"
    probe = ("import os, socket, sys, elastic_apps; "
             "print(socket.gethostname(), sys.executable, "
             "sorted(k for k in os.environ if k.startswith('SLURM_')), os.environ.get('MY_SETTING'))")
    job = write_job(work, "which", f'''
        name = "which"
        command = ["python3", "-c", "{probe}"]
        nodes = 2
        working_dir = "."
        output = "which-%N.out"
        env = {{ MY_SETTING = "kept" }}
        time_limit = "2"
    ''')
    chosen = write_job(work, "chosen", f'''
        name = "chosen"
        command = ["python3", "-c", "import sys; print(sys.executable)"]
        nodes = 1
        python = "{sys.base_prefix}/bin/python3"
        working_dir = "."
        output = "chosen.out"
        time_limit = "2"
    ''')
    d = None
    with allocation(vcluster, tmp_path, f"elasticd start --launcher ssh --kill-wait 2 && {HOLD}", env) as salloc:
        try:
            d = daemon_in(state, salloc, tmp_path, "elastic-env")
            first, second = d.submit(job), d.submit(chosen)
            d.wait([first, second], timeout=40)
            info = d.job(first)
            assert info["state"] == "COMPLETED", (info, [p.read_text() for p in work.glob("which-*")])
            for host in info["hosts"]:
                name, exe, slurm, setting = (work / f"which-{host}.out").read_text().split(maxsplit=3)
                assert name == host
                assert Path(exe).parent == BIN  # the daemon's virtualenv, not the shell's first python3
                assert slurm == "[]", f"the daemon's SLURM_* leaked into the job: {slurm}"
                assert setting.strip() == "'kept'"
            assert d.job(second)["state"] == "COMPLETED"
            assert Path((work / "chosen.out").read_text().strip()).parent == Path(sys.base_prefix) / "bin"
        finally:
            if d is not None:
                stop_daemon(d.record)
    assert salloc.returncode == 0, (tmp_path / "elastic-env.log").read_text()


@pytest.mark.timeout(150)
def test_after_kill_9_and_a_lost_journal_no_process_is_left_on_a_node_called_idle(
    vcluster: VCluster, tmp_path: Path  # noqa: F811
) -> None:
    # (With its journal, a restarted daemon takes its jobs over: tests/test_cluster_readopt.py.)
    work = tmp_path / "work"
    work.mkdir()
    state = tmp_path / "state"
    d = cluster_daemon(vcluster, state, "node[1-3]")
    try:
        rigid = d.submit(rigid_job(work, 2))
        assert wait_until(lambda: d.job(rigid)["state"] == "RUNNING", 60)
        hosts = d.job(rigid)["hosts"]
        pids = {h: pid_file(work, f"pid-rigid-{h}") for h in hosts}
        assert all(node_of(pid) == h for h, pid in pids.items())
        kill_9(d)
        assert all(alive(pid) for pid in pids.values())
        # An operator's cleanup: nothing in the state directory says the job ran.
        for name in ("journal.db", "events.jsonl"):
            (state / name).unlink()
        shutil.rmtree(state / "jobs")

        d = cluster_daemon(vcluster, state, "node[1-3]")
        # By the time the restarted daemon answers, its nodes are clean: no wait here.
        assert not any(alive(pid) for pid in pids.values()), "a process of the lost job still runs"
        assert [p for p in job_processes() if p[1] in hosts] == []
        assert node_states(d) == {n: "idle" for n in NODES}
        log = (state / "daemon.log").read_text()
        assert f"ended the processes of lost jobs {{{rigid}: 1}}" in log

        # The next job is placed on clean nodes and runs.
        again = d.submit(rigid_job(work, 3, name="again"))
        assert wait_until(lambda: d.job(again)["state"] == "RUNNING", 60)
        assert d.cli("ecancel", str(again)).returncode == 0
        d.wait([again], timeout=30)
    finally:
        stop_daemon(d.record)
    assert_no_job_process_left()


@pytest.mark.timeout(170)
def test_a_state_directory_of_another_allocation_is_never_recovered(
    vcluster: VCluster, tmp_path: Path  # noqa: F811
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    state = tmp_path / "state"
    home = tmp_path / "home"
    home.mkdir()
    env = vcluster.env(ELASTIC_STATE_DIR=str(state))
    job = rigid_job(work, 1)
    # A daemon in a first allocation runs a job and dies with it (kill -9: its journal says RUNNING).
    script = f"elasticd start --launcher ssh --kill-wait 1 && {BIN}/esubmit {job} && {HOLD}"
    with allocation(vcluster, tmp_path, script, env, name="first") as salloc:
        d = daemon_in(state, salloc, tmp_path, "first")
        assert wait_until(lambda: is_running(d, 1), 30)
        recorded = json.loads((state / "allocation.json").read_text())
        assert recorded["cluster"] == "elasticvc" and recorded["start_time"]
        os.kill(d.record.pid, signal.SIGKILL)
    for pid, _, _ in job_processes():  # the first allocation's job, whoever ends it
        with contextlib.suppress(ProcessLookupError):
            os.killpg(os.getpgid(pid), signal.SIGKILL)

    # Another allocation given that directory refuses it, naming whose it is.
    script = "elasticd start --launcher ssh; echo exit=$?"
    with allocation(vcluster, tmp_path, script, env, name="second", nodes=1) as salloc:
        pass
    out = (tmp_path / "second.log").read_text()
    assert "exit=1" in out and f"belongs to Slurm job {recorded['job_id']} on cluster elasticvc" in out, out

    # The default directory of a later allocation that got the same job id (ids restart when
    # a cluster's state is reset): set aside, and the daemon starts afresh.
    env = vcluster.env(HOME=str(home))
    env.pop("ELASTIC_STATE_DIR", None)
    script = (f"mkdir -p {home}/.elastic && cp -a {state} {home}/.elastic/slurm-$SLURM_JOB_ID && "
              f"elasticd start --launcher ssh && {BIN}/equeue -a; elasticd stop")
    with allocation(vcluster, tmp_path, script, env, name="third", nodes=1) as salloc:
        pass
    out = (tmp_path / "third.log").read_text()
    assert salloc.returncode == 0, out
    assert "belonged to another Slurm allocation; kept as" in out, out
    assert "rigid" not in out.split("elasticd started", 1)[1], f"the old job was recovered: {out}"
    kept = [p for p in (home / ".elastic").iterdir() if ".other-elasticvc-" in p.name]
    assert len(kept) == 1 and (kept[0] / "allocation.json").exists(), kept
    shutil.rmtree(home, ignore_errors=True)
    assert_no_job_process_left()
    # The first daemon died (kill -9) under its job, which this test then killed: the job's
    # record on its node waits for a restart on that state directory, which this test never
    # makes (it belongs to another allocation). The records are this test's to remove (every
    # run left one on the virtual cluster).
    shutil.rmtree(status_dir(state), ignore_errors=True)
