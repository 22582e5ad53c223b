"""A state directory on a file system that is full, as an operator meets it: real daemon
processes on a real small tmpfs, driven by the real commands and the real client library.
What must hold: a full disk is named as such, never taken for damage (and nothing is moved
aside for it); an application's answer that cannot be saved is a typed error the library
retries, and the order is never settled with hosts the application did not name; a cancel
is carried out and says what it could not save; a stop says what it could not save; jobs
that cannot start say why; a daemon killed on a full disk is started again before space is
freed (on its reserve), and takes its running jobs back."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import psutil
import pytest
from faults_support import cli, fill, kill9, queue, sleeper, start

from conftest import RunningDaemon, alive, of_job, read_pid, wait_until, write_job
from elasticd.daemon.room import RESERVE_BYTES, RESERVE_FILE
from elasticd.statedir import read_record

pytestmark = pytest.mark.timeout(180)




def status(state_dir: Path) -> dict:
    r = cli(state_dir, "elasticd", "status", "--json")
    assert r.returncode == 0, r.stderr
    return dict(json.loads(r.stdout))


def fill_until_writes_fail(state: Path, work: Path, tiny: Path, nodes: int) -> tuple[Path, list[int]]:
    """Fill the file system, then submit until the journal cannot take one more (a WAL may
    still have room in pages it holds): from then on every decision fails to save. The jobs
    acknowledged on the way take the whole cluster: they wait behind the test's own."""
    filler = fill(tiny)
    acked = []
    for i in range(60):
        r = cli(state, "esubmit", "--parsable", str(sleeper(work, f"fill{i}", nodes=nodes)))
        if r.returncode != 0:
            assert "state_write_failed" in r.stderr and str(state) in r.stderr, r.stderr
            return filler, acked
        acked.append(int(r.stdout))
    raise AssertionError("the journal never stopped taking writes on a full file system")


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_a_start_on_a_full_disk_without_a_reserve_says_the_disk_is_full_and_salvage_moves_nothing_aside(
        tiny_fs: Path, tmp_path: Path, daemons: list) -> None:
    """A state directory without its reserve (made by a daemon older than it, or given up to
    a start before) on a full disk: the start is refused, naming the full disk and the jobs
    left unwatched meanwhile. A salvage never starts on the reserve."""
    state = tiny_fs / "state"
    work = tmp_path / "work"
    work.mkdir()
    d = start(daemons, state, nodes=1, extra=["--min-free-space", "1"])
    done = d.submit(sleeper(work, "done", 0.1))
    d.wait([done])
    running = d.submit(sleeper(work, "running"))
    d.wait_event(running, "launched")
    for how in ("stop", "kill -9"):
        if how == "stop":
            r = cli(state, "elasticd", "stop")
            assert r.returncode == 0, r.stderr
        else:  # the daemon started again below, after the clean stop
            running = d.submit(sleeper(work, "running-again"))
            d.wait_event(running, "launched")
            kill9(d)
        (state / RESERVE_FILE).unlink()
        filler = fill(tiny_fs)
        journal = state / "journal.db"
        # The journal and its WAL, not the WAL's index (-shm), which any reader rebuilds.
        before = {f.name: digest(f) for f in state.glob("journal.db*") if f.suffix != ".db-shm"}
        for args in (("--salvage",), ()):
            r = cli(state, "elasticd", "start", "--local", "1", "--min-free-space", "1", *args)
            assert r.returncode != 0
            assert f"state directory {state} is full" in r.stderr, (how, args, r.stderr)
            assert "unreadable" not in r.stderr and "damaged" not in r.stderr.replace("Nothing in it is damaged", "")
            assert "--salvage" not in r.stderr, r.stderr  # no advice to treat a full disk as damage
        assert "no reserve to start on" in r.stderr, r.stderr
        if how == "kill -9":
            assert f"job(s) {running} of its journal were running" in r.stderr and "unwatched" in r.stderr, r.stderr
        # Nothing was moved aside or replaced: the journal is as the daemon left it.
        assert {f.name: digest(f) for f in state.glob("journal.db*") if f.suffix != ".db-shm"} == before
        assert not list(state.glob("*.damaged-*")) and journal.stat().st_size > 0
        filler.unlink()
        d = start(daemons, state, nodes=1, extra=["--min-free-space", "1"])
        assert (state / RESERVE_FILE).stat().st_size >= RESERVE_BYTES  # made again: there is room
        jobs = queue(state)
        if how == "kill -9":
            assert jobs[running]["state"] == "RUNNING"  # taken back: its record was intact
        assert d.submit(sleeper(work, "after", 0.1)) > running  # ids go on


def gated(work: Path, name: str, code: int) -> Path:
    """A job file: one node, waits for the file go-NAME, then exits `code`."""
    gate = work / f"go-{name}"
    return write_job(work, name, f'''
        name = "{name}"
        command = ["sh", "-c", "while [ ! -e {gate} ]; do sleep 0.05; done; exit {code}"]
        nodes = 1
        working_dir = "{work}"
        output = "/dev/null"
    ''')


def restart_by_cli(daemons: list[RunningDaemon], state: Path, nodes: int) -> subprocess.CompletedProcess[str]:
    """`elasticd start` as an operator types it; the daemon it started is stopped at the end."""
    r = cli(state, "elasticd", "start", "--local", str(nodes), "--min-free-space", "1", "--kill-wait", "1")
    rec = read_record(state)
    if r.returncode == 0 and rec is not None:
        daemons.append(RunningDaemon(state, rec, nodes))
    return r


def test_a_restart_after_kill_9_on_a_still_full_disk_takes_its_jobs_back_and_records_their_ends(
        tiny_fs: Path, tmp_path: Path, daemons: list) -> None:
    """The daemon is killed (OOM killer, kill -9) while the disk is full and restarted before
    space is freed: it was refused ('a start needs 256 KiB'), and the jobs it had started ran
    on unwatched, their ends never recorded. It starts on its reserve: takes the jobs back,
    records their ends, serves reads, refuses submissions naming the full disk, and takes
    work again once space is freed; nothing acknowledged is lost across restarts."""
    state = tiny_fs / "state"
    work = tmp_path / "work"
    work.mkdir()
    d = start(daemons, state, nodes=2, extra=["--min-free-space", "1"])
    fails, ends = d.submit(gated(work, "fails", 3)), d.submit(gated(work, "ends", 0))
    waiting = d.submit(sleeper(work, "waiting", 0.1))  # acknowledged, behind the two
    wrappers = {}
    for jid in (fails, ends):
        host = d.wait_event(jid, "launched")["hosts"][0]
        wrappers[jid] = read_pid(state / "jobs" / str(jid) / f"proc-{host}.pid")
    filler = fill(tiny_fs)
    kill9(d)

    r = restart_by_cli(daemons, state, 2)
    assert r.returncode == 0, r.stderr
    assert f"state directory {state} is full" in r.stderr and "starting on its reserve" in r.stderr, r.stderr
    assert "3 jobs recovered" in r.stdout and f"STATE DIRECTORY: state directory {state} is full" in r.stdout, \
        r.stdout
    jobs = queue(state)  # reads are served
    assert [jobs[j]["state"] for j in (fails, ends, waiting)] == ["RUNNING", "RUNNING", "PENDING"], jobs
    assert jobs[waiting]["note"] == "StateDiskFull"  # nothing starts on the reserve
    assert all(alive(p) for p in wrappers.values())
    r = cli(state, "esubmit", "--parsable", str(sleeper(work, "refused", 0.1)))
    assert r.returncode != 0
    assert f"state directory {state} is full" in r.stderr and "state_write_failed" in r.stderr, r.stderr

    # A job taken back is watched: its end is seen and recorded (a second kill -9 on the
    # still full disk keeps it).
    (work / "go-fails").touch()
    assert wait_until(lambda: queue(state)[fails]["state"] == "FAILED", 30)
    kill9(daemons[-1])
    assert restart_by_cli(daemons, state, 2).returncode == 0
    jobs = queue(state)
    assert (jobs[fails]["state"], jobs[fails]["exit_code"]) == ("FAILED", 3), jobs[fails]
    assert [jobs[j]["state"] for j in (ends, waiting)] == ["RUNNING", "PENDING"], jobs

    # Space freed: the reserve is made again, submissions are taken, the queue moves.
    filler.unlink()
    r = cli(state, "esubmit", "--parsable", str(sleeper(work, "late", 0.1)))
    assert r.returncode == 0, r.stderr
    late = int(r.stdout)
    assert late == waiting + 1  # the refused submission took no id
    (work / "go-ends").touch()
    d = daemons[-1]
    d.wait([ends, waiting, late], timeout=60)
    assert (state / RESERVE_FILE).stat().st_size >= RESERVE_BYTES
    kill9(d)
    start(daemons, state, nodes=2, extra=["--min-free-space", "1"])
    jobs = queue(state)
    assert {j: (jobs[j]["state"], jobs[j]["exit_code"]) for j in (fails, ends, waiting, late)} == {
        fails: ("FAILED", 3), ends: ("COMPLETED", 0), waiting: ("COMPLETED", 0), late: ("COMPLETED", 0)}, jobs


_APP = '''
import os, pathlib, sys, time
from elastic_apps import JobChannel, MalleableHandler, job_env
here = pathlib.Path.cwd()
env = job_env()
(here / f"up-{env.host}").write_text(str(os.getpid()))
if not env.is_leader:
    while not (here / "finish").exists():
        time.sleep(0.05)
    sys.exit(0)
job = JobChannel.connect(env)

class H(MalleableHandler):
    def pre_shrink(self, n):
        (here / "asked").write_text(str(n))
        while not (here / "go").exists():
            time.sleep(0.05)
        try:  # a value the daemon cannot save is an error, never an `ok` a restart forgets
            job.put("address", "here")
            (here / "put").write_text("ok")
        except Exception as exc:
            (here / "put").write_text(getattr(exc, "code", repr(exc)))
        # The first hosts after the leader's: the daemon's own default takes the last ones.
        return [h for h in job.hosts if h != env.host][:n]

    def post_shrink(self, n, removed):
        (here / "shrunk").write_text(",".join(removed))

job.register(H())
(here / "registered").touch()
while not (here / "finish").exists():
    time.sleep(0.05)
job.disable()
'''


def test_an_answer_that_cannot_be_saved_is_retried_by_the_library_and_settles_on_the_hosts_it_named(
        tiny_fs: Path, tmp_path: Path, daemons: list) -> None:
    state = tiny_fs / "state"
    work = tmp_path / "work"
    work.mkdir()
    (work / "app.py").write_text(_APP)
    d = start(daemons, state, nodes=3, extra=["--min-free-space", "1", "--order-deadline", "6"])
    jid = d.submit(write_job(work, "app", f'''
        name = "app"
        command = ["{sys.executable}", "app.py"]
        nodes = {{ min = 1, max = 3 }}
        kind = "malleable"
        time_limit = "5"
        working_dir = "{work}"
        output = "out-%N.txt"
    '''))
    assert wait_until(lambda: (work / "registered").exists(), 30)
    assert d.job(jid)["hosts"] == ["node1", "node2", "node3"]
    up = [work / f"up-{h}" for h in ("node1", "node2", "node3")]
    assert wait_until(lambda: all(f.exists() and f.read_text() for f in up), 30)
    pids = {h: int((work / f"up-{h}").read_text()) for h in ("node1", "node2", "node3")}
    assert d.cli("elasticd", "resize", "--no-wait", str(jid), "2").returncode == 0
    assert wait_until(lambda: (work / "asked").exists(), 30)
    filler, _ = fill_until_writes_fail(state, work, tiny_fs, nodes=3)
    (work / "go").touch()  # the handler gives up node2; its answer cannot be saved
    # At the deadline the daemon settles the order with that answer, not with the last host.
    info = d.wait_event(jid, "shrunk", timeout=30)
    assert info["hosts"] == ["node1", "node3"], info["hosts"]
    shrunk = work / "shrunk"
    assert wait_until(lambda: shrunk.exists() and shrunk.read_text() != "", 30)  # the retry was taken: ok
    assert (work / "shrunk").read_text() == "node2"
    assert (work / "put").read_text() == "state_write_failed"
    assert alive(pids["node3"])
    assert wait_until(lambda: not alive(pids["node2"]), 30)
    out = (work / "out-node1.txt").read_text()
    assert "Traceback" not in out and "state_write_failed" in out, out  # said once, as a warning
    assert status(state)["storage"] is not None  # still full: nothing claims otherwise
    filler.unlink()
    assert wait_until(lambda: status(state)["storage"] is None, 30)  # saved once there is room
    assert "internal error" not in (state / "daemon.log").read_text()
    kill9(d)
    d = start(daemons, state, nodes=3, extra=["--min-free-space", "1"])
    assert d.job(jid)["hosts"] == ["node1", "node3"]  # what was settled was saved
    (work / "finish").touch()
    d.wait([jid], timeout=30)


def test_a_cancel_on_a_full_disk_ends_the_job_and_says_what_could_not_be_saved(
        tiny_fs: Path, tmp_path: Path, daemons: list) -> None:
    state = tiny_fs / "state"
    work = tmp_path / "work"
    work.mkdir()
    d = start(daemons, state, nodes=1, extra=["--min-free-space", "1", "--schedule-interval", "0.5"])
    hog = d.submit(sleeper(work, "hog"))
    d.wait_event(hog, "launched")
    waiting = d.submit(sleeper(work, "waiting", 0.1))
    filler, acked = fill_until_writes_fail(state, work, tiny_fs, nodes=1)
    # Pending on an idle node would say nothing; they say why.
    r = cli(state, "ecancel", str(hog))
    assert r.returncode == 1
    assert f"job {hog} is cancelled, but the cancel could not be saved" in r.stderr, r.stderr
    assert "database or disk is full" in r.stderr and "FAILED with SIGTERM's signal" in r.stderr
    assert queue(state)[hog]["state"] == "CANCELLED"
    assert wait_until(lambda: not [p for p in psutil.process_iter(["environ"])
                                   if of_job(p.info["environ"] or {}, state, hog)], 30)
    jobs = queue(state)
    assert jobs[waiting]["state"] == "PENDING" and jobs[waiting]["note"] == "StateDiskFull"
    text = cli(state, "equeue")
    assert "(StateDiskFull)" in text.stdout, text.stdout
    st = cli(state, "elasticd", "status")
    assert "short of space" in st.stdout and "the last write failed" in st.stdout, st.stdout
    filler.unlink()
    d.wait([waiting], timeout=30)  # room again: saved, and the queue moves
    assert status(state)["storage"] is None
    assert "writable again" in (state / "daemon.log").read_text()
    kill9(d)
    start(daemons, state, nodes=1, extra=["--min-free-space", "1"])
    assert queue(state)[hog]["state"] == "CANCELLED"  # the cancel was saved once it could be
    assert set(acked) <= set(queue(state))


def test_a_stop_on_a_full_disk_says_which_final_states_it_could_not_save(
        tiny_fs: Path, tmp_path: Path, daemons: list) -> None:
    state = tiny_fs / "state"
    work = tmp_path / "work"
    work.mkdir()
    d: RunningDaemon = start(daemons, state, nodes=1, extra=["--min-free-space", "1"])
    job = d.submit(sleeper(work, "long"))
    d.wait_event(job, "launched")
    filler, _ = fill_until_writes_fail(state, work, tiny_fs, nodes=1)
    r = cli(state, "elasticd", "stop")
    assert r.returncode == 1
    assert "elasticd stopped" in r.stdout
    assert f"could not save the final state of job(s) {job}" in r.stderr, r.stderr
    assert "FAILED with the signal that ended it" in r.stderr and "database or disk is full" in r.stderr
    assert not alive(d.record.pid)
    filler.unlink()
    start(daemons, state, nodes=1)
    # What the stop said a restart would show: its process's recorded end (SIGTERM).
    ended = queue(state)[job]
    assert (ended["state"], ended["exit_code"], ended["exit_signal"]) == ("FAILED", 0, 15), ended


def test_a_failed_write_is_shown_until_a_write_reaches_the_disk_even_with_nothing_else_to_save(
        tiny_fs: Path, tmp_path: Path, daemons: list) -> None:
    state = tiny_fs / "state"
    work = tmp_path / "work"
    work.mkdir()
    d = start(daemons, state, nodes=1, extra=["--min-free-space", "1", "--schedule-interval", "0.5"])
    job = d.submit(sleeper(work, "steady"))
    d.wait_event(job, "launched")
    filler, _ = fill_until_writes_fail(state, work, tiny_fs, nodes=1)
    for _ in range(6):  # passes and empty commits run meanwhile: none may claim the disk is back
        assert "the last write failed" in (status(state)["storage"] or "")
        psutil.time.sleep(0.5)
    filler.unlink()
    # Nothing changed meanwhile, so only a write that reaches the disk can clear it.
    assert wait_until(lambda: status(state)["storage"] is None, 20), status(state)["storage"]
    assert "state directory writable again; journal up to date" in (state / "daemon.log").read_text()


def test_a_job_that_ends_while_the_disk_is_full_keeps_its_exit_status_across_a_restart(
        tiny_fs: Path, tmp_path: Path, daemons: list) -> None:
    """Its status was written at its end as a new file, which a full disk left empty: after
    a restart the job (FAILED, exit 3) was taken for one whose processes were lost
    (NODE_FAIL). The status file is made at full size at the launch, while there is room,
    and filled in place at the end."""
    state = tiny_fs / "state"
    work = tmp_path / "work"
    work.mkdir()
    gate = work / "gate"
    d = start(daemons, state, nodes=1, extra=["--min-free-space", "1"])
    jid = d.submit(write_job(work, "ends", f'''
        name = "ends"
        command = ["sh", "-c", "while [ ! -e {gate} ]; do sleep 0.05; done; exit 3"]
        nodes = 1
        working_dir = "{work}"
        output = "/dev/null"
    '''))
    d.wait_event(jid, "launched")
    filler = fill(tiny_fs)
    kill9(d)  # what it learns now it cannot save: only the job's own status file can tell
    gate.touch()
    wrapper = read_pid(state / "jobs" / str(jid) / "proc-node1.pid")  # written once it runs, maybe after `launched`
    assert wait_until(lambda: not alive(wrapper), 30)
    filler.unlink()
    d = start(daemons, state, nodes=1, extra=["--min-free-space", "1"])
    d.wait([jid], timeout=30)
    info = d.job(jid)
    assert (info["state"], info["exit_code"]) == ("FAILED", 3), info
