"""Storage faults: a state directory whose file system fills up, or whose writes fail under a
file-size limit. What must survive: every acknowledged job, exactly once, after a restart;
nothing unacknowledged half-applied; no job started that the journal does not hold."""

from __future__ import annotations

import os
import resource
import sys
from pathlib import Path

import psutil
import pytest
from faults_support import cli, fill, kill9, queue, sleeper, start

from conftest import alive, of_job, read_pid, write_job

pytestmark = pytest.mark.timeout(120)




def test_a_full_disk_refuses_submissions_with_an_error_and_loses_no_acknowledged_job(
        tiny_fs: Path, tmp_path: Path, daemons: list) -> None:
    state = tiny_fs / "state"
    work = tmp_path / "work"
    work.mkdir()
    d = start(daemons, state, nodes=1, extra=["--min-free-space", "1"])
    acked = [d.submit(sleeper(work, "first"))]
    acked.append(d.submit(sleeper(work, "second")))  # pending behind the first
    filler = fill(tiny_fs)
    refused = 0
    for i in range(30):  # until the journal cannot grow
        r = cli(state, "esubmit", "--parsable", str(sleeper(work, f"more{i}")))
        if r.returncode == 0:
            acked.append(int(r.stdout))
        else:
            refused += 1
            assert "state_write_failed" in r.stderr and str(state) in r.stderr, r.stderr
            break
    assert refused == 1, "the file system never filled"
    jobs = queue(state)  # reads still served
    assert set(jobs) == set(acked)
    filler.unlink()
    r = cli(state, "esubmit", "--parsable", str(sleeper(work, "after")))
    assert r.returncode == 0, r.stderr  # writes succeed again: work is taken again
    acked.append(int(r.stdout))
    kill9(d)
    d = start(daemons, state, nodes=1, extra=["--min-free-space", "1"])
    after = queue(state)
    assert sorted(after) == sorted(acked) and len(set(acked)) == len(acked)  # every one, exactly once
    new = d.submit(sleeper(work, "new"))
    assert new > max(acked)  # ids are never reused


def test_no_job_starts_while_the_journal_cannot_record_its_start(tmp_path: Path, daemons: list) -> None:
    state = tmp_path / "state"
    work = tmp_path / "work"
    work.mkdir()
    d = start(daemons, state, nodes=1, extra=["--min-free-space", "1", "--schedule-interval", "0.5"])
    # The blocker ends once the journal is limited (a `sleep 2` had ended, and the waiting job
    # started and been saved, before a loaded machine's second esubmit returned).
    go = work / "go"
    blocker = d.submit(write_job(work, "blocker", f'''
        name = "blocker"
        command = ["sh", "-c", "while [ ! -e {go} ]; do sleep 0.1; done"]
        nodes = 1
        time_limit = "5"
        working_dir = "{work}"
        output = "/dev/null"
    '''))
    waiting = d.submit(sleeper(work, "waiting"))
    d.wait_event(blocker, "launched")
    assert queue(state)[waiting]["state"] == "PENDING"
    wal = state / "journal.db-wal"
    size = max((state / "journal.db").stat().st_size, wal.stat().st_size if wal.exists() else 0)
    resource.prlimit(d.record.pid, resource.RLIMIT_FSIZE, (size, resource.RLIM_INFINITY))
    go.touch()
    d.wait([blocker], timeout=60)  # it ends on its own: a fact, applied though not saved
    deadline = psutil.time.time() + 4
    while psutil.time.time() < deadline:  # passes run every 0.5 s and cannot commit the start
        assert queue(state)[waiting]["state"] == "PENDING"
        assert not [p for p in psutil.process_iter(["environ"]) if of_job(p.info["environ"] or {}, state, waiting)]
        psutil.time.sleep(0.2)
    resource.prlimit(d.record.pid, resource.RLIMIT_FSIZE, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
    d.wait_event(waiting, "launched", timeout=60)  # recorded, then started
    status = cli(state, "elasticd", "status")
    assert status.returncode == 0


def test_writes_failing_under_a_file_size_limit_are_errors_not_losses(tmp_path: Path, daemons: list) -> None:
    """The unprivileged way: RLIMIT_FSIZE on the daemon makes its writes fail (EFBIG)."""
    state = tmp_path / "state"
    work = tmp_path / "work"
    work.mkdir()
    d = start(daemons, state, nodes=1, extra=["--min-free-space", "1"])
    acked = [d.submit(sleeper(work, "a"))]
    journal = state / "journal.db"
    wal = state / "journal.db-wal"
    size = max(journal.stat().st_size, wal.stat().st_size if wal.exists() else 0)
    resource.prlimit(d.record.pid, resource.RLIMIT_FSIZE, (size, resource.RLIM_INFINITY))
    results = [cli(state, "esubmit", "--parsable", str(sleeper(work, f"b{i}"))) for i in range(5)]
    failed = [r for r in results if r.returncode != 0]
    acked += [int(r.stdout) for r in results if r.returncode == 0]
    assert failed, "no write failed under the limit"
    assert all("state_write_failed" in r.stderr for r in failed), [r.stderr for r in failed]
    assert psutil.pid_exists(d.record.pid)  # SIGXFSZ did not kill it
    resource.prlimit(d.record.pid, resource.RLIMIT_FSIZE, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
    ok = cli(state, "esubmit", "--parsable", str(sleeper(work, "c")))
    assert ok.returncode == 0, ok.stderr
    acked.append(int(ok.stdout))
    kill9(d)
    start(daemons, state, nodes=1)
    assert sorted(queue(state)) == sorted(acked)


def test_ids_go_on_after_a_clean_stop_and_restart(tmp_path: Path, daemons: list) -> None:
    state = tmp_path / "state"
    work = tmp_path / "work"
    work.mkdir()
    d = start(daemons, state, nodes=1)
    first = d.submit(sleeper(work, "x", 0.1))
    d.wait([first])
    assert cli(state, "elasticd", "stop").returncode == 0
    d = start(daemons, state, nodes=1)
    second = d.submit(sleeper(work, "y", 0.1))
    assert second == first + 1
    log = state / "daemon.log"
    assert oct(log.stat().st_mode & 0o777) == "0o600"
    assert (state / "daemon.log.1").exists()  # one log per start


def test_a_damaged_or_missing_journal_is_refused_and_salvaged_without_losing_ids(tmp_path: Path,
                                                                                 daemons: list) -> None:
    state = tmp_path / "state"
    work = tmp_path / "work"
    work.mkdir()
    d = start(daemons, state, nodes=1)
    done = d.submit(sleeper(work, "done", 0.1))
    d.wait([done])
    pending = [d.submit(sleeper(work, f"p{i}", 30, nodes=1)) for i in range(3)]
    kill9(d)
    for damage in ("zero", "remove"):
        journal = state / "journal.db"
        if damage == "zero":
            journal.write_bytes(b"\0" * 4096)
            (state / "journal.db-wal").unlink(missing_ok=True)
        else:
            for f in state.glob("journal.db*"):
                f.unlink()
        r = cli(state, "elasticd", "start", "--local", "1")
        assert r.returncode != 0
        assert "--salvage" in r.stderr and ("missing" in r.stderr or "unreadable" in r.stderr
                                            or "damaged" in r.stderr or "holds no job" in r.stderr), r.stderr
    r = cli(state, "elasticd", "start", "--local", "1", "--salvage")
    assert r.returncode == 0, r.stderr
    daemons.append(type(d)(state, json_record(state), 1))  # stopped by the fixture, whatever fails below
    # The start says what the salvage did (the journal was removed: all rebuilt from the event
    # log), not only its log.
    assert f"salvage: 0 job(s) from the journal's readable rows; {len(pending) + 1} rebuilt from the event log" \
        in r.stdout, r.stdout
    jobs = queue(state)
    # Rebuilt from the event log: every job, its state as last recorded; ids go on.
    assert set(pending) <= set(jobs) and done in jobs
    new = int(cli(state, "esubmit", "--parsable", str(sleeper(work, "new", 0.1))).stdout)
    assert new > max(pending)
    status = cli(state, "elasticd", "status")
    assert "salvage" in (state / "daemon.log").read_text()
    assert status.returncode == 0


def journal_files(state: Path) -> dict[str, bytes]:
    """The journal as it is on disk (its WAL and index too), to put back later."""
    return {f.name: f.read_bytes() for f in state.glob("journal.db*")}


def test_a_journal_set_back_behind_its_event_log_is_refused_and_salvaged_without_starting_anything_twice(
        tmp_path: Path, daemons: list) -> None:
    """An older journal (what a WAL cut short or overwritten gives: a valid database of an
    earlier commit) must not be started on: it would give out ids again, start again what
    was running and forget what ended. The event log, written after each commit, says what
    the journal lost."""
    state = tmp_path / "state"
    work = tmp_path / "work"
    work.mkdir()
    d = start(daemons, state, nodes=1)
    first = d.submit(sleeper(work, "first", 300))
    d.wait_event(first, "launched")
    kill9(d)
    older = journal_files(state)  # job 1 running, ids given out from 2
    d = start(daemons, state, nodes=1)  # a kill -9's restart passes the check
    assert cli(state, "ecancel", str(first)).returncode == 0
    d.wait([first])
    later = [d.submit(sleeper(work, f"later{i}", 300)) for i in range(3)]
    d.wait_event(later[0], "launched")
    running = read_pid(state / "jobs" / str(later[0]) / "proc-node1.pid")
    kill9(d)
    for f in state.glob("journal.db*"):
        f.unlink()
    for name, data in older.items():
        (state / name).write_bytes(data)
    r = cli(state, "elasticd", "start", "--local", "1")
    if r.returncode == 0:
        daemons.append(type(d)(state, json_record(state), 1))  # stopped, with its jobs, at the end
    assert r.returncode == 1, r.stdout + r.stderr
    assert "--salvage" in r.stderr and "set back" in r.stderr, r.stderr
    assert f"job(s) {later[0]}-{later[-1]} submitted" in r.stderr and f"job {first}: " in r.stderr, r.stderr
    assert alive(running)  # refused before anything was touched
    r = cli(state, "elasticd", "start", "--local", "1", "--salvage")
    assert r.returncode == 0, r.stderr
    daemons.append(type(d)(state, json_record(state), 1))
    jobs = queue(state)
    assert {j: jobs[j]["state"] for j in [first, *later]} == \
        {first: "CANCELLED", later[0]: "RUNNING", later[1]: "PENDING", later[2]: "PENDING"}
    assert alive(running)  # taken back, not started again
    assert [e["event"] for e in jobs[later[0]]["events"]].count("launched") == 1
    assert int(cli(state, "esubmit", "--parsable", str(sleeper(work, "new", 0.1))).stdout) == later[-1] + 1


def test_a_journal_ahead_of_its_event_log_starts_as_after_any_kill(tmp_path: Path, daemons: list) -> None:
    """The log is written after the journal commits: a daemon killed in between leaves the
    journal holding events the log lacks. That is history lost, not state: the start goes on,
    and the log goes on readable."""
    state = tmp_path / "state"
    work = tmp_path / "work"
    work.mkdir()
    d = start(daemons, state, nodes=1)
    acked = [d.submit(sleeper(work, f"j{i}", 300)) for i in range(3)]
    d.wait_event(acked[0], "launched")
    kill9(d)
    log = state / "events.jsonl"
    lines = log.read_text().splitlines(keepends=True)
    assert sum('"Submitted"' in line for line in lines[-4:]) >= 1
    log.write_text("".join(lines[:-4]))  # the last writes never made it
    d = start(daemons, state, nodes=1)
    assert sorted(queue(state)) == acked
    new = d.submit(sleeper(work, "new", 300))
    assert new == acked[-1] + 1
    r = cli(state, "eacct", "--json")
    assert r.returncode == 0, r.stderr


def json_record(state: Path):  # type: ignore[no-untyped-def]
    from elasticd.statedir import read_record

    rec = read_record(state)
    assert rec is not None
    return rec


def test_a_job_file_too_large_or_out_of_range_is_refused_naming_the_field(tmp_path: Path, daemons: list) -> None:
    state = tmp_path / "state"
    start(daemons, state, nodes=1)
    big = tmp_path / "big.toml"
    big.write_text('name = "big"\ncommand = ["true"]\nnodes = 1\nenv = { X = "' + "x" * 10_000_000 + '" }\n')
    r = cli(state, "esubmit", str(big))
    assert r.returncode != 0 and "more than a job file may hold (32 KiB)" in r.stderr
    for field, value, words in (("time_limit", '"25:61:00"', "61 minutes"),
                                ("time_limit", "100000000000000000000", "365 days"),
                                ("nodes", "1000000000000000000000000000000", "nodes")):
        f = tmp_path / "bad.toml"
        f.write_text(f'name = "bad"\ncommand = ["true"]\n{"nodes = 1" if field != "nodes" else ""}\n{field} = {value}\n')
        r = cli(state, "esubmit", str(f))
        assert r.returncode != 0 and field in r.stderr and words in r.stderr, r.stderr


def test_the_daemon_answers_an_oversized_line_with_an_error_not_a_reset(tmp_path: Path, daemons: list) -> None:
    import socket

    from elastic_protocol.control import Hello
    from elastic_protocol.version import PROTOCOL_VERSION

    d = start(daemons, tmp_path / "state", nodes=1)
    rec = d.record
    with socket.create_connection((rec.control_host, rec.control_port), timeout=20) as s:
        s.sendall(Hello(version=PROTOCOL_VERSION, secret=rec.secret, client="t").model_dump_json().encode() + b"\n")
        s.recv(65536)
        s.sendall(b'{"type": "submit", "spec": "' + b"x" * 10_000_000 + b'"}\n')
        reply = s.recv(65536)
    assert b"line_too_long" in reply
    assert psutil.pid_exists(rec.pid)
    if sys.platform == "linux":
        assert os.path.exists(tmp_path / "state" / "daemon.json")


def test_processes_of_a_job_lost_with_its_journal_are_ended_at_salvage(tmp_path: Path, daemons: list) -> None:
    state = tmp_path / "state"
    work = tmp_path / "work"
    work.mkdir()
    d = start(daemons, state, nodes=1)
    jid = d.submit(sleeper(work, "orphan", 300))
    d.wait_event(jid, "launched")
    pid = read_pid(state / "jobs" / str(jid) / "proc-node1.pid")
    kill9(d)
    for f in state.glob("journal.db*"):
        f.unlink()
    (state / "events.jsonl").write_text("")  # the history gone too: nothing says the job existed but jobs/
    r = cli(state, "elasticd", "start", "--local", "1", "--salvage")
    assert r.returncode == 0, r.stderr
    daemons.append(type(d)(state, json_record(state), 1))
    assert not alive(pid)
    log = (state / "daemon.log").read_text()
    assert f"job {jid}: ended" in log and "lost (no readable record)" in log
