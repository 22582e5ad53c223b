"""Orphans the daemon adopts: without a cgroup (sweep containment) the daemon is a child
subreaper, so a job's setsid, double-forked and setpgid children become its own when their
parent exits. Each must be reaped once it ends -- by itself or ended with its job -- or its
zombie holds a pid and counts against RLIMIT_NPROC for as long as the daemon runs; and the
reaping must never take the exit status of a process the daemon waits for itself (the
job's wrapper: the job's exit code and state come from it)."""

from __future__ import annotations

import json
from pathlib import Path

import psutil
import pytest
from faults_support import start

from conftest import RunningDaemon, alive, read_pid, wait_until

pytestmark = pytest.mark.timeout(180)

# Each job leaves one child of each kind of detachment, each ending by itself a moment after
# its parent left it to the daemon, and one (setsid) that lives on until the job's end ends
# it; then ends as `ending` says.
_DETACH = (
    "(setsid sleep 0.3 &); ((sleep 0.3 &) &); "
    "python3 -c 'import os, time; os.setpgid(0, 0); os.fork() or time.sleep(0.3)' & "
    "(setsid sh -c 'echo $$ > {lives}; exec sleep 300' &); "
    "while [ ! -s {lives} ]; do sleep 0.05; done; sleep 1; {ending}"
)


def job(folder: Path, name: str, script: str) -> Path:
    """A one-host job running `script` under sh."""
    fields = {"name": name, "command": ["sh", "-c", script], "nodes": 1, "time_limit": "5",
              "working_dir": str(folder), "output": f"{name}.out"}
    path = folder / f"{name}.toml"
    path.write_text("".join(f"{k} = {json.dumps(v)}\n" for k, v in fields.items()))  # JSON values are TOML
    return path


def zombie_children(pid: int) -> list[int]:
    try:
        return [c.pid for c in psutil.Process(pid).children() if c.status() == psutil.STATUS_ZOMBIE]
    except psutil.NoSuchProcess:
        return []


@pytest.mark.parametrize("mode", ["cgroup", "sweep"])
def test_children_a_job_detaches_are_reaped_and_the_jobs_exits_are_their_own(
        tmp_path: Path, daemons: list[RunningDaemon], mode: str, monkeypatch: pytest.MonkeyPatch) -> None:
    if mode == "sweep":
        monkeypatch.setenv("ELASTIC_NO_CGROUP", "1")
    d = start(daemons, tmp_path / "state", nodes=4, kill_wait=1.0)
    daemon = d.record.pid
    endings = {"exits-3": ("exit 3", "FAILED", "3:0"), "exits-0": ("exit 0", "COMPLETED", "0:0"),
               "signalled": ("kill -USR1 $$", "FAILED", "0:10"), "cancelled": ("sleep 300", "CANCELLED", None)}
    ids, lives = {}, {}
    for name, (ending, _, _) in endings.items():
        lives[name] = tmp_path / f"{name}.lives"
        script = _DETACH.format(lives=lives[name], ending=ending)
        ids[name] = d.submit(job(tmp_path, name, script))
    if mode == "sweep":
        # The daemon adopted the long-lived one: what this test is about happens.
        kept = read_pid(lives["cancelled"], 60)
        assert wait_until(lambda: alive(kept) and psutil.Process(kept).ppid() == daemon, 30), \
            f"process {kept} was not adopted by the daemon {daemon}"
    d.wait_event(ids["cancelled"], "launched")
    read_pid(lives["cancelled"], 60)
    assert d.cli("ecancel", str(ids["cancelled"])).returncode == 0
    d.wait(list(ids.values()), timeout=90)
    for name, (_, state, exit_) in endings.items():
        info = d.job(ids[name])
        assert info["state"] == state, (name, info)
        if exit_ is not None:
            assert info["exit"] == exit_, (name, info)
        assert not alive(read_pid(lives[name])), f"{name}: its detached process outlived the job"
    assert wait_until(lambda: not zombie_children(daemon), 30), \
        f"the daemon left zombies: {zombie_children(daemon)} ({mode})"
    log = (tmp_path / "state" / "daemon.log").read_text()
    assert "Unknown child process" not in log and "returncode 255" not in log
    assert f"containment of job processes: {mode}" in log or mode == "cgroup" and "sweep" in log
