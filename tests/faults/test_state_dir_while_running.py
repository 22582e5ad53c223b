"""Faults to the state directory while its daemon runs, as an operator meets them: its files
removed or replaced under it. What must hold: a second daemon never takes a state
directory whose daemon still runs (it would take over the first one's journal and jobs),
and the tools find the running daemon again."""

from __future__ import annotations

import psutil
import pytest
from faults_support import cli, queue, sleeper, start

from conftest import RunningDaemon, alive, wait_until
from elasticd.statedir import DAEMON_FILE, read_record

pytestmark = pytest.mark.timeout(120)


def daemons_on(state: object) -> list[int]:
    """The daemon processes serving the state directory (whatever daemon.json says)."""
    found = []
    for p in psutil.process_iter(["cmdline"]):
        cmd = p.info["cmdline"] or []
        if "elasticd.cli.elasticd_main" in cmd and "--foreground" in cmd and str(state) in cmd:
            found.append(p.pid)
    return found


def test_a_daemon_whose_daemon_json_was_removed_keeps_its_state_directory_and_writes_the_file_again(
        tmp_path, daemons: list) -> None:
    """daemon.json removed while its daemon runs (by hand, a cleanup script): `elasticd start`
    on the same directory is refused, naming the running daemon's pid, in either form
    (detached or --foreground). Before, the second daemon took over the journal and the jobs of
    the first; each then ended the other's jobs, and a job the second said it cancelled at its
    stop was started again by the first. The running daemon writes the file again, so the
    tools find it, and its jobs are as they were."""
    state = tmp_path / "state"
    work = tmp_path / "work"
    work.mkdir()
    d = start(daemons, state, nodes=1, extra=["--schedule-interval", "0.5"])
    running = d.submit(sleeper(work, "running"))
    waiting = d.submit(sleeper(work, "waiting"))
    d.wait_event(running, "launched")
    (state / DAEMON_FILE).unlink()
    for form in ((), ("--foreground",)):
        r = cli(state, "elasticd", "start", "--local", "1", "--kill-wait", "1", *form, timeout=60)
        second = read_record(state)
        if r.returncode == 0 and second is not None:  # stopped at the end, as the test's own
            daemons.append(RunningDaemon(state, second, 1))
        assert r.returncode == 1, (form, r.stdout, r.stderr)
        assert "already running" in r.stderr and f"pid {d.record.pid}" in r.stderr, (form, r.stderr)
        assert "Traceback" not in r.stderr
    assert daemons_on(state) == [d.record.pid]
    # Written again within a tick or two: the tools find the daemon, and nothing changed.
    assert wait_until(lambda: read_record(state) == d.record, 30), "daemon.json was not written again"
    assert "was removed while this daemon ran: written again" in (state / "daemon.log").read_text()
    jobs = queue(state)
    assert jobs[running]["state"] == "RUNNING" and jobs[waiting]["state"] == "PENDING"
    r = cli(state, "elasticd", "stop")
    assert r.returncode == 0, r.stderr
    assert wait_until(lambda: not alive(d.record.pid), 30)
    # Once it is gone, the directory is free for the next start.
    d2 = start(daemons, state, nodes=1)
    assert d2.record.pid != d.record.pid
