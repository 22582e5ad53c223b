"""A real daemon on loopback running real processes: the job life cycle end to end."""

from __future__ import annotations

import json
from pathlib import Path

import psutil

from conftest import RunningDaemon, read_pid, wait_until, write_job


def pids_in(folder: Path, pattern: str) -> list[int]:
    return [int(p.read_text().split()[0]) for p in sorted(folder.glob(pattern))]


def assert_gone(pids: list[int]) -> None:
    for pid in pids:
        assert wait_until(lambda: not _alive(pid), 30), f"process {pid} of a finished job is still alive"  # noqa: B023 - called at once, in this iteration


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def test_successful_job_completes_on_every_host_with_its_environment_and_output(daemon: RunningDaemon, workdir: Path) -> None:
    job = write_job(workdir, "ok", '''
        name = "envcheck"
        command = ["sh", "-c", "echo $ELASTIC_JOB_ID $ELASTIC_HOST $ELASTIC_NODE_INDEX $ELASTIC_JOB_NUM_NODES $ELASTIC_JOB_HOSTS $FOO; cat $ELASTIC_HOSTFILE"]
        nodes = 2
        working_dir = "."
        env = { FOO = "bar" }
        output = "%x-%j-%t.out"
        error = "%x-%j-%t.err"
        time_limit = "1"
    ''')
    jid = daemon.submit(job)
    daemon.wait([jid])
    info = daemon.jobs(jid)[jid]
    assert info["state"] == "COMPLETED"
    assert info["exit"] == "0:0"
    assert info["hosts"] == []  # nodes handed back
    lines0 = (workdir / f"envcheck-{jid}-0.out").read_text().split("\n")
    lines1 = (workdir / f"envcheck-{jid}-1.out").read_text().split("\n")
    assert lines0[0] == f"{jid} node1 0 2 node1,node2 bar"
    assert lines1[0] == f"{jid} node2 1 2 node1,node2 bar"
    assert lines0[1:3] == ["node1", "node2"]
    assert (workdir / f"envcheck-{jid}-0.err").exists()
    assert [e["event"] for e in info["events"]] == ["submitted", "started", "launched", "ended"]
    assert info["node_seconds"] >= 0


def test_failing_job_is_failed_with_exit_code_and_signal_shown(daemon: RunningDaemon, workdir: Path) -> None:
    code = daemon.submit(write_job(workdir, "f", '''
        name = "fails"
        command = ["sh", "-c", "exit 3"]
        nodes = 1
        working_dir = "."
    '''))
    killed = daemon.submit(write_job(workdir, "k", '''
        name = "killed"
        command = ["sh", "-c", "kill -9 $$"]
        nodes = 1
        working_dir = "."
    '''))
    daemon.wait([code, killed])
    jobs = daemon.jobs(code, killed)
    assert (jobs[code]["state"], jobs[code]["exit"]) == ("FAILED", "3:0")
    assert (jobs[killed]["state"], jobs[killed]["exit"]) == ("FAILED", "0:9")
    q = daemon.cli("equeue", "--all")
    assert "3:0" in q.stdout and "0:9" in q.stdout


def test_job_past_its_time_limit_is_terminated_and_marked_timeout(daemon: RunningDaemon, workdir: Path) -> None:
    # Ignores SIGTERM, so the daemon must follow up with SIGKILL after kill-wait (1 s here).
    jid = daemon.submit(write_job(workdir, "t", '''
        name = "sleepy"
        command = ["sh", "-c", "trap '' TERM; echo $$ > main.pid; sleep 300 & echo $! > child.pid; wait"]
        nodes = 1
        working_dir = "."
        time_limit = "0:01"
    '''))
    daemon.wait([jid], timeout=60)
    info = daemon.jobs(jid)[jid]
    assert info["state"] == "TIMEOUT"
    assert info["reason"] == "time limit reached"
    assert 1.0 <= info["time_used"] < 10
    assert_gone(pids_in(workdir, "*.pid"))


def test_leftover_background_processes_of_a_finished_job_are_ended(daemon: RunningDaemon, workdir: Path) -> None:
    jid = daemon.submit(write_job(workdir, "bg", '''
        name = "bg"
        command = ["sh", "-c", "sleep 300 & echo $! > child-$ELASTIC_NODE_INDEX.pid; exit 0"]
        nodes = 2
        working_dir = "."
    '''))
    daemon.wait([jid])
    assert daemon.jobs(jid)[jid]["state"] == "COMPLETED"
    pids = pids_in(workdir, "child-*.pid")
    assert len(pids) == 2
    assert_gone(pids)


def test_cancel_pending_and_running_jobs(daemon: RunningDaemon, workdir: Path) -> None:
    running = daemon.submit(write_job(workdir, "r", '''
        name = "big"
        command = ["sh", "-c", "echo $$ > big-$ELASTIC_NODE_INDEX.pid; exec sleep 300"]
        nodes = 4
        working_dir = "."
    '''))
    pending = daemon.submit(write_job(workdir, "p", '''
        name = "waiting"
        command = ["true"]
        nodes = 1
        working_dir = "."
    '''))
    # Each process's pid whole in its file (`echo $$ >` makes the file before it writes the number).
    big = [read_pid(workdir / f"big-{i}.pid") for i in range(4)]
    assert daemon.jobs(pending)[pending]["state"] == "PENDING"
    r = daemon.cli("ecancel", str(pending))
    assert r.returncode == 0, r.stderr
    assert daemon.jobs(pending)[pending]["state"] == "CANCELLED"
    r = daemon.cli("ecancel", str(running))
    assert r.returncode == 0, r.stderr
    daemon.wait([running])
    info = daemon.jobs(running)[running]
    assert info["state"] == "CANCELLED"
    assert info["start_time"] is not None
    assert_gone(big)
    status = json.loads(daemon.cli("elasticd", "status", "--json").stdout)
    assert all(n["state"] == "idle" for n in status["nodes"])


def test_cancel_of_unknown_job_names_it_and_touches_nothing(daemon: RunningDaemon) -> None:
    r = daemon.cli("ecancel", "999")
    assert r.returncode == 1
    assert "no such job: 999" in r.stderr
    assert "Traceback" not in r.stderr


def test_equeue_json_document_has_every_field_even_when_unknown(daemon: RunningDaemon, workdir: Path) -> None:
    blocker = daemon.submit(write_job(workdir, "b", '''
        name = "blocker"
        command = ["sleep", "300"]
        nodes = 4
        working_dir = "."
    '''))
    waiting = daemon.submit(write_job(workdir, "w", '''
        name = "waiting"
        command = ["true"]
        nodes = { min = 1, max = 2 }
        kind = "malleable"
        working_dir = "."
        time_limit = "2-00:00"
    '''))
    r = daemon.cli("equeue", "--json")
    doc = json.loads(r.stdout)
    assert doc["version"] == 1
    by_id = {j["job_id"]: j for j in doc["jobs"]}
    w = by_id[waiting]
    assert w["state"] == "PENDING"
    assert w["start_time"] is None and w["end_time"] is None and w["exit_code"] is None
    assert (w["nodes_min"], w["nodes_max"], w["nodes_preferred"]) == (1, 2, 2)
    assert w["time_limit"] == 2 * 86400
    expected = {"job_id", "name", "kind", "state", "reason", "nodes", "nodes_min", "nodes_max",
                "nodes_preferred", "hosts", "submit_time", "start_time", "end_time", "time_limit",
                "time_used", "exit_code", "exit_signal", "exit", "command", "working_dir",
                "output_path", "error_path", "node_seconds", "events", "held", "note", "requested", "limit_now"}
    assert set(w) == expected and set(by_id[blocker]) == expected
    assert by_id[blocker]["hosts"] == ["node1", "node2", "node3", "node4"]
    table = daemon.cli("equeue").stdout.splitlines()
    assert table[0].split()[:4] == ["JOBID", "NAME", "KIND", "STATE"]
    assert any("node[1-4]" in line and "RUNNING" in line for line in table)
    assert any("PENDING" in line and "2-00:00:00" in line for line in table)
    daemon.cli("ecancel", str(blocker), str(waiting))


def test_stop_ends_running_jobs_cleanly_cancels_the_queue_and_says_so(tmp_path: Path, workdir: Path) -> None:
    from conftest import start_daemon, stop_daemon

    d = start_daemon(tmp_path / "s")
    try:
        jid = d.submit(write_job(workdir, "s", '''
            name = "forever"
            command = ["sh", "-c", "echo $$ > f-$ELASTIC_NODE_INDEX.pid; exec sleep 300"]
            nodes = 2
            working_dir = "."
        '''))
        pids = [read_pid(workdir / f"f-{i}.pid") for i in range(2)]  # whole, not only made
        # A job that cannot start while the first runs: the stop cancels it, and says so (a
        # user would otherwise look for it at the next start).
        waiting = d.submit(write_job(workdir, "w", '''
            name = "waiting"
            command = ["true"]
            nodes = 4
        '''))
        r = d.cli("elasticd", "stop")
        assert r.returncode == 0, r.stderr
        assert f"ended running job {jid}" in r.stdout
        assert f"cancelled pending job {waiting}" in r.stdout, r.stdout
        assert_gone([*pids, d.record.pid])
        s = d.cli("elasticd", "status")
        assert s.returncode == 1 and "not running" in s.stdout
    finally:
        stop_daemon(d.record)


def test_status_shows_nodes_and_policy(daemon: RunningDaemon) -> None:
    r = daemon.cli("elasticd", "status")
    assert r.returncode == 0, r.stderr
    assert "policy easy" in r.stdout and "mode local" in r.stdout
    assert "nodes: 4 (4 idle)" in r.stdout


def test_equeue_shows_a_queue_whose_document_exceeds_the_request_line_limit(daemon: RunningDaemon, workdir: Path) -> None:
    from elastic_protocol.control import Submit
    from elastic_protocol.jobspec import JobSpec

    spec = JobSpec(name="blocked-" + "x" * 100, command=["sleep", "300"], nodes=4, working_dir=str(workdir),
                   time_limit="1")
    with daemon.client() as c:
        ids = [c.request(Submit(spec=spec))["job_id"] for _ in range(400)]
    r = daemon.cli("equeue", "--json")
    assert r.returncode == 0, r.stderr
    assert len(r.stdout) > 64 * 1024
    assert len(json.loads(r.stdout)["jobs"]) == 400
    assert daemon.cli("equeue").stdout.count("PENDING") == 399
    daemon.cli("ecancel", *map(str, ids))


def test_equeue_shows_the_limit_a_job_will_be_ended_at_once_its_model_scales_it(
        daemon: RunningDaemon, workdir: Path) -> None:
    """A job's `time_limit` is its limit at its preferred size; with a model, the daemon ends
    it at the limit scaled to the size it runs at. Shrunk from 4 nodes to 1 under a linear
    model, a limit of 1:00 becomes about 4:00 from its start: equeue showed LIMIT 1:00 (and
    TIME past it, RUNNING) and --json only time_limit 60. Now LIMIT and `limit_now` are what
    the daemon ends it at; `time_limit` stays the one asked for."""
    import sys

    from elastic_protocol.timefmt import format_duration

    recorder = Path(__file__).resolve().parent / "apps" / "recorder.py"
    jid = daemon.submit(write_job(workdir, "scaled", f'''
        name = "scaled"
        command = ["{sys.executable}", "{recorder}"]
        nodes = {{ min = 1, max = 4, preferred = 4 }}
        kind = "malleable"
        working_dir = "."
        time_limit = "1:00"
        model = {{ speedup = "linear" }}
    '''))
    daemon.wait_event(jid, "registered")
    ran = daemon.job(jid)
    assert ran["nodes"] == 4 and abs(ran["limit_now"] - 60) < 1e-6, ran  # at its preferred size: as asked
    r = daemon.cli("elasticd", "resize", str(jid), "1")
    assert r.returncode == 0, r.stderr
    info = daemon.job(jid)
    assert info["nodes"] == 1 and info["time_limit"] == 60, info
    # 60 s of its limit at 4 nodes last 240 s at 1, less 3 s for each second it ran at 4 (and
    # plus what the model charges for the resize).
    used = next(e["time"] for e in info["events"] if e["event"] == "shrunk") - info["start_time"]
    assert 240 - 3 * used - 1 <= info["limit_now"] <= 240 - 3 * used + 10, (used, info)
    row = next(line.split() for line in daemon.cli("equeue").stdout.splitlines()[1:] if line.split()[0] == str(jid))
    assert row[7] == format_duration(info["limit_now"]) and row[7] != "1:00", row
    (workdir / "finish").touch()
    daemon.wait([jid], timeout=60)
    assert daemon.job(jid)["state"] == "COMPLETED"


def test_a_preferred_size_wider_than_the_cluster_keeps_the_limit_where_the_job_file_put_it(
        daemon: RunningDaemon, workdir: Path) -> None:
    """`time_limit` holds at the preferred size the job file declares. Cut to the cluster's
    4 nodes, the preferred size 6 became the limit's reference: the job got 10 s on 4 nodes
    instead of 10 x T(4)/T(6) = 13 s, and its work, 9 s at 6 nodes and 11.7 s at 4, ended
    TIMEOUT (found by an outside tester)."""
    import sys

    jid = daemon.submit(write_job(workdir, "wide", f'''
        name = "wide"
        command = ["{sys.executable}", "-m", "elastic_apps.synthetic", "--work", "36", "--speedup", "amdahl:0.1"]
        nodes = {{ min = 2, max = 8, preferred = 6 }}
        kind = "malleable"
        working_dir = "."
        time_limit = "0:10"
        model = {{ speedup = "amdahl:0.1", alpha = 0.375, work = 36 }}
    '''))
    assert wait_until(lambda: daemon.job(jid)["state"] == "RUNNING", 30)
    info = daemon.job(jid)
    assert info["nodes"] == 4 and abs(info["limit_now"] - 13.0) < 1e-6, info
    daemon.wait([jid], timeout=60)
    assert daemon.job(jid)["state"] == "COMPLETED", daemon.job(jid)
