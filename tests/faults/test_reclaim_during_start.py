"""Hosts taken back from a job while the processes of its grow are still being started there:
the application refused or deferred the grow, or took it and at once gave the hosts back (an
evolving job's release, a malleable job's shrink). The daemon may show them free only once
no process of the job is left on them, the ones that start late included (README: the
daemon "frees a node only when no process of the job is left on it").

The grow's second new host writes its output on a file system frozen for the test, so its
start (and the grow's, which starts the hosts one after the other) waits while the
application answers. Its first new host's process runs already (taken back after its
process exists); the second one's starts only once the file system is thawed (taken back
before its process exists). Before, the hosts were free the moment the answer came, with
the first host's process running on, and the second's started after."""

from __future__ import annotations

import sys
from pathlib import Path

import psutil
import pytest
from faults_support import cli, start

from conftest import FreezableFs, hosts_shown_free, of_job, read_pid, wait_until, write_job

pytestmark = pytest.mark.timeout(150)

RECORDER = Path(__file__).resolve().parent.parent / "apps" / "recorder.py"


def tagged_processes(state_dir: Path, job_id: int, host: str) -> list[int]:
    """Live processes of the job on `host`, found by the tag every job process carries
    (ELASTIC_TAG=TAG/JOB/HOST), whatever process group or session they are in."""
    found = []
    for p in psutil.process_iter():
        try:
            env = p.environ()
            if (of_job(env, state_dir, job_id) and env.get("ELASTIC_TAG", "").endswith(f"/{job_id}/{host}")
                    and p.status() != psutil.STATUS_ZOMBIE):
                found.append(p.pid)
        except psutil.Error:
            continue
    return found


@pytest.mark.parametrize("answer", ["refuse", "defer", "release", "shrink"])
def test_hosts_taken_back_while_the_grow_starts_are_free_only_once_its_processes_there_are_gone(
        tmp_path: Path, daemons: list, freezable_fs: FreezableFs, monkeypatch: pytest.MonkeyPatch,
        answer: str) -> None:
    monkeypatch.setenv("ELASTIC_FS_WAIT", "120")  # the start waits for the thaw, not for a give-up
    work = tmp_path / "work"
    outs = work / "outs"
    for task in ("0", "1"):
        (outs / task).mkdir(parents=True)
    (outs / "2").symlink_to(freezable_fs.mount)  # the grow's second new host is task 2
    d = start(daemons, tmp_path / "state", nodes=3, kill_wait=1.0)
    blocker = d.submit(write_job(tmp_path, "blocker", f'''
        name = "blocker"
        command = ["sleep", "300"]
        nodes = 2
        working_dir = "{tmp_path}"
        output = "/dev/null"
    '''))
    d.wait_event(blocker, "launched")
    mode = {"refuse": "refuse_grow", "defer": "defer_grow"}.get(answer, "normal")
    rec = d.submit(write_job(work, "rec", f'''
        name = "rec"
        command = ["{sys.executable}", "{RECORDER}"]
        nodes = {{ min = 1, max = 3 }}
        kind = "{'evolving' if answer == 'release' else 'malleable'}"
        working_dir = "{work}"
        output = "{outs}/%t/rec.out"
        env = {{ MODE = "{mode}", DEFER = "60" }}
        time_limit = "3"
    '''))
    d.wait_event(rec, "registered")
    assert cli(d.state_dir, "ecancel", str(blocker)).returncode == 0
    d.wait([blocker])
    freezable_fs.freeze()
    if answer == "release":
        (work / "request-2").touch()
    else:
        r = cli(d.state_dir, "elasticd", "resize", str(rec), "3", "--no-wait")
        assert r.returncode == 0, r.stderr
    info = d.wait_event(rec, "grow_ordered")
    first, second = info["hosts"][1:]
    # The first new host's process runs; the second's start waits on the frozen file system.
    read_pid(work / f"pid-{first}-joining")
    if answer in ("refuse", "defer"):
        d.wait_event(rec, "refused" if answer == "refuse" else "deferred")
        taken = [first, second]
    elif answer == "release":
        d.wait_event(rec, "grown")
        (work / f"release-{first}").touch()
        assert wait_until(lambda: "released" in (work / "events.log").read_text(), 30)
        taken = [first]
    else:
        d.wait_event(rec, "grown")
        r = cli(d.state_dir, "elasticd", "resize", str(rec), "1", "--no-wait")
        assert r.returncode == 0, r.stderr
        assert wait_until(lambda: "pre_shrink 2" in (work / "events.log").read_text(), 30)
        taken = [first, second]
    freezable_fs.thaw()
    assert wait_until(lambda: hosts_shown_free(d.state_dir, rec) != [], 60), "the hosts are never freed"
    assert [sorted(h) for h in hosts_shown_free(d.state_dir, rec)] == [sorted(taken)]
    # The moment the daemon says they are free, nothing of the job is left on them.
    left = {h: tagged_processes(d.state_dir, rec, h) for h in taken}
    assert not any(left.values()), f"processes of job {rec} on hosts shown free: {left}"
    (work / "finish").touch()
    d.wait([rec], timeout=60)
    assert d.job(rec)["state"] == "COMPLETED", d.job(rec)
