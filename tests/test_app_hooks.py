"""The application API's defaults and last words, against a real local daemon: a handler
that overrides no hook is shrunk (the library gives back the last hosts, never the
leader's), and a process the daemon ends runs its `on_leaving` hook within the kill-wait --
`removed` when its host leaves a job that runs on (it hands its work back and exits 0, no
`Terminated` in the output), `ending` when the job ends."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from conftest import RunningDaemon, alive, read_pid, wait_until, write_job

APP = Path(__file__).parent / "apps" / "leaving_app.py"


def leaving_job(folder: Path, kind: str = "malleable", leave_slow: float = 0.0) -> Path:
    return write_job(folder, "leaving", f'''
        name = "leaving"
        command = ["{sys.executable}", "{APP}"]
        nodes = {{ min = 1, max = 3 }}
        kind = "{kind}"
        working_dir = "."
        env = {{ LEAVE_SLOW = "{leave_slow}" }}
        time_limit = "2"
    ''')


@pytest.mark.timeout(120)
def test_a_removed_worker_runs_its_hook_hands_work_back_and_leaves_quietly(daemon: RunningDaemon,
                                                                            workdir: Path) -> None:
    jid = daemon.submit(leaving_job(workdir))
    daemon.wait_event(jid, "registered")
    node3 = read_pid(workdir / "pid-node3")
    assert wait_until(lambda: (workdir / f"elastic-{jid}.out").read_text().count("started") == 2, 30)
    # A bare MalleableHandler: pre_shrink's default gives back the last host.
    r = daemon.cli("elasticd", "resize", str(jid), "2")
    assert r.returncode == 0, r.stderr
    assert f"job {jid}: shrunk to 2 nodes (node1, node2)" in r.stdout
    assert wait_until(lambda: (workdir / "handed-node3").exists(), 30)
    assert (workdir / "left-node3").read_text() == "removed"
    assert int((workdir / "handed-node3").read_text()) > 0
    assert wait_until(lambda: not alive(node3), 10)
    # The job's end: the worker left runs its hook too, told the job is ending.
    assert daemon.cli("ecancel", str(jid)).returncode == 0
    daemon.wait([jid], timeout=60)
    assert daemon.job(jid)["state"] == "CANCELLED"
    assert (workdir / "left-node2").read_text() == "ending"
    assert not (workdir / "handed-node2").exists()
    # The removed worker's exit was its own (status 0): no shell's `Terminated` for it.
    out = (workdir / f"elastic-{jid}.out").read_text()
    assert out.count("Terminated") <= 2, out  # the leader's and node2's, at the cancel
    assert "Traceback" not in out, out


@pytest.mark.timeout(120)
def test_nothing_is_terminated_when_the_removed_host_leaves_and_the_job_completes(daemon: RunningDaemon,
                                                                                  workdir: Path) -> None:
    jid = daemon.submit(leaving_job(workdir, leave_slow=0.3))
    daemon.wait_event(jid, "registered")
    read_pid(workdir / "pid-node3")
    assert wait_until(lambda: (workdir / f"elastic-{jid}.out").read_text().count("started") == 2, 30)
    assert daemon.cli("elasticd", "resize", str(jid), "2").returncode == 0
    # The hook took 0.3 s of the daemon's 1 s kill-wait and still ran to its end.
    assert wait_until(lambda: (workdir / "handed-node3").exists(), 30)
    assert (workdir / "left-node3").read_text() == "removed"
    (workdir / "finish").touch()
    daemon.wait([jid], timeout=60)
    info = daemon.job(jid)
    assert info["state"] == "COMPLETED" and info["exit"] == "0:0", info
    assert (workdir / "hosts").read_text() == "node1,node2"
    out = (workdir / f"elastic-{jid}.out").read_text()
    assert "Terminated" not in out, out
