"""Crash safety: SIGKILL the daemon, start a new one on the same state directory, and the
jobs carry on -- queue order and ids kept, running jobs found again (their processes kept
running, their applications reconnected), orders in flight settled, nothing run twice.

(A node that vanishes mid-run is tested on the virtual cluster:
test_cluster_vcluster.py::test_node_that_drops_mid_job_fails_rigid_jobs_shrinks_malleable_ones_and_is_cleaned_on_return.)
"""

from __future__ import annotations

import json
import os
import signal
import socket
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from conftest import (
    FreezableFs,
    RunningDaemon,
    alive,
    read_pid,
    start_daemon,
    stop_daemon,
    wait_gone,
    wait_until,
    write_job,
)
from elastic_protocol.control import Resize, Submit
from elastic_protocol.framing import LineSocket
from elastic_protocol.jobspec import JobSpec
from test_app_channel_faults import Raw
from test_malleability import app_log, finish, pid_of, recorder_job

pytestmark = pytest.mark.timeout(120)


def sigkill(d: RunningDaemon) -> None:
    """The crash: the daemon's own pid only; its jobs' process groups are left alone."""
    os.kill(d.record.pid, signal.SIGKILL)
    wait_gone(d.record.pid)


def job_pgids(state_dir: Path) -> list[int]:
    """Every job process group the daemons of this state directory started (wrapper pid files)."""
    out = []
    for f in (state_dir / "jobs").glob("*/proc-*.pid"):
        try:
            out.append(int(f.read_text()))
        except ValueError:
            continue
    return out


class Daemons:
    """The daemons of one state directory, one after the other; all cleaned up at the end."""

    def __init__(self, state_dir: Path, nodes: int, extra: list[str]) -> None:
        self.state_dir, self.nodes, self.extra = state_dir, nodes, extra
        self.current: RunningDaemon | None = None

    def start(self) -> RunningDaemon:
        self.current = start_daemon(self.state_dir, nodes=self.nodes, extra=self.extra)
        return self.current

    def close(self) -> None:
        if self.current is not None and alive(self.current.record.pid):
            stop_daemon(self.current.record)
        for pgid in job_pgids(self.state_dir):  # a failed test may have left jobs of a killed daemon
            try:
                os.killpg(pgid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass


@pytest.fixture
def daemons(tmp_path: Path) -> Iterator[Daemons]:
    ds = Daemons(tmp_path / "state", 4, ["--order-deadline", "5"])
    try:
        yield ds
    finally:
        ds.close()


def sleep_job(work: Path, name: str, seconds: float, nodes: int = 1) -> JobSpec:
    return JobSpec(name=name, command=["sleep", str(seconds)], nodes=nodes, working_dir=str(work),
                   output="out-%j.txt")


def test_sigkilled_daemon_restarts_with_the_queue_in_order_running_jobs_found_and_new_ids_after(
        daemons: Daemons, workdir: Path) -> None:
    d = daemons.start()
    with d.client() as c:
        running = [c.request(Submit(spec=sleep_job(workdir, f"run{i}", 30)))["job_id"] for i in range(4)]
        pending = [c.request(Submit(spec=sleep_job(workdir, f"wait{i}", 30, nodes=1 + i % 2)))["job_id"]
                   for i in range(5)]
    assert wait_until(lambda: all(j["state"] == "RUNNING" for j in d.jobs(*running).values()), 30)
    pids = {j: read_pid(d.state_dir / "jobs" / str(j) / f"proc-{d.job(j)['hosts'][0]}.pid") for j in running}
    old_app_port = d.record.app_port
    sigkill(d)
    assert all(alive(p) for p in pids.values()), "job processes must outlive the daemon"

    d = daemons.start()
    assert d.record.app_port == old_app_port
    jobs = d.jobs()
    assert [j for j, info in jobs.items() if info["state"] == "PENDING"] == pending
    assert all(jobs[j]["state"] == "RUNNING" and jobs[j]["events"][-1]["event"] == "recovered" for j in running)
    assert all(alive(p) for p in pids.values())
    q = d.cli("equeue")
    assert q.returncode == 0 and all(any(line.split()[:1] == [str(j)] for line in q.stdout.splitlines()) for j in running + pending), q.stdout
    st = d.cli("elasticd", "status")
    assert "9 jobs recovered at start" in st.stdout and "5 PENDING, 4 RUNNING" in st.stdout, st.stdout
    with d.client() as c:
        new = c.request(Submit(spec=sleep_job(workdir, "after", 1)))["job_id"]
    assert new == pending[-1] + 1
    # The recovered processes are watched: ending one frees its node for the queue's head.
    os.killpg(pids[running[0]], signal.SIGTERM)
    d.wait([running[0]], timeout=30)
    assert wait_until(lambda: d.job(pending[0])["state"] == "RUNNING", 30)


def test_a_job_that_ended_while_the_daemon_was_down_ends_when_its_process_did_not_at_the_restart(
        daemons: Daemons, workdir: Path) -> None:
    """Its end, elapsed time and node-seconds (job info and eacct, from the event log) are
    its process's: an 8 s job showed 0:17 when the restart came 9 s after its end."""
    d = daemons.start()
    with d.client() as c:
        jid = c.request(Submit(spec=sleep_job(workdir, "short", 1)))["job_id"]
    d.wait_event(jid, "launched")
    host = d.job(jid)["hosts"][0]
    sigkill(d)
    status = d.state_dir / "jobs" / str(jid) / f"proc-{host}.status"
    assert wait_until(lambda: status.read_text().strip() == "0", 30), "the job's process did not end"
    ended = status.stat().st_mtime
    assert wait_until(lambda: time.time() > ended + 5, 10)  # the daemon stays down 5 s past the job's end

    d = daemons.start()
    d.wait([jid], timeout=30)
    info = d.job(jid)
    assert info["state"] == "COMPLETED", info
    assert abs(info["end_time"] - ended) < 0.01, (info["end_time"], ended)
    assert d.record.started_at > info["end_time"] + 4
    acct = json.loads(d.cli("eacct", "--json", "-j", str(jid)).stdout)
    row = acct[0] if isinstance(acct, list) else acct["jobs"][0]
    assert abs(row["end"] - ended) < 0.01 and abs(row["elapsed"] - (ended - row["start"])) < 0.01, row
    assert row["elapsed"] < d.record.started_at - row["start"] - 4, row


def test_running_jobs_whose_processes_died_with_the_daemon_are_marked_node_fail(
        daemons: Daemons, workdir: Path) -> None:
    d = daemons.start()
    with d.client() as c:
        jid = c.request(Submit(spec=sleep_job(workdir, "doomed", 30, nodes=2)))["job_id"]
        done = c.request(Submit(spec=sleep_job(workdir, "quick", 0.5)))["job_id"]
    assert wait_until(lambda: d.job(jid)["state"] == "RUNNING" and d.job(done)["state"] == "RUNNING", 30)
    # RUNNING comes before each wrapper has written its pid: wait for every one, whole.
    groups = [read_pid(d.state_dir / "jobs" / str(jid) / f"proc-{h}.pid") for h in d.job(jid)["hosts"]]
    quick = read_pid(d.state_dir / "jobs" / str(done) / f"proc-{d.job(done)['hosts'][0]}.pid")
    sigkill(d)
    for pgid in groups:
        os.killpg(pgid, signal.SIGKILL)  # gone with their node, say
    assert wait_until(lambda: not alive(quick), 30)  # `quick` ends on its own while no daemon runs

    d = daemons.start()
    d.wait([jid, done], timeout=30)
    assert d.job(jid)["state"] == "NODE_FAIL" and "not found again" in d.job(jid)["reason"]
    assert d.job(done)["state"] == "COMPLETED" and d.job(done)["exit"] == "0:0"
    assert "nodes: 4 (4 idle)" in d.cli("elasticd", "status").stdout


def test_a_job_whose_wrapper_died_with_the_daemon_is_not_said_gone_and_its_live_process_is_ended(
        daemons: Daemons, workdir: Path) -> None:
    """The wrapper is what a restart finds a job by: with it killed (an OOM kill, say) the
    job's own process lives on unwatched. The job is lost (NODE_FAIL), its reason does not
    claim its processes were gone, and that process is ended by its tag, not left running."""
    import psutil

    d = daemons.start()
    with d.client() as c:
        jid = c.request(Submit(spec=sleep_job(workdir, "orphaned", 120)))["job_id"]
    assert wait_until(lambda: d.job(jid)["state"] == "RUNNING", 30)
    wrapper = read_pid(d.state_dir / "jobs" / str(jid) / f"proc-{d.job(jid)['hosts'][0]}.pid")
    assert wait_until(lambda: bool(psutil.Process(wrapper).children(recursive=True)), 30)
    orphans = psutil.Process(wrapper).children(recursive=True)
    sigkill(d)
    os.kill(wrapper, signal.SIGKILL)  # the wrapper alone: the job's sleep lives on
    assert wait_until(lambda: not alive(wrapper), 30) and all(p.is_running() for p in orphans)

    d = daemons.start()
    d.wait([jid], timeout=30)
    info = d.job(jid)
    assert info["state"] == "NODE_FAIL" and "not found again" in info["reason"] and "gone" not in info["reason"], info
    _, left = psutil.wait_procs(orphans, timeout=30)
    assert not left, f"the job's process outlived its lost job: {left}"


def test_a_restart_that_finds_the_application_port_taken_names_the_jobs_that_cannot_reconnect(
        daemons: Daemons, workdir: Path) -> None:
    """The library of a running job knows only the address it was started with. Another
    process on that port at the restart cut the job off silently: it ran as rigid, and only
    daemon.log said so. `elasticd status` (as `elasticd start`) and the job's note say it."""
    d = daemons.start()
    jid = d.submit(recorder_job(workdir))
    d.wait_event(jid, "registered")
    host, port = d.record.app_host, d.record.app_port
    sigkill(d)
    squatter = socket.socket()
    squatter.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    squatter.bind((host, port))
    squatter.listen()
    try:
        d = daemons.start()
        assert d.record.app_port != port
        assert wait_until(lambda: d.jobs(jid)[jid]["note"] == "AppPortTaken", 30), d.jobs(jid)
        status = d.cli("elasticd", "status").stdout
        assert f"APPLICATIONS: the application port {port} of the previous daemon was held" in status, status
        assert f"job(s) {jid} cannot reconnect" in status, status
    finally:
        squatter.close()


def test_the_library_registers_again_once_a_connection_still_registered_at_the_daemon_goes(
        daemons: Daemons, workdir: Path) -> None:
    """A connection the daemon still holds registered (half-open on its side after a
    network fault; here another connection registered first) refused the reconnecting
    library's `register` with already_registered, and the library gave up for good: the job
    ran as rigid. It now asks again until its reconnect time is out."""
    d = daemons.start()
    jid = d.submit(recorder_job(workdir))
    d.wait_event(jid, "registered")
    leader = pid_of(workdir, "node1")
    sigkill(d)
    os.kill(leader, signal.SIGSTOP)  # its library cannot reconnect before the stand-in
    try:
        d = daemons.start()
        stand_in = Raw(d, workdir, jid)  # hello, as another of the job's processes
        assert stand_in.ask("register") == "ok register"
    finally:
        os.kill(leader, signal.SIGCONT)
    refused = "already_registered"
    assert wait_until(lambda: refused in (d.state_dir / "daemon.log").read_text(), 30)
    stand_in.close()
    d.wait_event(jid, "registered", count=3, timeout=30)  # the first daemon's, the stand-in's, the library's
    d.resize(jid, 2)
    assert wait_until(lambda: "post_shrink 2 node3,node4" in app_log(workdir), 30), app_log(workdir)
    (workdir / "finish").touch()
    d.wait([jid], timeout=60)
    assert d.job(jid)["state"] == "COMPLETED"


def test_daemon_restart_mid_shrink_settles_the_order_with_the_reconnected_application(
        daemons: Daemons, workdir: Path) -> None:
    d = daemons.start()
    path = recorder_job(workdir, mode="slow_shrink")
    path.write_text(path.read_text().replace('time_limit = "2"', 'time_limit = "5"'))
    jid = d.submit(path)
    d.wait_event(jid, "registered")
    leader = pid_of(workdir, "node1")
    released = [pid_of(workdir, h) for h in ("node3", "node4")]
    with d.client() as c:
        c.request(Resize(job_id=jid, nodes=2))
    assert wait_until(lambda: "pre_shrink 2" in app_log(workdir), 30)
    sigkill(d)  # the application is inside pre_shrink; its answer comes after the restart

    d = daemons.start()
    info = d.wait_event(jid, "shrunk", timeout=60)
    assert info["hosts"] == ["node1", "node2"] and info["state"] == "RUNNING"
    events = [e["event"] for e in info["events"]]
    assert "recovered" in events and "order_failed" not in events and "deadline_missed" not in events
    assert wait_until(lambda: not any(alive(p) for p in released), 30)
    assert alive(leader) and pid_of(workdir, "node1") == leader  # never started again
    assert "post_shrink 2 node3,node4" in app_log(workdir)
    finish(d, workdir, jid)


def test_application_crashing_mid_shrink_across_a_daemon_restart_fails_the_job_and_frees_its_nodes(
        daemons: Daemons, workdir: Path) -> None:
    d = daemons.start()
    jid = d.submit(recorder_job(workdir, mode="die_on_shrink"))
    d.wait_event(jid, "registered")
    with d.client() as c:
        c.request(Resize(job_id=jid, nodes=2))
    sigkill(d)  # the leader exits 7 in pre_shrink, before or after the daemon is gone

    d = daemons.start()
    # Nobody answers for the job any more: the order is settled (dropped or past its deadline).
    assert wait_until(lambda: d.job(jid)["state"] == "RUNNING" and
                      not ({"order_failed", "shrunk"}.isdisjoint(d.events(jid))), 15), d.events(jid)
    info = finish(d, workdir, jid, state="FAILED")
    assert info["exit"] == "7:0"
    assert "nodes: 4 (4 idle)" in d.cli("elasticd", "status").stdout


def test_an_answer_to_an_order_settled_before_a_restart_is_expired_not_taken_for_done(
        daemons: Daemons, workdir: Path) -> None:
    """The previous daemon settled the order at its deadline; the application, its answer
    late, reconnects to the restarted daemon and sends it. `unknown_order` would let it take
    its shrink for done (PROTOCOL.md): it is `expired`, as before the restart; its resume
    may name the host the deadline took, and is told what was settled."""
    d = daemons.start()  # --order-deadline 5
    jid = d.submit(write_job(workdir, "quiet", """
        name = "quiet"
        command = ["sh", "-c", "[ $ELASTIC_NODE_INDEX = 0 ] && echo $ELASTIC_JOB_SECRET > secret; exec sleep 60"]
        nodes = { min = 1, max = 4 }
        kind = "malleable"
        working_dir = "."
        time_limit = "2"
    """))
    secret = workdir / "secret"
    assert wait_until(lambda: secret.exists() and secret.read_text().strip() != "", 30)

    def hello() -> LineSocket:
        io = LineSocket(socket.create_connection((d.record.app_host, d.record.app_port), timeout=15), 8192)
        for line, reply in ((f"hello 1 {jid} {secret.read_text().strip()}", "ok hello 1"),
                            ("register", "ok register")):
            io.send_line(line.encode())
            assert (io.read_line() or b"").decode() == reply
        return io

    io = hello()
    with d.client() as c:
        c.request(Resize(job_id=jid, nodes=3))
    order = (io.read_line() or b"").decode()
    assert order.startswith("shrink 1 order="), order
    oid = order.split("order=")[1].split()[0]
    d.wait_event(jid, "deadline_missed", timeout=30)
    assert wait_until(lambda: d.job(jid)["hosts"] == ["node1", "node2", "node3"], 30)
    sigkill(d)
    io.close()

    d = daemons.start()
    io = hello()
    try:
        io.send_line(f"resume order={oid} node1 node2 node3 node4".encode())
        # Told again (it may not have read it before the crash), then the reply.
        assert (io.read_line() or b"").decode() == f"hosts node1 node2 node3 reason=deadline order={oid}"
        assert io.read_line() == b"ok resume"
        io.send_line(f"shrunk order={oid} node4".encode())
        reply = (io.read_line() or b"").decode()
        assert reply.startswith(f"error expired order {oid} was settled without this answer (deadline)"), reply
    finally:
        io.close()
    assert d.job(jid)["hosts"] == ["node1", "node2", "node3"]
    d.cli("ecancel", str(jid))


# ---- the batch ---------------------------------------------------------------------------
BATCH_NODES = 8


def _batch_files(folder: Path, launches: Path) -> list[Path]:
    """40 short rigid jobs and 10 malleable synthetic ones; each process logs its start."""
    files = []
    log_start = f'echo "start $ELASTIC_HOST $ELASTIC_NODE_INDEX $ELASTIC_JOINING" >> {launches}/$ELASTIC_JOB_ID'
    for i in range(50):
        if i % 5 == 0:
            body = f'''
                name = "mall{i}"
                command = ["sh", "-c", '{log_start}; exec "{sys.executable}" -m elastic_apps.synthetic --work 5 --step 0.2']
                nodes = {{ min = 1, max = 3, preferred = 2 }}
                kind = "malleable"
                working_dir = "{folder}"
                output = "out/%j-%N.out"
            '''
        else:
            body = f'''
                name = "rigid{i}"
                command = ["sh", "-c", '{log_start}; sleep 0.{3 + i % 5}; echo end']
                nodes = {1 + i % 2}
                working_dir = "{folder}"
                output = "out/%j-%N.out"
            '''
        files.append(write_job(folder, f"job{i:02d}", body))
    return files


@pytest.mark.timeout(150)
def test_fifty_job_batch_with_resizes_in_flight_survives_a_sigkill_and_every_job_runs_once(tmp_path: Path) -> None:
    folder = tmp_path / "batch"
    (folder / "out").mkdir(parents=True)
    launches = folder / "launches"
    launches.mkdir()
    ds = Daemons(tmp_path / "state", BATCH_NODES, ["--order-deadline", "10"])
    try:
        d = ds.start()
        r = d.cli("esubmit", "--parsable", *map(str, _batch_files(folder, launches)))
        assert r.returncode == 0, r.stderr
        ids = [int(x) for x in r.stdout.split()]
        assert len(ids) == 50
        malleable = ids[::5]

        def registered_running() -> list[dict]:
            return [j for j in d.jobs(*malleable).values()
                    if j["state"] == "RUNNING" and "registered" in [e["event"] for e in j["events"]]]

        def completed() -> int:
            return sum(j["state"] == "COMPLETED" for j in d.jobs(*ids).values())

        # Mid-batch: some jobs done, malleable ones running and ready for orders.
        assert wait_until(lambda: completed() >= 5 and len(registered_running()) >= 2, 40, 0.1), d.jobs(*malleable)
        # Orders in flight at the moment of the crash: a shrink and, where nodes are free, a grow.
        # Tried again while none is taken: on a loaded machine the jobs seen registered may have
        # ended (or be on one node with none free) by the time their order is asked for.
        ordered: list[int] = []

        def order_resizes() -> bool:
            with d.client() as c:
                for j in registered_running():
                    target = j["nodes"] - 1 if j["nodes"] > 1 else j["nodes"] + 1
                    try:
                        c.request(Resize(job_id=j["job_id"], nodes=target))
                        ordered.append(j["job_id"])
                    except Exception:  # noqa: BLE001, S112 - busy or no free node: try the next job
                        continue
            return bool(ordered)

        assert wait_until(order_resizes, 40, 0.1), f"no resize could be ordered before the crash: {d.jobs(*malleable)}"
        sigkill(d)

        d = ds.start()
        d.wait(ids, timeout=100)
        jobs = d.jobs(*ids)
        assert {j: info["state"] for j, info in jobs.items() if info["state"] != "COMPLETED"} == {}
        for j in ids:
            starts = (launches / str(j)).read_text().splitlines()
            leaders = [s for s in starts if s.endswith(" 0 0")]
            # A 2-node launch the crash cut in half (a process on one host, none on the other)
            # is ended and started again whole, as README's recovery says: its first host may
            # have run twice, the first time alone. Any other job starts once.
            cut = any(e["event"] == "requeued" and "cut short" in (e.get("detail") or "")
                      for e in jobs[j]["events"])
            assert len(leaders) == 1 or (cut and len(leaders) == 2), f"job {j} started {len(leaders)} times: {starts}"
            # The start that ran: one the crash cut off before its launch was requeued (then
            # started again, maybe elsewhere), and its first host has no output file.
            first = [e for e in jobs[j]["events"] if e["event"] == "started"][-1]["hosts"][0]
            out = (folder / "out" / f"{j}-{first}.out").read_text()
            finished = out.count('"work"') if j in malleable else out.count("end")
            assert finished == 1 or (cut and finished == 2), f"job {j} finished {finished} times"
        settled = {"shrunk", "grown", "order_failed", "deadline_missed", "refused", "deferred"}
        for j in ordered:
            events = [e["event"] for e in jobs[j]["events"]]
            last_order = max(i for i, e in enumerate(events) if e.endswith("_ordered"))
            assert settled & set(events[last_order:]), f"job {j}: order not settled: {events}"
    finally:
        ds.close()


@pytest.mark.timeout(90)
def test_elasticd_start_after_a_crash_says_how_many_jobs_it_took_back(tmp_path: Path) -> None:
    import subprocess

    from conftest import BIN
    from elasticd.statedir import read_record

    state = tmp_path / "state"
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
    env["ELASTIC_STATE_DIR"] = str(state)

    def cli(*argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(BIN / argv[0]), *argv[1:]], env=env, capture_output=True, text=True, timeout=60,
                              check=False)

    assert cli("elasticd", "start", "--local", "1").returncode == 0
    try:
        job = write_job(tmp_path, "long", f'name = "long"\ncommand = ["sleep", "60"]\nnodes = 1\nworking_dir = "{tmp_path}"\n')
        assert cli("esubmit", str(job)).returncode == 0
        rec = read_record(state)
        assert rec is not None
        os.kill(rec.pid, signal.SIGKILL)
        wait_gone(rec.pid)
        r = cli("elasticd", "start", "--local", "1")
        assert r.returncode == 0, r.stderr
        assert "1 job recovered from the journal" in r.stdout, r.stdout
    finally:
        cli("elasticd", "stop")


# ---- killed between a start and its launch ------------------------------------------------
GATED_NODES = 32


@pytest.mark.timeout(150)
def test_jobs_started_but_not_launched_when_the_daemon_is_killed_are_requeued_in_their_place_and_run_once(
        tmp_path: Path, freezable_fs: FreezableFs) -> None:
    """One pass starts 32 jobs at once (their starts committed together) and their processes
    are launched; the first one to run kills the daemon (SIGKILL). Every other job's output is
    on a file system that hangs (frozen), so those cannot have been launched by then: the
    window is held open, not caught by chance. The restarted daemon puts the jobs that were
    started in the journal and never launched back in the queue ahead of the jobs submitted
    after them (same ids, same submit times, a `requeued` entry saying why) and starts them
    again, and leaves the launched ones running: every job's command runs exactly once, and
    the event log replays."""
    folder = tmp_path / "work"
    launches = folder / "launches"
    launches.mkdir(parents=True)
    gate = folder / "gate"
    ds = Daemons(tmp_path / "state", GATED_NODES, [])
    try:
        d = ds.start()
        pid = d.record.pid
        # Holds every node until the gate opens, so that the jobs behind it start in one pass.
        blocker = d.submit(write_job(folder, "blocker", f'''
            name = "blocker"
            command = ["sh", "-c", "while [ ! -e {gate} ]; do sleep 0.05; done"]
            nodes = {GATED_NODES}
            working_dir = "{folder}"
        '''))
        # The first of them to run kills the daemon (mkdir: exactly one does).
        body = f"mkdir {folder}/killed 2>/dev/null && kill -9 {pid}; echo $$ >> {launches}/$ELASTIC_JOB_ID; exec sleep 120"
        held = {i for i in range(GATED_NODES) if i % 2}  # launches that wait for the thaw

        def output(i: int) -> str:
            return f'output = "{freezable_fs.mount}/job{i:02d}.out"' if i in held else ""

        files = [write_job(folder, f"job{i:02d}", f'''
            name = "job{i:02d}"
            command = ["sh", "-c", "{body}"]
            nodes = 1
            working_dir = "{folder}"
            {output(i)}
        ''') for i in range(GATED_NODES + 6)]
        r = d.cli("esubmit", "--parsable", *map(str, files))
        assert r.returncode == 0, r.stderr
        ids = [int(x) for x in r.stdout.split()]
        first, behind = ids[:GATED_NODES], ids[GATED_NODES:]
        assert wait_until(lambda: d.job(blocker)["state"] == "RUNNING", 30)
        submitted = {j: info["submit_time"] for j, info in d.jobs(*ids).items()}

        freezable_fs.freeze()
        gate.touch()
        assert wait_until(lambda: not alive(pid), 30)
        freezable_fs.thaw()  # the threads opening the held jobs' outputs go with the process
        wait_gone(pid, 30)
        d = ds.start()
        jobs = d.jobs(*ids)
        assert not [j for j, info in jobs.items() if info["state"] in ("NODE_FAIL", "FAILED")], jobs
        requeued = [j for j in first if "requeued" in [e["event"] for e in jobs[j]["events"]]]
        assert {first[i] for i in held} <= set(requeued), "a job whose output hung was taken for launched"
        assert wait_until(lambda: all(j["state"] == "RUNNING" for j in d.jobs(*first).values()), 30)
        jobs = d.jobs(*ids)
        assert [j for j in ids if jobs[j]["state"] == "PENDING"] == behind  # the requeued ones went first
        for j in first:
            events = [e["event"] for e in jobs[j]["events"]]
            assert jobs[j]["submit_time"] == submitted[j]
            if j in requeued:
                assert events[-5:] == ["started", "recovered", "requeued", "started", "launched"], events
                why = jobs[j]["events"][-3]
                assert why["cause"] == "daemon" and "never launched" in why["detail"], why
            else:
                assert events.count("started") == 1 and events[-2:] in (["recovered", "launched"],
                                                                         ["launched", "recovered"]), events
        # Every job's command ran once, and runs still: the launched ones were never started again.
        # `echo $$ >>` makes the file before it writes: wait for the pid itself.
        assert wait_until(lambda: all((launches / str(j)).exists() and (launches / str(j)).read_text().strip()
                                      for j in first), 30)
        for j in first:
            starts = (launches / str(j)).read_text().split()
            assert len(starts) == 1, f"job {j} ran {len(starts)} times"
            assert alive(int(starts[0])), f"job {j}: its process is gone"
        assert (folder / "killed").is_dir() and len(requeued) < len(first)
        q = d.cli("equeue")
        assert q.returncode == 0 and "CONFIGURING" not in q.stdout, q.stdout

        assert d.cli("ecancel", *map(str, ids)).returncode == 0
        d.wait(ids, timeout=30)
        r = d.cli("elasticd", "replay", str(d.state_dir))
        assert r.returncode == 0 and "all as recorded" in r.stdout, r.stdout + r.stderr
        assert (d.state_dir / "events.jsonl").read_text().count('"type":"NeverLaunched"') == len(requeued)
    finally:
        freezable_fs.thaw()
        ds.close()


# ---- killed while a multi-node launch was half done ---------------------------------------
@pytest.mark.timeout(150)
def test_a_launch_the_crash_cut_short_on_some_hosts_is_ended_and_requeued_and_runs_once_completely(
        tmp_path: Path, freezable_fs: FreezableFs) -> None:
    """A 3-node job whose processes are started host after host: host 0's starts (its output
    is an ordinary file) and kills the daemon (SIGKILL) while host 1's launch is held by its
    output file, on a file system that hangs (frozen: the open waits in the daemon's thread),
    so host 2's is never tried either. The restarted daemon finds a process on node1 only and
    no recorded launch: it ends that process (it ran alone, its other ranks never started),
    waits until it is gone, and puts the job back in the queue saying where the launch was
    cut short; the job starts again, on every host, and completes. Before, the job was taken
    for launched and completed with host 0's process alone."""
    folder = tmp_path / "work"
    runs = folder / "runs"
    (folder / "0").mkdir(parents=True)
    (folder / "2").mkdir()
    (folder / "1").symlink_to(freezable_fs.mount)  # host 1's output: on the hung file system
    gate = folder / "gate"
    ds = Daemons(tmp_path / "state", 3, [])
    try:
        d = ds.start()
        pid = d.record.pid
        # Each process says when it starts and when a SIGTERM ends it; host 0's first one kills
        # the daemon (mkdir: only once); every one runs until the gate opens, then exits 0.
        body = (f"echo start $ELASTIC_NODE_INDEX $$ >> {runs}; echo ran $$; "
                f"trap 'echo end $ELASTIC_NODE_INDEX $$ >> {runs}; exit 143' TERM; "
                f"if [ $ELASTIC_NODE_INDEX = 0 ] && mkdir {folder}/killed 2>/dev/null; then kill -9 {pid}; fi; "
                f"while [ ! -e {gate} ]; do sleep 0.05; done")
        freezable_fs.freeze()
        jid = d.submit(write_job(folder, "wide", f'''
            name = "wide"
            command = ["sh", "-c", "{body}"]
            nodes = 3
            output = "%t/wide.out"
            working_dir = "{folder}"
        '''))
        assert wait_until(lambda: (folder / "killed").is_dir(), 30)
        # Its main thread is gone; the thread opening host 1's output waits for the thaw.
        assert wait_until(lambda: not alive(pid), 30)
        first = runs.read_text().split("\n")[0].split()
        assert runs.read_text().splitlines() == [f"start 0 {first[2]}"]
        freezable_fs.thaw()
        wait_gone(pid, 30)
        assert runs.read_text().splitlines() == [f"start 0 {first[2]}"], "a launch went on after the crash"
        assert alive(int(first[2]))

        d = ds.start()
        info = d.wait_event(jid, "launched", timeout=30)
        events = [e["event"] for e in info["events"]]
        assert "requeued" in events, f"the launch cut short was taken for a whole one: {events}"
        assert events[-5:] == ["started", "recovered", "requeued", "started", "launched"], events
        why = info["events"][-3]
        assert why["cause"] == "daemon" and why["nodes"] == 0, why
        assert "cut short" in why["detail"] and "node2,node3" in why["detail"], why
        assert not alive(int(first[2])), "the process of the launch cut short still runs"
        assert wait_until(lambda: len(runs.read_text().splitlines()) == 5, 30), runs.read_text()

        gate.touch()
        d.wait([jid], timeout=30)
        info = d.job(jid)
        assert info["state"] == "COMPLETED" and info["exit_code"] == 0, info
        lines = runs.read_text().splitlines()
        # The first start's process was ended before anything of the second one started.
        assert lines[:2] == [f"start 0 {first[2]}", f"end 0 {first[2]}"], lines
        again = sorted(ln.split()[1] for ln in lines[2:])
        assert again == ["0", "1", "2"] and all(ln.startswith("start ") for ln in lines[2:]), lines
        second = {ln.split()[1]: ln.split()[2] for ln in lines[2:]}
        ran = [ln for ln in (folder / "0" / "wide.out").read_text().splitlines() if ln.startswith("ran ")]
        assert ran == [f"ran {first[2]}", f"ran {second['0']}"], ran  # (and the shell's 'Terminated')
        for i in "12":  # the processes that never started in the first run wrote once
            assert (folder / i / "wide.out").read_text() == f"ran {second[i]}\n"

        r = d.cli("elasticd", "replay", str(d.state_dir))
        assert r.returncode == 0 and "all as recorded" in r.stdout, r.stdout + r.stderr
        assert (d.state_dir / "events.jsonl").read_text().count('"type":"NeverLaunched"') == 1
    finally:
        freezable_fs.thaw()
        ds.close()


def forget_launch(state_dir: Path, job_id: int) -> None:
    """Make the journal what a crash after the job's start and before its launch was recorded
    leaves (the start committed, not the launch): for an MPI job the window is a few turns of
    the event loop between mpirun's fork and the commit, too short to hit for real."""
    import json
    import sqlite3

    db = sqlite3.connect(state_dir / "journal.db", isolation_level=None)
    try:
        (raw,) = db.execute("SELECT data FROM jobs WHERE job_id = ?", (job_id,)).fetchone()
        data = json.loads(raw)
        data["launched"] = False
        data["events"] = [e for e in data["events"] if e[1] != "launched"]
        db.execute("UPDATE jobs SET data = ? WHERE job_id = ?", (json.dumps(data), job_id))
    finally:
        db.close()


@pytest.mark.parametrize("record", ["kept", "lost"])
def test_an_mpi_job_found_running_without_a_recorded_launch_is_whole_and_never_requeued(
        tmp_path: Path, record: str) -> None:
    """An MPI job's launch is one process, mpirun on its first host, which starts the ranks
    everywhere: found again with no recorded launch, it was launched whole. Taken back
    RUNNING with its ranks untouched -- with the run's record (mpi-run.json), which makes
    the launcher report the job on all its hosts, and without it (a failed write), when
    only mpirun's host is found -- never ended and requeued as a launch cut short."""
    from mpi_support import mpi_skip_reason

    reason = mpi_skip_reason(need_mpi4py=False)
    if reason:
        pytest.skip(reason)
    folder = tmp_path / "work"
    folder.mkdir()
    runs, gate = folder / "runs", folder / "gate"
    ds = Daemons(tmp_path / "state", 3, [])
    try:
        d = ds.start()
        body = f"echo $OMPI_COMM_WORLD_RANK $ELASTIC_HOST $$ >> {runs}; while [ ! -e {gate} ]; do sleep 0.05; done"
        jid = d.submit(write_job(folder, "mpi", f'''
            name = "mpi"
            command = ["sh", "-c", "{body}"]
            nodes = 3
            launcher = "mpi"
            mpi = {{ ranks_per_node = 1 }}
            working_dir = "{folder}"
        '''))
        assert wait_until(lambda: runs.exists() and len(runs.read_text().splitlines()) == 3, 40)
        ranks = sorted(runs.read_text().splitlines())
        sigkill(d)
        forget_launch(d.state_dir, jid)
        if record == "lost":
            (d.state_dir / "jobs" / str(jid) / "mpi-run.json").unlink()

        d = ds.start()
        info = d.job(jid)
        events = [e["event"] for e in info["events"]]
        assert info["state"] == "RUNNING" and "requeued" not in events, events
        assert events[-2:] == ["recovered", "launched"], events
        assert all(alive(int(r.split()[2])) for r in ranks)
        gate.touch()
        d.wait([jid], timeout=30)
        assert d.job(jid)["state"] == "COMPLETED", d.job(jid)
        assert sorted(runs.read_text().splitlines()) == ranks  # each rank ran once
        assert [r.split()[:2] for r in ranks] == [["0", "node1"], ["1", "node2"], ["2", "node3"]]
    finally:
        ds.close()
