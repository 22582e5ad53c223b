"""Process faults: jobs that ignore SIGTERM, detach their children, flood their output, cannot
write it; a batch stopped by a signal; a stop with stuck jobs. What must hold: every process a
job started ends with the job, and every job ends with the right state, exit and reason."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from datetime import datetime
from pathlib import Path

import psutil
import pytest
from faults_support import cli, start

from conftest import BIN, FreezableFs, RunningDaemon, alive, read_pid, wait_gone, wait_until, write_job

pytestmark = pytest.mark.timeout(120)


def stop_taken_at(state_dir: Path) -> float:
    """When the daemon took a stop (its log's `stopping:` line; wall clock): a stop timed from
    there leaves out the `elasticd stop` CLI's own start-up, which alone takes seconds on a
    loaded machine, and nothing the daemon does."""
    for line in (state_dir / "daemon.log").read_text().splitlines():
        if " stopping: ending " in line:
            return datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S,%f").timestamp()
    raise AssertionError(f"no stop in {state_dir / 'daemon.log'}")


def started_on(info: dict) -> list[str]:
    """The hosts a job started on (an ended job holds none)."""
    return next(e["hosts"] for e in info["events"] if e["event"] == "started")


def job(folder: Path, name: str, script: str, **extra: object) -> Path:
    """A one-host job running `script` under sh; `extra` sets or overrides fields."""
    fields: dict[str, object] = {"name": name, "command": ["sh", "-c", script], "nodes": 1, "time_limit": "2",
                                 "working_dir": str(folder), "output": f"{name}.out", **extra}
    path = folder / f"{name}.toml"
    path.write_text("".join(f"{k} = {json.dumps(v)}\n" for k, v in fields.items()))  # JSON values are TOML
    return path


def test_a_job_that_ignores_sigterm_is_killed_exactly_kill_wait_later(tmp_path: Path, daemons: list) -> None:
    d = start(daemons, tmp_path / "state", nodes=1, kill_wait=2.0)
    jid = d.submit(job(tmp_path, "stubborn", "trap '' TERM; echo ready; sleep 60"))
    d.wait_event(jid, "launched")
    assert wait_until(lambda: (tmp_path / "stubborn.out").exists() and "ready" in (tmp_path / "stubborn.out").read_text(), 30)
    assert d.cli("ecancel", str(jid)).returncode == 0
    d.wait([jid], timeout=30)
    info = d.job(jid)
    assert info["state"] == "CANCELLED" and info["exit"] == "0:9", info  # SIGKILLed, and says so
    # From the cancel taken to the end seen, on the daemon's clock (the ecancel CLI's own
    # start-up, seconds on a loaded machine, is no part of it): SIGTERM once, then kill-wait.
    times = {e["event"]: e["time"] for e in info["events"]}
    took = times["ended"] - times["ending"]
    assert 2.0 <= took < 3.5, (took, info["events"])


@pytest.mark.parametrize("escape", [
    "setsid sleep 300 & echo $! > {pids}",
    "(sleep 300 & echo $! > {pids}) &",  # double fork: the grandchild's parent is gone at once
    "python3 -c 'import os, time; os.setpgid(0, 0); open(\"{pids}\", \"w\").write(str(os.getpid())); time.sleep(300)' &",
])
@pytest.mark.parametrize("mode", ["cgroup", "sweep"])
def test_processes_a_job_detaches_end_with_the_job(tmp_path: Path, daemons: list, escape: str, mode: str,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """In a cgroup of its own where the machine allows one, else found by its tag (README:
    what is guaranteed per mode)."""
    if mode == "sweep":
        monkeypatch.setenv("ELASTIC_NO_CGROUP", "1")
    pids = tmp_path / "pids"
    go = tmp_path / "go"
    d = start(daemons, tmp_path / "state", nodes=1, kill_wait=1.0)
    # The job ends once the test has seen its escaped process alive (a job of `sleep 1` had
    # ended, and taken it along, before a loaded machine's esubmit returned).
    jid = d.submit(job(tmp_path, "escaper", escape.format(pids=pids) + f"\nwhile [ ! -e {go} ]; do sleep 0.1; done"))
    assert wait_until(lambda: pids.exists() and pids.read_text().strip().isdigit(), 30)
    escaped = int(pids.read_text())
    assert alive(escaped)
    go.touch()
    d.wait([jid], timeout=60)
    assert d.job(jid)["state"] == "COMPLETED"
    assert wait_until(lambda: not alive(escaped), 30), f"process {escaped} escaped its job"
    log = (tmp_path / "state" / "daemon.log").read_text()
    assert f"containment of job processes: {mode}" in log or mode == "cgroup" and "sweep" in log


def test_a_job_flooding_its_output_is_ended_at_its_cap_naming_it(tmp_path: Path, daemons: list) -> None:
    d = start(daemons, tmp_path / "state", nodes=1, kill_wait=1.0)
    jid = d.submit(job(tmp_path, "flood", "yes", output_cap=2))
    d.wait([jid], timeout=30)
    info = d.job(jid)
    assert info["state"] == "FAILED" and "output cap of 2 MiB" in (info["reason"] or ""), info
    size = (tmp_path / "flood.out").stat().st_size
    assert 2 << 20 < size < 2 << 30  # stopped within a check interval of the cap, far from filling a disk


def test_an_unwritable_output_folder_fails_the_launch_and_leaves_the_daemon_responsive(
        tmp_path: Path, daemons: list) -> None:
    ro = tmp_path / "ro"
    ro.mkdir()
    (ro / "sub").mkdir()
    os.chmod(ro / "sub", 0o500)
    d = start(daemons, tmp_path / "state", nodes=1, kill_wait=1.0)
    bad = d.submit(job(tmp_path, "cannot", "true", output="ro/nothere/out.txt"))
    d.wait([bad], timeout=60)
    info = d.job(bad)
    assert info["state"] == "FAILED" and "cannot open output file" in (info["reason"] or ""), info
    assert info["exit"] == "1:0"
    missing = d.submit(job(tmp_path, "missing", "true"))
    d.wait([missing])
    notfound = tmp_path / "nf.toml"
    notfound.write_text(f'name = "nf"\ncommand = ["no-such-program-x"]\nnodes = 1\nworking_dir = "{tmp_path}"\n')
    nf = d.submit(notfound)
    d.wait([nf])
    assert d.job(nf)["state"] == "FAILED" and d.job(nf)["exit"] == "127:0"
    assert cli(d.state_dir, "elasticd", "stop").returncode == 0
    assert time.time() - stop_taken_at(d.state_dir) < 1.0 + 5


def test_stop_returns_within_kill_wait_and_five_seconds_with_jobs_that_ignore_sigterm(
        tmp_path: Path, daemons: list) -> None:
    d = start(daemons, tmp_path / "state", nodes=2, kill_wait=2.0)
    ids = [d.submit(job(tmp_path, f"s{i}", "trap '' TERM; sleep 60")) for i in range(2)]
    for j in ids:
        d.wait_event(j, "launched")
    r = cli(d.state_dir, "elasticd", "stop")
    assert r.returncode == 0, r.stderr
    assert time.time() - stop_taken_at(d.state_dir) < 2.0 + 5
    assert not alive(d.record.pid)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP])
def test_elasticd_run_stopped_by_a_signal_ends_its_daemon_and_jobs(tmp_path: Path, sig: signal.Signals) -> None:
    marker = tmp_path / "pids"
    job(tmp_path, "long", f"echo $$ >> {marker}; sleep 120")
    run = subprocess.Popen([str(BIN / "elasticd"), "run", str(tmp_path), "--local", "1", "--kill-wait", "1"],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        assert wait_until(lambda: marker.exists() and marker.read_text().strip(), 30)
        job_pid = int(marker.read_text().split()[0])
        daemon = [p for p in psutil.Process(run.pid).children(recursive=False)] or []
        run.send_signal(sig)
        out, err = run.communicate(timeout=30)
    finally:
        if run.poll() is None:
            os.killpg(run.pid, signal.SIGKILL)
    assert run.returncode == 128 + sig, (out, err)
    assert wait_until(lambda: not alive(job_pid), 30), "the batch's job outlived `elasticd run`"
    for p in daemon:
        assert wait_until(lambda p=p: not alive(p.pid), 30), "the batch's daemon outlived `elasticd run`"


def _read_fifo(path: Path) -> str:
    """Be the FIFO's reader: what the job writes to it, up to its end."""
    with open(path) as f:
        return f.read()


@pytest.mark.parametrize("field", ["output", "error"])
def test_a_job_writing_to_a_fifo_nobody_reads_waits_alone_and_its_output_arrives_once_read(
        tmp_path: Path, daemons: list, field: str) -> None:
    """Slurm opens a job's files in the job step, not in the controller: the daemon opens
    them without waiting and leaves a FIFO without a reader to the job's own process."""
    fifo = tmp_path / "job.fifo"
    os.mkfifo(fifo)
    d = start(daemons, tmp_path / "state", nodes=2, kill_wait=1.0)
    script = "echo to-stdout; echo to-stderr >&2"
    waiting = d.submit(job(tmp_path, "waiting", script, **{field: fifo.name}))
    d.wait_event(waiting, "launched")
    # The daemon answers its tools while the job waits for a reader, and runs other jobs.
    r = d.cli("equeue", timeout=20)
    assert r.returncode == 0 and "waiting" in r.stdout, (r.stdout, r.stderr)
    other = d.submit(job(tmp_path, "other", "echo other done"))
    d.wait([other], timeout=30)
    assert d.job(other)["state"] == "COMPLETED" and (tmp_path / "other.out").read_text() == "other done\n"
    assert d.job(waiting)["state"] == "RUNNING"
    # A reader comes: the job's output arrives and the job ends as its command did.
    got = _read_fifo(fifo)
    d.wait([waiting], timeout=30)
    info = d.job(waiting)
    assert info["state"] == "COMPLETED" and info["exit"] == "0:0", info
    if field == "output":  # stdout and, with no `error`, stderr
        assert got == "to-stdout\nto-stderr\n"
    else:
        assert got == "to-stderr\n" and (tmp_path / "waiting.out").read_text() == "to-stdout\n"


def test_a_job_waiting_for_its_fifos_reader_is_cancelled_by_sigterm_leaving_no_process(
        tmp_path: Path, daemons: list) -> None:
    fifo = tmp_path / "job.fifo"
    os.mkfifo(fifo)
    d = start(daemons, tmp_path / "state", nodes=1, kill_wait=60.0)
    jid = d.submit(job(tmp_path, "unread", "echo never read", output=fifo.name))
    d.wait_event(jid, "launched")
    # The wrapper writes its pid once it runs, which may be after `launched`.
    group = read_pid(tmp_path / "state" / "jobs" / str(jid) / "proc-node1.pid")
    assert d.cli("ecancel", str(jid)).returncode == 0
    d.wait([jid], timeout=30)  # half the kill-wait: SIGTERM alone ended it
    info = d.job(jid)
    assert info["state"] == "CANCELLED" and info["exit"] == "0:15", info
    assert not [p for p in psutil.process_iter() if _in_group(p, group)]


def _in_group(p: psutil.Process, group: int) -> bool:
    try:
        return os.getpgid(p.pid) == group and p.status() != psutil.STATUS_ZOMBIE
    except (ProcessLookupError, psutil.Error):
        return False


def test_an_output_path_that_cannot_be_opened_as_a_file_still_fails_the_launch_naming_it(
        tmp_path: Path, daemons: list) -> None:
    """Only an open that would wait is left to the job; one that fails is named at launch as before
    (a listening UNIX socket answers an open like a FIFO without a reader: ENXIO)."""
    import socket

    sock_path = tmp_path / "a.sock"
    with socket.socket(socket.AF_UNIX) as s:
        s.bind(str(sock_path))
        d = start(daemons, tmp_path / "state", nodes=1, kill_wait=1.0)
        jid = d.submit(job(tmp_path, "sock", "true", output=sock_path.name))
        d.wait([jid], timeout=20)
    info = d.job(jid)
    assert info["state"] == "FAILED" and f"cannot open output file {sock_path}" in (info["reason"] or ""), info


@pytest.mark.parametrize("thawed", ["in time", "too late"])
def test_an_output_file_on_a_hung_file_system_holds_only_its_own_launch(
        tmp_path: Path, daemons: list, freezable_fs: FreezableFs, monkeypatch: pytest.MonkeyPatch, thawed: str) -> None:
    """Even an open with O_NONBLOCK waits for a hung file system: the daemon opens from a
    thread, goes on answering and running other jobs, and gives the launch ELASTIC_FS_WAIT
    seconds before it fails it, naming the path (the thread's late descriptor is closed)."""
    monkeypatch.setenv("ELASTIC_FS_WAIT", "60" if thawed == "in time" else "3")
    out = freezable_fs.mount / "hung.out"
    d = start(daemons, tmp_path / "state", nodes=2, kill_wait=1.0)
    freezable_fs.freeze()
    hung = d.submit(job(tmp_path, "hung", "echo written", output=str(out)))
    r = d.cli("equeue", timeout=20)
    assert r.returncode == 0 and "hung" in r.stdout, (r.stdout, r.stderr)
    other = d.submit(job(tmp_path, "other", "echo other done"))
    d.wait([other], timeout=30)
    assert d.job(other)["state"] == "COMPLETED" and (tmp_path / "other.out").read_text() == "other done\n"
    if thawed == "in time":
        assert "launched" not in d.events(hung)  # still opening its output
        freezable_fs.thaw()
        d.wait([hung], timeout=30)
        assert d.job(hung)["state"] == "COMPLETED" and out.read_text() == "written\n"
        return
    d.wait([hung], timeout=30)
    info = d.job(hung)
    assert info["state"] == "FAILED", info
    assert f"cannot open output file {out}: no answer from its file system within 3 s" in (info["reason"] or ""), info
    freezable_fs.thaw()
    daemon = psutil.Process(d.record.pid)
    assert wait_until(lambda: out.exists() and not any(f.path == str(out) for f in daemon.open_files()), 30)


def test_a_job_cancelled_while_its_grow_waits_on_a_hung_file_system_ends_and_frees_its_nodes(
        tmp_path: Path, daemons: list, freezable_fs: FreezableFs, monkeypatch: pytest.MonkeyPatch) -> None:
    """The grow's new process writes its output on a file system that does not answer: its
    start waits ELASTIC_FS_WAIT seconds, then fails. The cancel, meanwhile, ended the job's
    leader, whose exit came while a start was on its way (the job could not be over then):
    the failed start settles the job. Before, it stayed ending for ever and held both nodes."""
    monkeypatch.setenv("ELASTIC_FS_WAIT", "15")  # room for two CLI calls on a loaded machine
    d, rec = grow_on_a_frozen_file_system(tmp_path, daemons, freezable_fs)
    r = cli(d.state_dir, "elasticd", "resize", str(rec), "2", "--no-wait")
    assert r.returncode == 0, r.stderr
    d.wait_event(rec, "grow_ordered")
    assert cli(d.state_dir, "ecancel", str(rec)).returncode == 0
    # The cancel came while the grow's start was still waiting on its output.
    assert d.job(rec)["state"] == "RUNNING" and "order_failed" not in d.events(rec), d.events(rec)
    d.wait([rec], timeout=60)
    info = d.job(rec)
    assert info["state"] == "CANCELLED", info
    after = d.submit(job(tmp_path, "after", "echo both nodes", nodes=2))
    d.wait([after], timeout=30)
    assert d.job(after)["state"] == "COMPLETED"


def grow_on_a_frozen_file_system(tmp_path: Path, daemons: list, fs: FreezableFs,
                                 extra: list[str] | None = None) -> tuple[RunningDaemon, int]:
    """A daemon on node1 and node2, and a malleable recorder job on node2 whose grow's process
    (task 1, on node1) writes its output on `fs`, frozen now: a grow's start waits
    ELASTIC_FS_WAIT seconds on it, then fails. The daemon and the job, not yet ordered."""
    import sys

    recorder = Path(__file__).resolve().parent.parent / "apps" / "recorder.py"
    outs = tmp_path / "outs"
    (outs / "0").mkdir(parents=True)
    (outs / "1").symlink_to(fs.mount)
    d = start(daemons, tmp_path / "state", nodes=2, kill_wait=1.0, extra=extra)
    blocker = d.submit(job(tmp_path, "blocker", "sleep 300"))  # on node1: the job starts on node2
    d.wait_event(blocker, "launched")
    rec = d.submit(write_job(tmp_path, "rec", f'''
        name = "rec"
        command = ["{sys.executable}", "{recorder}"]
        nodes = {{ min = 1, max = 2 }}
        kind = "malleable"
        working_dir = "{tmp_path}"
        output = "{outs}/%t/rec.out"
        time_limit = "3"
    '''))
    d.wait_event(rec, "registered")
    assert d.job(rec)["hosts"] == ["node2"]
    assert cli(d.state_dir, "ecancel", str(blocker)).returncode == 0
    d.wait([blocker])
    fs.freeze()
    return d, rec


def app_told_and_node1_free(d: RunningDaemon, tmp_path: Path) -> None:
    """After a grow onto node1 was undone: the recorder's application was told (its library's
    host list is node2 alone), and node1 is free: a job that needs it runs beside the job."""
    told = tmp_path / "events.log"
    assert wait_until(lambda: "hosts_changed launch_failed node2 lost=node1" in told.read_text(), 30), \
        told.read_text()
    other = d.submit(job(tmp_path, "other", "echo on the freed node"))
    d.wait([other], timeout=30)
    assert d.job(other)["state"] == "COMPLETED" and started_on(d.job(other)) == ["node1"]


def test_a_daemon_killed_after_grown_before_the_grows_start_gives_the_host_back_when_restarted(
        tmp_path: Path, daemons: list, freezable_fs: FreezableFs, monkeypatch: pytest.MonkeyPatch) -> None:
    """The application answered `grown`; the grow's start still waits on its output's file
    system when the daemon is killed (kill -9): no process of the job was ever started on
    node1. The restarted daemon finds none there and gives node1 back as for a start that
    failed (grow_failed, released): the job runs on at its old size, its application is told,
    the host takes the next job. Before, recovery only looked at open grows: the job held
    node1, with nothing of it there, for the rest of its run (no `released`)."""
    monkeypatch.setenv("ELASTIC_FS_WAIT", "300")  # the start never fails on its own here
    d, rec = grow_on_a_frozen_file_system(tmp_path, daemons, freezable_fs)
    r = cli(d.state_dir, "elasticd", "resize", str(rec), "2", "--no-wait")
    assert r.returncode == 0, r.stderr
    info = d.wait_event(rec, "grown", timeout=15)
    assert info["hosts"] == ["node2", "node1"], info
    pid = d.record.pid
    os.kill(pid, signal.SIGKILL)
    # The thread opening the output waits uninterruptibly: the rest of the daemon goes first
    # (its main thread a zombie). Thawed, that thread dies without running another line.
    assert wait_until(lambda: not alive(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE, 30)
    freezable_fs.thaw()
    wait_gone(pid, 30)
    assert (d.state_dir / "jobs" / str(rec) / "proc-node1.pid").read_text().strip() == ""  # never started

    d = start(daemons, tmp_path / "state", nodes=2, kill_wait=1.0)
    info = d.wait_event(rec, "released", timeout=30)
    assert info["state"] == "RUNNING" and info["hosts"] == ["node2"], info
    failed = next(e for e in info["events"] if e["event"] == "grow_failed")
    assert failed["cause"] == "fault" and "node1" in failed["detail"] and "restart" in failed["detail"], failed
    app_told_and_node1_free(d, tmp_path)
    (tmp_path / "finish").touch()
    d.wait([rec], timeout=30)
    assert d.job(rec)["state"] == "COMPLETED", d.job(rec)


def test_resize_waiting_on_a_grow_undone_after_grown_fails_naming_the_host_and_why_and_the_metric_counts_it(
        tmp_path: Path, daemons: list, freezable_fs: FreezableFs, monkeypatch: pytest.MonkeyPatch) -> None:
    """`elasticd resize` (waiting) on a grow whose new process cannot open its output: the
    application answers `grown` at once, the start fails ELASTIC_FS_WAIT seconds later and the
    host goes back. The command waits for that start and exits 1 saying the grow was undone,
    naming the host and the launcher's reason; elastic_grows_failed_total counts it. Before,
    it printed "grown to 2 nodes" and exited 0 as soon as the application answered."""
    from test_metrics import free_port, scrape

    monkeypatch.setenv("ELASTIC_FS_WAIT", "12")  # the application answers long before (seconds under load)
    port = free_port()
    d, rec = grow_on_a_frozen_file_system(tmp_path, daemons, freezable_fs, extra=["--metrics-port", str(port)])
    assert scrape(port)["elastic_grows_failed_total"] == 0
    r = cli(d.state_dir, "elasticd", "resize", str(rec), "2", timeout=120)
    assert r.returncode == 1, (r.stdout, r.stderr)
    assert f"job {rec}: grown to 2 nodes, then undone: " in r.stderr, r.stderr
    assert "could not be started on node1" in r.stderr, r.stderr
    assert "no answer from its file system within 12 s" in r.stderr, r.stderr
    events = d.events(rec)
    assert "order_failed" not in events and events.index("grown") < events.index("grow_failed"), events
    assert wait_until(lambda: scrape(port)["elastic_grows_failed_total"] == 1, 10), scrape(port)
    assert scrape(port)['elastic_resizes_total{cause="user",outcome="grown"}'] == 1
    (tmp_path / "finish").touch()


def test_a_grow_the_application_took_before_its_new_process_failed_to_start_gives_the_host_back(
        tmp_path: Path, daemons: list, freezable_fs: FreezableFs, monkeypatch: pytest.MonkeyPatch) -> None:
    """The grow's new process writes its output on a file system that does not answer: its
    start fails ELASTIC_FS_WAIT seconds later, long after the application answered `grown`.
    The job goes on at its old size without the host, which is free for the next job, and the
    application is told (`hosts ... reason=launch_failed`), so its library's host list is
    right; a restart keeps it so. Before, the failure was only logged: the job held the host,
    with nothing of it running there, for the rest of its run, and its application counted it."""
    from faults_support import kill9

    monkeypatch.setenv("ELASTIC_FS_WAIT", "20")  # the application answers long before (seconds under load)
    d, rec = grow_on_a_frozen_file_system(tmp_path, daemons, freezable_fs)
    r = cli(d.state_dir, "elasticd", "resize", str(rec), "2", "--no-wait")
    assert r.returncode == 0, r.stderr
    info = d.wait_event(rec, "grown", timeout=15)
    assert info["hosts"] == ["node2", "node1"] and "order_failed" not in d.events(rec), info["events"]
    info = d.wait_event(rec, "released", timeout=60)  # the start gave up on its output, the host came back
    assert info["state"] == "RUNNING" and info["hosts"] == ["node2"], info
    failed = next(e for e in info["events"] if e["event"] == "grow_failed")
    assert failed["cause"] == "fault" and "node1" in failed["detail"], failed
    assert "no answer from its file system within 20 s" in failed["detail"], failed
    released = [e for e in info["events"] if e["event"] == "released"][-1]
    assert released["nodes"] == 1 and released["cause"] == "fault", released
    app_told_and_node1_free(d, tmp_path)
    assert d.job(rec)["state"] == "RUNNING"

    # A crash and a restart keep it so: the job's history, its one host, the other one free.
    freezable_fs.thaw()  # the killed daemon's thread still waits on the open; thawed, it can exit
    kill9(d)
    d = start(daemons, tmp_path / "state", nodes=2, kill_wait=1.0)
    info = d.wait_event(rec, "registered", count=2, timeout=60)  # found again, its application back
    assert info["state"] == "RUNNING" and info["hosts"] == ["node2"], info
    assert "grow_failed" in d.events(rec)
    again = d.submit(job(tmp_path, "again", "echo on the freed node again"))
    d.wait([again], timeout=30)
    assert d.job(again)["state"] == "COMPLETED" and started_on(d.job(again)) == ["node1"]
    assert "the application says it runs on" not in (d.state_dir / "daemon.log").read_text()
    (tmp_path / "finish").touch()
    d.wait([rec], timeout=30)
    assert d.job(rec)["state"] == "COMPLETED", d.job(rec)


def _disk_sleep(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_DISK_SLEEP
    except psutil.NoSuchProcess:
        return False


def test_a_stop_that_does_not_see_a_job_end_names_it_apart_from_the_ended_ones_and_fails(
        tmp_path: Path, daemons: list, freezable_fs: FreezableFs) -> None:
    """A process blocked on a file system that hangs (frozen) outlives SIGTERM and SIGKILL:
    the stop gives up on its job after the kill-wait + 3 s. The answer says which jobs it saw
    end and which it did not, and what the next start does about those; the exit is non-zero.
    Before, every job running at the stop was printed as ended (CANCELLED), exit 0, while the
    daemon's log said it had not seen one of them end."""
    gate, pid_file = tmp_path / "go", tmp_path / "stuck.pid"
    d = start(daemons, tmp_path / "state", nodes=2, kill_wait=1.0)
    stuck = d.submit(job(tmp_path, "stuck", f"echo $$ > {pid_file}; while [ ! -e {gate} ]; do sleep 0.05; done; "
                                            f"echo x > {freezable_fs.mount}/x"))
    fine = d.submit(job(tmp_path, "fine", "sleep 120"))
    for j in (stuck, fine):
        d.wait_event(j, "launched")
    assert wait_until(lambda: pid_file.exists() and pid_file.read_text().strip().isdigit(), 30)
    pid = int(pid_file.read_text())
    freezable_fs.freeze()
    gate.touch()
    assert wait_until(lambda: _disk_sleep(pid), 30), "the job's process did not block on the frozen file system"
    r = cli(d.state_dir, "elasticd", "stop")
    assert r.returncode == 1, (r.stdout, r.stderr)
    assert f"ended running job {fine} (CANCELLED)" in r.stdout, r.stdout
    assert f"job(s) {stuck} not seen ending" in r.stderr and f"`elasticd start` on {d.state_dir}" in r.stderr, r.stderr
    assert "elasticd stopped" in r.stdout and not alive(d.record.pid)
    freezable_fs.thaw()
    assert wait_until(lambda: not alive(pid), 30)
    # What the stop said the next start does: it takes the job back and settles it.
    d = start(daemons, tmp_path / "state", nodes=2, kill_wait=1.0)
    d.wait([stuck], timeout=30)
    assert d.job(stuck)["state"] in ("CANCELLED", "NODE_FAIL") and d.job(fine)["state"] == "CANCELLED"
