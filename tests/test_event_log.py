"""The event log of real daemons: replayed decision for decision (orders, refusals, missed
deadlines, a time limit, a cancel, a kill -9 and restart), accounted for by `eacct`, and
re-run under other policies by `elasticd sim --from-log`."""

from __future__ import annotations

import json
import os
import signal
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from conftest import BIN, RunningDaemon, start_daemon, stop_daemon, wait_gone, wait_until, write_job
from elasticd.eventlog import LOG_FILE, read_log
from test_malleability import finish, recorder_job
from test_recovery import alive, job_pgids

pytestmark = pytest.mark.timeout(150)


@pytest.fixture
def state(tmp_path: Path) -> Iterator[Path]:
    state_dir = tmp_path / "state"
    yield state_dir
    for pgid in job_pgids(state_dir):  # a failed test may have left jobs of a killed daemon
        try:
            os.killpg(pgid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def run_tool(*args: str, timeout: float = 60) -> tuple[int, str, str]:
    import subprocess

    r = subprocess.run([str(BIN / args[0]), *args[1:]], check=False, capture_output=True, text=True, timeout=timeout)
    return r.returncode, r.stdout, r.stderr


def sleeper(folder: Path, name: str, seconds: float, nodes: int = 1, limit: str = "1") -> Path:
    return write_job(folder, name, f'''
        name = "{name}"
        command = ["sleep", "{seconds}"]
        nodes = {nodes}
        time_limit = "{limit}"
        working_dir = "."
    ''')


def recorded_run(state_dir: Path, tmp_path: Path) -> None:
    """A malleable run with every kind of event, across a kill -9 and a restart."""
    extra = ["--order-deadline", "1.5", "--min-resize-interval", "1"]
    d = start_daemon(state_dir, nodes=5, policy="malleable", extra=extra)
    try:
        timeout_job = d.submit(sleeper(tmp_path, "overrun", 30, limit="0:02"))
        pending = d.submit(sleeper(tmp_path, "wide", 1, nodes=5))
        assert d.cli("ecancel", str(pending)).returncode == 0
        folders = {m: tmp_path / m for m in ("normal", "refuse", "hang")}
        for f in folders.values():
            f.mkdir()
        normal = d.submit(recorder_job(folders["normal"], "normal", "{ min = 1, max = 4 }"))
        d.wait_event(normal, "registered")
        # A user's resize, answered by the application (held there: a node stays free).
        r = d.cli("elasticd", "resize", str(normal), "2", "--hold")
        assert r.returncode == 0 and f"job {normal}: shrunk to 2 nodes" in r.stdout, r.stdout + r.stderr
        d.wait_event(normal, "shrunk")
        refuse = d.submit(recorder_job(folders["refuse"], "refuse", "{ min = 1, max = 2 }"))
        d.wait_event(refuse, "registered")
        # The policy starts it at its minimum and may give it the free node (a grow it
        # takes), or the user does: a resize to the size it has sends nothing.
        def on_two_nodes() -> bool:
            job = d.job(refuse)
            if job["state"] == "RUNNING" and job["nodes"] == 1:
                d.cli("elasticd", "resize", "--no-wait", str(refuse), "2")  # refused while the policy orders
            return job["state"] == "RUNNING" and job["nodes"] == 2

        assert wait_until(on_two_nodes, 60, step=0.2), d.events(refuse)
        # Refused by the application, then a missed deadline.
        # `elasticd resize` waits for the outcome: a refusal is an error, saying so.
        r = d.cli("elasticd", "resize", str(refuse), "1")
        assert r.returncode == 1, r.stdout + r.stderr
        assert f"job {refuse}: the resize to 1 node did not happen: refused" in r.stderr
        d.wait_event(refuse, "refused")
        hang = d.submit(recorder_job(folders["hang"], "hang", "{ min = 1, max = 1 }"))
        d.wait([timeout_job], timeout=60)
        assert d.job(timeout_job)["state"] == "TIMEOUT"
        # The crash.
        os.kill(d.record.pid, signal.SIGKILL)
        wait_gone(d.record.pid, 30)
        d = start_daemon(state_dir, nodes=5, policy="malleable", extra=extra)
        d.wait_event(normal, "registered", count=2, timeout=60)
        for name, jid in (("normal", normal), ("refuse", refuse), ("hang", hang)):
            finish(d, folders[name], jid)
    finally:
        if alive(d.record.pid):
            stop_daemon(d.record)


def test_replay_reproduces_every_decision_of_a_recorded_run_across_a_restart(state: Path, tmp_path: Path) -> None:
    recorded_run(state, tmp_path)
    segments = read_log(state / LOG_FILE)
    assert [s.header["recovered"] for s in segments] == [False, True]
    kinds = {r["event"]["type"] for s in segments for r in s.records}
    assert {"Submitted", "PassDue", "Launched", "ShrinkAnswered", "GrowAnswered", "OrderRefused",
            "LimitReached", "CancelRequested", "ResizeRequested", "Exited", "HostsGone"} <= kinds
    rc, out, err = run_tool("elasticd", "replay", str(state))
    assert rc == 0, err
    assert "all as recorded" in out and "from 2 daemon start(s)" in out


def test_replay_names_the_first_recorded_decision_that_differs(state: Path, tmp_path: Path) -> None:
    d = start_daemon(state, nodes=2)
    try:
        jid = d.submit(sleeper(tmp_path, "short", 0.2))
        d.wait([jid])
    finally:
        stop_daemon(d.record)
    log = state / LOG_FILE
    lines = log.read_text().splitlines()
    i = next(k for k, line in enumerate(lines) if '"type":"Launch"' in line)
    lines[i] = lines[i].replace('"node1"', '"node2"')
    log.write_text("\n".join(lines) + "\n")
    rc, _out, err = run_tool("elasticd", "replay", str(state))
    assert rc == 1
    assert f"{log}:{i + 1}: event" in err and "PassDue" in err and "node2" in err


def test_eacct_gives_each_jobs_size_timeline_with_who_decided_it(state: Path, tmp_path: Path) -> None:
    d = start_daemon(state, nodes=4, policy="malleable", extra=["--min-resize-interval", "1"])
    try:
        jid = d.submit(recorder_job(tmp_path, "normal", "{ min = 1, max = 4 }"))
        d.wait_event(jid, "registered")
        assert d.cli("elasticd", "resize", str(jid), "2").returncode == 0
        d.wait_event(jid, "shrunk")
        finish(d, tmp_path, jid)
    finally:
        stop_daemon(d.record)
    rc, out, err = run_tool("eacct", str(state), "--json")
    assert rc == 0, err
    doc = json.loads(out)
    assert doc["version"] == 1
    [job] = doc["jobs"]
    assert job["state"] == "COMPLETED" and job["exit_code"] == 0
    # Finished, it still says where it ran.
    assert job["hosts"] == ["node1", "node2", "node3", "node4"] and job["max_nodes"] == 4
    steps = [(s["event"], s["nodes"], s["cause"]) for s in job["timeline"]]
    # minAgree starts it at its minimum and gives it the idle nodes; the user shrinks it.
    assert steps[:3] == [("started", 1, "policy"), ("grown", 4, "policy"), ("shrunk", 2, "user")]
    assert steps[-1] == ("ended", 0, "app")
    resizes = sum(1 for s in steps if s[0] in ("grown", "shrunk"))
    assert job["node_seconds"] > 0 and job["elapsed"] >= job["node_seconds"] / 4
    rc, out, _ = run_tool("eacct", str(state), "-o", "jobid,state,nnodes,resizes,nodelist", "-l")
    assert rc == 0
    assert out.splitlines()[0].split() == ["JobID", "State", "NNodes", "Resizes", "NodeList"]
    assert out.splitlines()[1].split() == [str(jid), "COMPLETED", "4", str(resizes), "node[1-4]"]
    assert "shrunk" in out and "user" in out
    rc, _, err = run_tool("eacct", str(state), "-o", "jobid,bogus")
    assert rc == 2 and "unknown field(s) bogus" in err


MODEL_JOB = '''
name = "{name}"
command = ["{python}", "-m", "elastic_apps.synthetic", "--work", "{work}", "--speedup", "amdahl:0.05"]
nodes = {nodes}
kind = "{kind}"
time_limit = "2"
working_dir = "."
output = "{name}-%j.out"
model = {{ speedup = "amdahl:0.05", work = {work} }}
'''


def test_what_if_runs_a_recorded_batch_under_other_policies(state: Path, tmp_path: Path) -> None:
    d = start_daemon(state, nodes=4, policy="easy")
    try:
        specs = [("m1", 8, "{ min = 1, max = 4 }", "malleable"), ("m2", 6, "{ min = 1, max = 4 }", "malleable"),
                 ("r1", 3, "2", "rigid"), ("r2", 3, "1", "rigid")]
        ids = [d.submit(write_job(tmp_path, n, MODEL_JOB.format(name=n, python=sys.executable, work=w,
                                                                   nodes=nodes, kind=k)))
               for n, w, nodes, k in specs]
        d.wait(ids, timeout=60)
        assert all(d.job(j)["state"] == "COMPLETED" for j in ids)
    finally:
        stop_daemon(d.record)
    rc, out, err = run_tool("elasticd", "sim", "--from-log", str(state), "--policy", "malleable", "--policy", "fcfs")
    assert rc == 0, err
    rows = {(c[0], c[1]): c for c in (line.split() for line in out.splitlines()[2:])}
    assert set(rows) == {("real", "easy"), ("sim", "easy"), ("sim", "malleable"), ("sim", "fcfs")}, out
    real_makespan, sim_makespan = float(rows["real", "easy"][2]), float(rows["sim", "easy"][2])
    # Each job is charged the seconds it really spent beyond its model (start-up, a loaded
    # machine), so the recorded policy replays to the recorded schedule, loaded or not.
    assert abs(sim_makespan - real_makespan) <= 0.1 * real_makespan, out
    # Under minAgree the malleable jobs are resized.
    head = out.splitlines()[1].split()
    resizes = [float(rows["sim", "malleable"][head.index(c)]) for c in ("SHRINK/J", "EXPAND/J")]
    assert sum(resizes) > 0, out


def test_what_if_writes_its_table_to_out_shows_timeouts_and_refuses_the_options_it_cannot_use(
        state: Path, tmp_path: Path) -> None:
    """`--out` was ignored by `--from-log` (exit 0, nothing written, no word), and so were
    `--seeds`, `--malleable`, `--nodes`...: the what-if now writes its table there, and
    refuses, naming them, the options of a trace's simulation. Its table has the TIMEOUT
    column the trace tables have (its records carried the time-outs; the table left them out)."""
    import csv

    d = start_daemon(state, nodes=2, policy="easy")
    try:
        ids = [d.submit(sleeper(tmp_path, "overrun", 30, limit="0:02")), d.submit(sleeper(tmp_path, "quick", 0.5))]
        d.wait(ids, timeout=60)
        assert [d.job(j)["state"] for j in ids] == ["TIMEOUT", "COMPLETED"]
    finally:
        stop_daemon(d.record)
    out = tmp_path / "whatif"
    rc, text, err = run_tool("elasticd", "sim", "--from-log", str(state), "--policy", "fcfs", "--out", str(out))
    assert rc == 0, err
    lines = text.splitlines()
    head = lines[1].split()
    assert "TIMEOUT%" in head, text
    real = next(ln.split() for ln in lines if ln.startswith("real "))
    assert real[head.index("TIMEOUT%")] == "50.0", text  # one of the two jobs
    assert f"results in {out}" in text
    with open(out / "what-if.csv") as f:
        rows = list(csv.DictReader(f))
    assert [(r["run"], r["what"], r["policy"]) for r in rows] == [("1", "real", "easy"), ("1", "sim", "easy"),
                                                                    ("1", "sim", "fcfs")]
    assert float(rows[0]["timeouts"]) == 0.5
    doc = json.loads((out / "what-if.json").read_text())
    assert doc["runs"][0]["rows"][0]["what"] == "real" and doc["runs"][0]["jobs"] == 2
    rc, _, err = run_tool("elasticd", "sim", "--from-log", str(state), "--seeds", "5", "--malleable", "50",
                          "--nodes", "8")
    assert rc != 0 and "--malleable, --seeds, --nodes do not apply to --from-log" in err, err
    assert "Traceback" not in err


def test_a_log_line_cut_short_by_a_kill_is_dropped_and_other_damage_is_named(tmp_path: Path) -> None:
    log = tmp_path / LOG_FILE
    start = {"type": "start", "format": 1, "time": 0.0, "recovered": False, "nodes": ["n1"], "policy": "easy",
             "params": {}, "order_deadline": 30.0, "refuse_backoff": 10.0, "next_job_id": 1, "next_order": 1}
    log.write_text(json.dumps(start) + "\n" + '{"seq": 1, "event": {"type": "PassD')
    assert [len(s.records) for s in read_log(log)] == [0]
    log.write_text(json.dumps(start) + "\n" + "garbage\n" + json.dumps(start) + "\n")
    rc, _, err = run_tool("elasticd", "replay", str(log))
    assert rc == 1 and f"{log}:2: not a JSON record" in err


def quiet_sleeper(folder: Path, name: str, seconds: float) -> Path:
    """A one-node `sleep` whose output goes nowhere (not into the directory pytest runs in)."""
    return write_job(folder, name, f'''
        name = "{name}"
        command = ["sleep", "{seconds}"]
        nodes = 1
        time_limit = "10"
        working_dir = "{folder}"
        output = "/dev/null"
    ''')


def test_a_log_line_cut_short_by_a_kill_stays_readable_history_after_the_next_start(state: Path, tmp_path: Path) -> None:
    """The next start ends the cut-short line before its own header; eacct, sim --from-log and a
    salvage then read the whole history (they refused it from the next start on when the
    header was written on the cut line)."""
    d = start_daemon(state, nodes=2)
    try:
        done = d.submit(quiet_sleeper(tmp_path, "done", 0))
        running = d.submit(quiet_sleeper(tmp_path, "running", 300))
        d.wait([done])
        d.wait_event(running, "launched")
    finally:
        os.kill(d.record.pid, signal.SIGKILL)
        wait_gone(d.record.pid, 30)
    log = state / LOG_FILE
    with log.open("r+b") as f:  # the last record cut short, as a kill mid-write leaves it
        f.truncate(log.stat().st_size - 40)
    d = start_daemon(state, nodes=2)
    try:
        after = d.submit(quiet_sleeper(tmp_path, "after", 0))
        d.wait([after])
    finally:
        stop_daemon(d.record)
    lines = log.read_text().split("\n")
    cut = next(i for i, line in enumerate(lines) if line.startswith('{"seq":') and not line.endswith("}"))
    assert lines[cut + 1].startswith('{"type":"start"')  # on a line of its own, the next start's header after it
    assert len(read_log(log)) == 2
    rc, out, err = run_tool("eacct", str(state), "--json")
    assert rc == 0, err
    assert [(j["job_id"], j["state"]) for j in json.loads(out)["jobs"]] == \
        [(done, "COMPLETED"), (running, "CANCELLED"), (after, "COMPLETED")]
    rc, out, err = run_tool("elasticd", "sim", "--from-log", str(state))
    assert rc == 0, err
    (state / "journal.db").unlink()  # a salvage rebuilds from the log: ids go on above every one given
    for f in state.glob("journal.db-*"):
        f.unlink()
    env = {**os.environ, "ELASTIC_STATE_DIR": str(state)}
    import subprocess

    r = subprocess.run([str(BIN / "elasticd"), "start", "--local", "2", "--salvage"], check=False,
                       capture_output=True, text=True, env=env, timeout=60)
    assert r.returncode == 0, r.stderr
    d = RunningDaemon(state, _record(state), 2)
    try:
        assert d.submit(quiet_sleeper(tmp_path, "new", 0)) == after + 1
    finally:
        stop_daemon(d.record)


def _record(state: Path):  # type: ignore[no-untyped-def]
    from elasticd.statedir import read_record

    rec = read_record(state)
    assert rec is not None
    return rec


def test_only_a_cut_short_line_the_next_start_ended_is_dropped_from_the_middle_of_a_log(tmp_path: Path) -> None:
    """A line in the middle is dropped only when it begins as a record and the next start's
    header follows it (what the writer leaves); a log written before the writer ended such
    lines holds the header on the cut line, and is read as the two; anything else is damage."""
    log = tmp_path / LOG_FILE
    start = json.dumps({"type": "start", "format": 1, "time": 0.0, "recovered": False, "nodes": ["n1"],
                        "policy": "easy", "params": {}, "order_deadline": 30.0, "refuse_backoff": 10.0,
                        "next_job_id": 1, "next_order": 1}, separators=(",", ":"))
    record = json.dumps({"seq": 1, "event": {"type": "PassDue", "cause": "policy", "time": 1.0}, "actions": []},
                        separators=(",", ":"))
    cut = record[:25]
    for text in (f"{start}\n{cut}\n{start}\n{record}\n", f"{start}\n{cut}{start}\n{record}\n"):
        log.write_text(text)
        assert [len(s.records) for s in read_log(log)] == [0, 1], text
    for text in (f"{start}\n{cut}\n{record}\n", f"{start}\ngarbage{start}\n", f"{start}\n{cut}\n{cut}{record}\n"):
        log.write_text(text)
        rc, _, err = run_tool("elasticd", "replay", str(log))
        assert rc == 1 and f"{log}:2: not a JSON record" in err, (text, err)


def test_a_log_write_the_file_system_cut_short_is_finished_at_the_next_try_not_repeated(tmp_path: Path) -> None:
    """A full disk (here a file-size limit, EFBIG) may take part of a write: the next flush
    writes the rest, so the line begun is completed and no record is written twice."""
    import resource

    from elasticd.core.events import PassDue
    from elasticd.eventlog import EventLogError, EventLogWriter

    writer = EventLogWriter(tmp_path)
    writer.start({"time": 0.0, "recovered": False, "nodes": ["n1"], "policy": "easy", "params": {},
                  "order_deadline": 30.0, "refuse_backoff": 10.0, "next_job_id": 1, "next_order": 1})
    writer.flush()
    size = (tmp_path / LOG_FILE).stat().st_size
    for t in range(20):
        writer.add(PassDue(time=float(t)), [])
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (size + 100, hard))  # Python ignores SIGXFSZ: the write fails
    try:
        with pytest.raises(EventLogError):
            writer.flush()
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
    assert (tmp_path / LOG_FILE).stat().st_size == size + 100  # a line begun and cut
    writer.flush()
    assert [r["seq"] for s in read_log(tmp_path / LOG_FILE) for r in s.records] == list(range(1, 21))


def resized_job(state_dir: Path, folder: Path, nodes: int, policy: str, to: int) -> tuple[RunningDaemon, int]:
    """A daemon started on STATE_DIR, running one malleable job that `elasticd resize` shrank to
    TO nodes (an order of this daemon start)."""
    folder.mkdir()
    d = start_daemon(state_dir, nodes=nodes, policy=policy)
    jid = d.submit(recorder_job(folder, "normal", "{ min = 1, max = 4 }"))
    d.wait_event(jid, "registered")
    d.resize(jid, to)
    d.wait_event(jid, "shrunk")
    return d, jid


def user_shrinks(timeline: list[dict]) -> list[int]:
    return [s["nodes"] for s in timeline if s["event"] == "shrunk" and s["cause"] == "user"]


def test_history_of_daemon_starts_after_clean_stops_is_replayed_accounted_and_simulated_per_run(
        state: Path, tmp_path: Path) -> None:
    """Orders are numbered on across daemon starts in one state directory (the journal keeps
    the counter through a clean stop); the replay of each start must number them the same."""
    for k, (nodes, policy) in enumerate([(4, "easy"), (8, "fcfs")], 1):
        d, jid = resized_job(state, tmp_path / f"s{k}", nodes, policy, 2)
        try:
            finish(d, tmp_path / f"s{k}", jid)
        finally:
            stop_daemon(d.record)
    segments = read_log(state / LOG_FILE)
    assert [(s.header["recovered"], s.header["next_job_id"], s.header["next_order"]) for s in segments] == \
        [(False, 1, 1), (False, 2, 2)]
    rc, out, err = run_tool("elasticd", "replay", str(state))
    assert rc == 0, err
    assert "from 2 daemon start(s)" in out and "all as recorded; 2 jobs (2 finished)" in out, out
    rc, out, err = run_tool("eacct", str(state), "--json")
    assert rc == 0, err
    jobs = json.loads(out)["jobs"]
    assert [(j["job_id"], j["state"], user_shrinks(j["timeline"])) for j in jobs] == \
        [(1, "COMPLETED", [2]), (2, "COMPLETED", [2])]
    assert all(j["node_seconds"] > 0 for j in jobs)
    # Each daemon run on its own machine under its own policy: the first on 4 nodes under
    # EASY, the second on 8 under FCFS (not one run with the first's policy and the last's nodes).
    rc, out, err = run_tool("elasticd", "sim", "--from-log", str(state), "--policy", "malleable")
    assert rc == 0, err
    lines = out.splitlines()
    assert lines[0].startswith(f"{state}: 2 daemon runs"), out
    assert "run 1 (log line 1, 1 daemon start): 1 jobs on 4 nodes, recorded under easy" in lines, out
    assert f"run 2 (log line {segments[1].line}, 1 daemon start): 1 jobs on 8 nodes, recorded under fcfs" in lines, out
    tables = [[tuple(line.split()[:2]) for line in block.splitlines()[2:]] for block in out.split("\n\n")[1:]]
    assert tables == [[("real", "easy"), ("sim", "easy"), ("sim", "malleable")],
                      [("real", "fcfs"), ("sim", "fcfs"), ("sim", "malleable")]], out


def test_history_across_kill_9_restarts_and_clean_stops_is_replayed_and_a_run_restarted_under_another_policy_is_named(
        state: Path, tmp_path: Path) -> None:
    """Two runs of the same job id space: a run that crashed and was recovered under the same
    settings, then a fresh start that crashed and was recovered under another policy."""
    runs: list[int] = []
    for k, policy_after in enumerate(["easy", "fcfs"], 1):
        folder = tmp_path / f"run{k}"
        d, jid = resized_job(state, folder, 4, "easy", 2)
        runs.append(jid)
        os.kill(d.record.pid, signal.SIGKILL)  # the crash: the job runs on
        wait_gone(d.record.pid, 30)
        d = start_daemon(state, nodes=4, policy=policy_after)
        try:
            d.wait_event(jid, "registered", count=2, timeout=60)
            d.resize(jid, 1)
            d.wait_event(jid, "shrunk", count=2)
            finish(d, folder, jid)
        finally:
            stop_daemon(d.record)
    assert runs == [1, 2]
    segments = read_log(state / LOG_FILE)
    assert [(s.header["recovered"], s.header["policy"], s.header["next_order"]) for s in segments] == \
        [(False, "easy", 1), (True, "easy", 2), (False, "easy", 3), (True, "fcfs", 4)]
    rc, out, err = run_tool("elasticd", "replay", str(state))
    assert rc == 0, err
    assert "from 4 daemon start(s)" in out and "all as recorded; 2 jobs (2 finished)" in out, out
    rc, out, err = run_tool("eacct", str(state), "--json")
    assert rc == 0, err
    jobs = json.loads(out)["jobs"]
    assert [(j["job_id"], j["state"], user_shrinks(j["timeline"])) for j in jobs] == \
        [(1, "COMPLETED", [2, 1]), (2, "COMPLETED", [2, 1])]
    rc, out, err = run_tool("elasticd", "sim", "--from-log", str(state))
    assert rc == 0, err
    lines = out.splitlines()
    assert lines[0].startswith(f"{state}: 2 daemon runs"), out
    assert "run 1 (log line 1, 2 daemon starts): 1 jobs on 4 nodes, recorded under easy" in lines, out
    assert (f"run 2 (log line {segments[2].line}, 2 daemon starts): not simulated: restarted with another machine "
            f"or policy: easy on 4 nodes (line {segments[2].line}), then fcfs on 4 nodes (line {segments[3].line}); "
            "one what-if needs one machine and one policy") in lines, out


def test_nodes_found_down_at_daemon_start_are_logged_in_that_starts_segment(state: Path, tmp_path: Path) -> None:
    """The launcher's start reports the nodes it cannot reach before the daemon takes any
    request: those events belong after the segment's header, or the log of a first start is
    unreadable ("an event before any start record") and a later start's land in the run before."""
    from elasticd.daemonctl import start_detached

    cluster = ["--hosts", "nosuch1.invalid,nosuch2.invalid", "--app-listen", "127.0.0.1", "--connect-timeout", "2",
               "--node-retry", "3600"]
    for _ in range(2):
        d = RunningDaemon(state, start_detached(state, None, "easy", 1.0, timeout=60, extra=cluster), 2)
        try:
            # Its address is out once the launcher has tried every node: both are down by now.
            d.submit(sleeper(tmp_path, "waits", 1))  # nowhere to run: it waits, and the stop ends it
        finally:
            stop_daemon(d.record)
    segments = read_log(state / LOG_FILE)
    assert [sorted(r["event"]["host"] for r in s.records if r["event"]["type"] == "NodeDown") for s in segments] == \
        [["nosuch1.invalid", "nosuch2.invalid"]] * 2
    rc, out, err = run_tool("elasticd", "replay", str(state))
    assert rc == 0, err
    assert "from 2 daemon start(s)" in out and "all as recorded; 2 jobs (2 finished)" in out, out
    rc, out, err = run_tool("eacct", str(state), "--json")
    assert rc == 0, err
    assert [(j["job_id"], j["state"], j["start"]) for j in json.loads(out)["jobs"]] == \
        [(1, "CANCELLED", None), (2, "CANCELLED", None)]
