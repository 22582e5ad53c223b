"""Faults to the state directory while its daemon runs, as an operator meets them: its files
removed or replaced under it. What must hold: a second daemon never takes a state
directory whose daemon still runs (it would take over the first one's journal and jobs),
and the tools find the running daemon again."""

from __future__ import annotations

import json

import psutil
import pytest
from faults_support import cli, kill9, queue, sleeper, start

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


def test_a_journal_removed_or_replaced_while_the_daemon_runs_is_written_again_and_a_restart_keeps_every_job(
        tmp_path, daemons: list) -> None:
    """journal.db (and its WAL) removed, or replaced by something else, while the daemon
    runs: the next commit writes it again from the daemon's own copy (a file found in its place
    kept beside), so a daemon killed afterwards restarts, without --salvage, with every job it
    acknowledged. Before, every commit went on into the removed file: submissions were
    acknowledged, and a restart found no journal (refused, or a salvage from the event log)."""
    state = tmp_path / "state"
    work = tmp_path / "work"
    work.mkdir()
    d = start(daemons, state, nodes=1)
    running = d.submit(sleeper(work, "running"))
    d.wait_event(running, "launched")
    before = d.submit(sleeper(work, "before"))
    for f in state.glob("journal.db*"):
        f.unlink()
    removed = d.submit(sleeper(work, "after-removal"))
    assert (state / "journal.db").is_file()
    (state / "journal.db").unlink()
    (state / "journal.db").mkdir()  # replaced, by a directory
    replaced = d.submit(sleeper(work, "after-replacement"))
    assert (state / "journal.db").is_file() and [p for p in state.glob("journal.db.replaced-*") if p.is_dir()]
    text = (state / "daemon.log").read_text()
    assert "journal.db was removed while the daemon ran: written again" in text, text
    assert "journal.db was replaced (kept as" in text, text
    kill9(d)
    d2 = start(daemons, state, nodes=1)  # no --salvage needed: the journal is whole
    jobs = queue(state)
    assert jobs[running]["state"] == "RUNNING", jobs[running]
    assert all(jobs[j]["state"] == "PENDING" for j in (before, removed, replaced)), jobs
    assert d2.submit(sleeper(work, "next", 0.1)) > replaced


def test_an_event_log_removed_while_the_daemon_runs_is_begun_again_with_a_header_that_says_what_was_lost(
        tmp_path, daemons: list) -> None:
    """events.jsonl removed while the daemon runs: the next records begin a new file whose
    first line is a segment header saying the history before it is lost, and the daemon's log
    says so. Before, the records went into a new file without a header, which `eacct` and
    `elasticd replay` refused for good ("an event before any start record") without a word
    from the daemon."""
    state = tmp_path / "state"
    work = tmp_path / "work"
    work.mkdir()
    d = start(daemons, state, nodes=1)
    first = d.submit(sleeper(work, "first", 0.1))
    d.wait([first])
    (state / "events.jsonl").unlink()
    second = d.submit(sleeper(work, "second", 0.1))
    d.wait([second])
    lines = (state / "events.jsonl").read_text().splitlines()
    header = json.loads(lines[0])
    assert header["type"] == "start" and header["recovered"] is True, header
    assert "was removed while the daemon ran" in header["history_lost"], header
    assert any(json.loads(ln).get("event", {}).get("job_id") == second for ln in lines[1:])
    assert "events.jsonl was removed while the daemon ran" in (state / "daemon.log").read_text()
    r = cli(state, "eacct")
    assert r.returncode != 0 and "was removed while the daemon ran" in r.stderr, r.stderr
    assert "before any start record" not in r.stderr
    r = cli(state, "elasticd", "stop")
    assert r.returncode == 0, r.stderr
    d2 = start(daemons, state, nodes=1)  # the log it left is one a start reads
    assert d2.submit(sleeper(work, "third", 0.1)) > second


def test_a_state_directory_on_a_file_system_that_cannot_lock_it_is_taken_all_the_same(tmp_path, monkeypatch) -> None:
    """NFS turns flock into a POSIX lock, which a directory opened for reading cannot take
    (EBADF), and without a lock daemon gives ENOLCK: a home directory there must not read as a
    running daemon. Only a lock another process holds refuses the start."""
    import errno
    import fcntl
    import os

    from elasticd import statedir

    def no_locks(fd: int, op: int) -> None:
        raise OSError(errno.ENOLCK, os.strerror(errno.ENOLCK))

    monkeypatch.setattr(fcntl, "flock", no_locks)
    fd = statedir.hold(tmp_path)
    os.close(fd)
