"""The SSH launcher's node agent, run here exactly as sshd runs it on a node (the bootstrap
with the agent's source and the request on stdin): no SSH and no root needed."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from elasticd.launch.ssh import _AGENT, _BOOTSTRAP


def agent(role: str, *args: str, payload: bytes = b"", timeout: float = 20) -> list[str]:
    r = subprocess.run([sys.executable, "-I", "-S", "-c", _BOOTSTRAP, str(len(_AGENT)), role, *args],
                       input=_AGENT + payload, capture_output=True, timeout=timeout, check=False)
    assert r.returncode == 0, r.stderr.decode()
    return r.stdout.decode().splitlines()


def spawn(tmp: Path, argv: list[str], token: str, out: str = "out.txt") -> str:
    req = {"argv": argv, "cwd": str(tmp), "env": {"PATH": os.environ["PATH"], "ELASTIC_JOB_ID": "0"},
           "out": str(tmp / out), "err": str(tmp / out), "status_dir": str(tmp / "st"), "token": token}
    (answer,) = agent("spawn", payload=json.dumps(req).encode())
    return answer


def wait_file(path: Path, timeout: float = 30) -> str:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert time.monotonic() < deadline, f"no {path}"
        time.sleep(0.01)
    return path.read_text().strip()


def gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def test_spawned_process_leads_its_own_session_outlives_the_call_and_its_status_is_recorded(tmp_path: Path) -> None:
    answer = spawn(tmp_path, ["sh", "-c", "echo started; sleep 0.5; exit 3"], "1.1")
    assert answer.startswith("ok ")
    pgid = int(answer.split()[1])
    # The call has returned (as an SSH channel would close); the job runs on, as a group
    # and session leader, and its monitor is in another session.
    assert os.getpgid(pgid) == pgid and os.getsid(pgid) == pgid
    run = wait_file(tmp_path / "st" / "1.1.run").split()
    assert int(run[0]) == pgid and os.getsid(int(run[1])) != pgid
    assert wait_file(tmp_path / "st" / "1.1.st") == "3 0"
    assert gone(pgid)
    assert (tmp_path / "out.txt").read_text() == "started\n"


def test_end_escalates_to_sigkill_verifies_and_reports_the_status(tmp_path: Path) -> None:
    answer = spawn(tmp_path, ["sh", "-c", "trap '' TERM; sleep 30 & wait; sleep 30"], "2.1")
    pgid = int(answer.split()[1])
    time.sleep(0.2)
    t0 = time.monotonic()
    lines = agent("end", "0", "0.3", str(tmp_path / "st"), f"2.1:{pgid}")
    assert lines == ["st 2.1 0 9", "gone"]
    assert time.monotonic() - t0 < 5
    assert gone(pgid)
    assert not (tmp_path / "st" / "2.1.st").exists() and not (tmp_path / "st" / "2.1.run").exists()


def test_end_waits_the_grace_period_for_a_group_that_exits_by_itself(tmp_path: Path) -> None:
    pgid = int(spawn(tmp_path, ["sh", "-c", "sleep 0.3"], "3.1").split()[1])
    assert agent("end", "5", "1", str(tmp_path / "st"), f"3.1:{pgid}") == ["st 3.1 0 0", "gone"]


@pytest.mark.parametrize(("argv", "out", "message"), [
    (["no-such-command-xyz"], "out.txt", "error command not found: no-such-command-xyz"),
    (["true"], "missing/out.txt", "error cannot open output file"),
])
def test_a_process_that_cannot_start_is_an_error_not_a_job(tmp_path: Path, argv: list[str], out: str,
                                                           message: str) -> None:
    assert spawn(tmp_path, argv, "4.1", out).startswith(message)
    assert not (tmp_path / "st" / "4.1.run").exists()


def test_watch_reports_exits_and_heartbeats_and_ends_with_its_channel(tmp_path: Path) -> None:
    status_dir = tmp_path / "st"
    w = subprocess.Popen([sys.executable, "-I", "-S", "-c", _BOOTSTRAP, str(len(_AGENT)), "watch",
                          str(status_dir), "0.2"], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        assert w.stdin is not None and w.stdout is not None
        w.stdin.write(_AGENT)
        w.stdin.flush()
        spawn(tmp_path, ["sh", "-c", "exit 5"], "5.1")
        lines = []
        deadline = time.monotonic() + 10
        while "exit 5.1 5 0" not in lines or lines.count("hb") < 2:
            assert time.monotonic() < deadline, lines
            lines.append(w.stdout.readline().decode().strip())
        w.stdin.close()  # the SSH channel goes away: the watcher ends
        assert w.wait(timeout=5) == 0
    finally:
        if w.poll() is None:
            w.kill()
            w.wait()


def test_spawn_answers_at_once_for_a_fifo_nobody_reads_and_the_job_writes_once_a_reader_comes(
        tmp_path: Path) -> None:
    """The open that waits for a reader is the job's own: a spawn that waited would hold the
    node's SSH call thread until it timed out and the node was taken for down."""
    os.mkfifo(tmp_path / "job.fifo")
    answer = spawn(tmp_path, ["sh", "-c", "echo out; echo err >&2; exit 4"], "6.1", out="job.fifo")
    assert answer.startswith("ok ")
    assert wait_file(tmp_path / "st" / "6.1.run")
    assert not (tmp_path / "st" / "6.1.st").exists()  # still waiting for its reader
    with open(tmp_path / "job.fifo") as f:
        assert f.read() == "out\nerr\n"
    assert wait_file(tmp_path / "st" / "6.1.st") == "4 0"


def test_a_command_that_cannot_start_is_an_error_even_when_its_fifo_has_no_reader(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "job.fifo")
    assert spawn(tmp_path, ["no-such-command-xyz"], "7.1", out="job.fifo") == \
        "error command not found: no-such-command-xyz"
    assert not (tmp_path / "st" / "7.1.run").exists()


def test_end_of_a_job_waiting_for_its_fifos_reader_is_one_sigterm(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "job.fifo")
    pgid = int(spawn(tmp_path, ["sh", "-c", "echo never read"], "8.1", out="job.fifo").split()[1])
    assert agent("end", "0", "30", str(tmp_path / "st"), f"8.1:{pgid}") == ["st 8.1 0 15", "gone"]
    assert gone(pgid)


def test_cleanup_removes_only_the_records_of_ended_jobs_no_daemon_tracks(tmp_path: Path) -> None:
    """A record goes once its job is over and not tracked (its status read or settled); the
    record of a process still running, or of a job still tracked, stays: it is the exit
    status a restarted daemon would otherwise lose."""
    status_dir = tmp_path / "st"
    running = int(spawn(tmp_path, ["sleep", "30"], "9.a1").split()[1])
    try:
        spawn(tmp_path, ["true"], "10.a1")
        spawn(tmp_path, ["true"], "11.a1")
        for token in ("10.a1", "11.a1"):
            wait_file(status_dir / f"{token}.st")
        assert agent("cleanup", str(status_dir), "11") == ["kept 4"]
        assert sorted(p.name for p in status_dir.iterdir()) == ["11.a1.run", "11.a1.st", "9.a1.run", "9.a1.st.tmp"]
        agent("end", "0", "1", str(status_dir), f"9.a1:{running}")
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(running, signal.SIGKILL)
    assert agent("cleanup", str(status_dir)) == ["gone"]
    assert not status_dir.exists()
