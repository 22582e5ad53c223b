"""Ending a job is one SIGTERM to each of its processes, then SIGKILL after the kill-wait
(README: Containment). A second SIGTERM is, for many applications, "quit now": one that
checkpoints on SIGTERM would give up its checkpoint. Each path that ends processes in local
mode -- a cancel, a time limit, a stop, a shrink -- is run with a job whose every process
writes a line per SIGTERM it gets and runs on a while after the first one
(tests/apps/sigterm_counter.py); each must have written exactly one. The SSH launcher's
node agent is checked on the virtual cluster (tests/test_cluster_vcluster.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import RunningDaemon, alive, start_daemon, wait_until
from mpi_support import mpi_skip_reason
from sigterm_support import assert_one_sigterm_each, counter_job, lines, started

pytestmark = pytest.mark.timeout(120)


def start(daemons: list[RunningDaemon], state_dir: Path, **kw: object) -> RunningDaemon:
    d = start_daemon(state_dir, **kw)  # type: ignore[arg-type]
    daemons.append(d)
    return d


@pytest.mark.parametrize("mode", ["cgroup", "sweep"])
def test_a_cancelled_job_gets_one_sigterm_per_process_also_detached_ones(
        tmp_path: Path, daemons: list[RunningDaemon], mode: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Its process group, its cgroup (or tag) and the wrapper all reach the same processes:
    each is signalled once all the same."""
    if mode == "sweep":
        monkeypatch.setenv("ELASTIC_NO_CGROUP", "1")
    d = start(daemons, tmp_path / "state", nodes=2, kill_wait=10.0)
    # The first process ends soon after its SIGTERM, its children later: the job's own end
    # then finds them still there, and must not signal them again.
    jid = d.submit(counter_job(tmp_path, "2", env={"DETACH": "1", "LINGER": "0.2", "CHILD_LINGER": "2"}))
    pids = started(tmp_path, 6)  # per host: the command, its child, its detached child
    assert d.cli("ecancel", str(jid)).returncode == 0
    d.wait([jid], timeout=30)
    info = d.job(jid)
    assert info["state"] == "CANCELLED", info
    assert info["exit"] == "0:0", info  # each ended by itself after its SIGTERM: no SIGKILL
    assert_one_sigterm_each(tmp_path, pids)


def test_a_job_past_its_time_limit_gets_one_sigterm_per_process(tmp_path: Path, daemons: list[RunningDaemon]) -> None:
    d = start(daemons, tmp_path / "state", nodes=1, kill_wait=10.0)
    jid = d.submit(counter_job(tmp_path, "1", time_limit="0:03"))
    pids = started(tmp_path, 2)
    d.wait([jid], timeout=30)
    assert d.job(jid)["state"] == "TIMEOUT", d.job(jid)
    assert_one_sigterm_each(tmp_path, pids)


def test_elasticd_stop_gives_each_process_of_a_running_job_one_sigterm(
        tmp_path: Path, daemons: list[RunningDaemon]) -> None:
    d = start(daemons, tmp_path / "state", nodes=2, kill_wait=10.0)
    d.submit(counter_job(tmp_path, "2"))
    pids = started(tmp_path, 4)
    r = d.cli("elasticd", "stop")
    assert r.returncode == 0, r.stderr
    assert wait_until(lambda: len(lines(tmp_path, "terms")) >= len(pids), 30)
    assert_one_sigterm_each(tmp_path, pids)


def test_a_shrink_gives_the_released_hosts_processes_one_sigterm_and_the_others_none(
        tmp_path: Path, daemons: list[RunningDaemon]) -> None:
    d = start(daemons, tmp_path / "state", nodes=2, kill_wait=10.0, policy="malleable")
    jid = d.submit(counter_job(tmp_path, "{ min = 1, max = 2 }", kind="malleable", env={"REGISTER": "1"}))
    pids = started(tmp_path, 4)
    assert wait_until(lambda: (tmp_path / "registered").exists(), 30)
    hosts = sorted(set(pids.values()))
    r = d.cli("elasticd", "resize", str(jid), "1", "--hold")
    assert r.returncode == 0, r.stdout + r.stderr
    released = {pid: h for pid, h in pids.items() if h == hosts[1]}
    # The released host's processes run out their linger and exit by themselves.
    assert wait_until(lambda: not any(alive(p) for p in released), 30), released
    assert_one_sigterm_each(tmp_path, released)
    (tmp_path / "finish").touch()
    d.wait([jid], timeout=30)
    assert d.job(jid)["state"] == "COMPLETED", d.job(jid)
    assert_one_sigterm_each(tmp_path, released)  # and the host that stayed got none


def test_a_cancelled_mpi_job_gets_one_sigterm_per_rank(
        tmp_path: Path, daemons: list[RunningDaemon]) -> None:
    """mpirun passes its SIGTERM on to the ranks, those beside it too: the launcher sends
    them none of its own (it sent the ranks a second one, through their tag beside mpirun
    and through its sweep for ranks left behind elsewhere), and kills only what is left
    after the kill-wait."""
    reason = mpi_skip_reason(need_mpi4py=False)
    if reason:
        pytest.skip(reason)
    d = start(daemons, tmp_path / "state", nodes=2, kill_wait=10.0)
    jid = d.submit(counter_job(tmp_path, "2", launcher="mpi", env={"LINGER": "1"}))
    pids = started(tmp_path, 4)  # per host: the rank and its child
    assert sorted(pids.values()) == ["node1", "node1", "node2", "node2"], pids
    assert d.cli("ecancel", str(jid)).returncode == 0
    d.wait([jid], timeout=40)
    assert d.job(jid)["state"] == "CANCELLED", d.job(jid)
    assert_one_sigterm_each(tmp_path, pids)
