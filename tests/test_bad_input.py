"""Bad input names what is wrong and where; the daemon keeps running and keeps its jobs."""

from __future__ import annotations

import json
import os
import socket
import subprocess
from pathlib import Path

import pytest

from conftest import BIN, RunningDaemon, write_job
from elastic_protocol.control import Hello, Queue
from elastic_protocol.framing import LineSocket
from elastic_protocol.version import MAX_LINE_BYTES, PROTOCOL_VERSION
from elasticd.client import ControlClient
from elasticd.errors import DaemonError
from elasticd.statedir import DaemonRecord

GOOD = '''
name = "good"
command = ["sleep", "300"]
nodes = 1
working_dir = "."
'''


def esubmit_errors(d: RunningDaemon, path: Path) -> list[str]:
    r = d.cli("esubmit", str(path))
    assert r.returncode == 1, r.stdout
    assert "Traceback" not in r.stderr
    return r.stderr.strip().splitlines()


@pytest.fixture
def kept_job(daemon: RunningDaemon, workdir: Path) -> int:
    """A running job that must survive every bad request below."""
    r = daemon.cli("esubmit", "--parsable", str(write_job(workdir, "good", GOOD)))
    return int(r.stdout)


def assert_daemon_kept(d: RunningDaemon, job_id: int) -> None:
    assert d.jobs(job_id)[job_id]["state"] == "RUNNING"


def test_toml_syntax_error_names_line_and_column(daemon: RunningDaemon, workdir: Path, kept_job: int) -> None:
    path = workdir / "broken.toml"
    path.write_text('name = "x"\ncommand = ["a"\nnodes = 1\n')
    lines = esubmit_errors(daemon, path)
    assert lines[0] == f"esubmit: error: {path}: invalid job file"
    assert "TOML syntax error at line 3, column" in lines[1]
    assert_daemon_kept(daemon, kept_job)


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ('command = ["true"]\nnodes = 1', "name: missing required field"),
        ('name = "x"\nnodes = 1', "command: missing required field"),
        ('name = "x"\ncommand = ["true"]', "nodes: missing required field"),
        ('name = "x"\ncommand = ["true"]\nnodes = 1\nwalltime = "1"', "walltime: unknown field"),
        ('name = "x"\ncommand = ["true"]\nnodes = { min = 4, max = 2 }', "nodes: min (4) is greater than max (2)"),
        ('name = "x"\ncommand = ["true"]\nnodes = 0', "nodes: Input should be greater than or equal to 1"),
        ('name = "x"\ncommand = ["true"]\nnodes = { min = 0, max = 2 }', "nodes.min: Input should be greater than or equal to 1"),
        ('name = "x"\ncommand = ["true"]\nnodes = 1\ntime_limit = "1:2:3:4"', "time_limit: unparsable time limit '1:2:3:4'"),
        ('name = "x"\ncommand = ["true"]\nnodes = 1\nkind = "stretchy"', "kind: Input should be 'rigid', 'moldable', 'malleable' or 'evolving'"),
        ('name = "x"\ncommand = ["true"]\nnodes = { min = 1, max = 2 }\nkind = "rigid"', "nodes: a rigid job needs a fixed node count"),
        ('name = "x"\ncommand = ["true"]\nnodes = "four"', "nodes: must be an integer or a table {min, max, preferred}"),
        ('name = "x"\ncommand = ["true"]\nnodes = 1\nlauncher = "mpich"', "launcher: Input should be 'host' or 'mpi'"),
        ('name = "x"\ncommand = ["true"]\nnodes = 1\nmpi = { ranks_per_node = 2 }', 'mpi: only MPI jobs (launcher = "mpi") take an [mpi] table'),
        ('name = "x"\ncommand = ["true"]\nnodes = 1\nlauncher = "mpi"\nmpi = { ranks_per_node = 0 }', "mpi.ranks_per_node: Input should be greater than or equal to 1"),
        ('name = "x"\ncommand = ["true"]\nnodes = 1\nlauncher = "mpi"\nmpi = { malleability = "fork" }', "mpi.malleability: Input should be 'spawn' or 'restart'"),
        ('name = "x"\ncommand = ["true"]\nnodes = 1\nlauncher = "mpi"\nmpi = { np = 4 }', "mpi.np: unknown field"),
        ('name = "x"\ncommand = ["true"]\nnodes = 1\nsubmit_offset = inf', "submit_offset: Input should be a finite number"),
    ],
)
def test_invalid_field_is_rejected_with_one_line_naming_it(
    daemon: RunningDaemon, workdir: Path, body: str, expected: str
) -> None:
    lines = esubmit_errors(daemon, write_job(workdir, "bad", body))
    assert any(expected in line for line in lines[1:]), lines


@pytest.mark.parametrize("source", ["/dev/zero", "big"])
def test_a_job_file_past_the_size_limit_is_refused_without_reading_it_all(
        daemon: RunningDaemon, workdir: Path, kept_job: int, source: str) -> None:
    """/dev/zero has no size to stat: read without a bound, it took 8 GB in 6 s."""
    path = Path(source) if source.startswith("/") else workdir / "big.toml"
    if not source.startswith("/"):
        path.write_text(GOOD + "# " + "x" * 40_000 + "\n")
    r = daemon.cli("esubmit", str(path), timeout=60)
    assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr
    assert "more than a job file may hold (32 KiB)" in r.stderr, r.stderr
    assert_daemon_kept(daemon, kept_job)


def test_every_problem_gets_its_own_line(daemon: RunningDaemon, workdir: Path) -> None:
    lines = esubmit_errors(daemon, write_job(workdir, "bad", 'command = []\nnodes = 0\nfoo = 1'))
    problems = [line.strip() for line in lines[1:]]
    assert any(p.startswith("name:") for p in problems)
    assert any(p.startswith("command:") for p in problems)
    assert any(p.startswith("nodes:") for p in problems)
    assert any(p.startswith("foo: unknown field") for p in problems)


def test_more_nodes_than_the_cluster_is_rejected_by_the_daemon(daemon: RunningDaemon, workdir: Path, kept_job: int) -> None:
    lines = esubmit_errors(daemon, write_job(workdir, "wide", 'name = "w"\ncommand = ["true"]\nnodes = 5'))
    assert any("nodes: 5 nodes requested but the cluster has 4" in line for line in lines), lines
    lines = esubmit_errors(daemon, write_job(workdir, "wide2", 'name = "w"\ncommand = ["true"]\nnodes = {min = 6, max = 8}'))
    assert any("nodes.min: 6 nodes requested but the cluster has 4" in line for line in lines), lines
    assert_daemon_kept(daemon, kept_job)


def test_invalid_spec_sent_directly_is_rejected_by_the_daemon_itself(daemon: RunningDaemon, kept_job: int) -> None:
    """The daemon trusts no client: a raw submit that skipped esubmit's checks is refused."""
    with daemon.client() as c:
        io = c._io
        io.send_line(json.dumps({"op": "submit", "spec": {"name": "x", "command": ["true"], "nodes": {"min": 3, "max": 1}, "bogus": 1}}).encode())
        reply = json.loads(io.read_line())
    assert reply["ok"] is False
    assert reply["error"]["code"] == "invalid_job"
    assert "nodes: min (3) is greater than max (1)" in reply["error"]["details"]
    assert "bogus: unknown field" in reply["error"]["details"]
    assert_daemon_kept(daemon, kept_job)


def test_a_job_file_cannot_set_the_variables_the_daemon_sets_for_its_processes(
    daemon: RunningDaemon, workdir: Path, kept_job: int
) -> None:
    """They were overridden without a word (ELASTIC_APP_ADDRESS, say, to reach the daemon
    through a proxy): refused, each named, by esubmit and by the daemon itself."""
    body = ('name = "e"\ncommand = ["true"]\nnodes = 1\n'
            'env = { ELASTIC_APP_ADDRESS = "127.0.0.1:1", ELASTIC_JOB_SECRET = "x", ELASTIC_RECONNECT_SECONDS = "5" }')
    lines = esubmit_errors(daemon, write_job(workdir, "env", body))
    problems = [line.strip() for line in lines[1:]]
    assert problems == [
        "env.ELASTIC_APP_ADDRESS: set by the daemon for every process of the job; a job file cannot change it",
        "env.ELASTIC_JOB_SECRET: set by the daemon for every process of the job; a job file cannot change it",
    ], lines
    with daemon.client() as c:
        io = c._io
        io.send_line(json.dumps({"op": "submit", "spec": {"name": "e", "command": ["true"], "nodes": 1,
                                                          "working_dir": str(workdir),
                                                          "env": {"ELASTIC_HOST": "node9"}}}).encode())
        reply = json.loads(io.read_line())
    assert reply["ok"] is False and reply["error"]["code"] == "invalid_job", reply
    assert reply["error"]["details"] == [
        "env.ELASTIC_HOST: set by the daemon for every process of the job; a job file cannot change it"]
    # The library's own setting is the job's to choose.
    ok = write_job(workdir, "ok", 'name = "ok"\ncommand = ["true"]\nnodes = 1\nworking_dir = "."\nenv = { ELASTIC_RECONNECT_SECONDS = "5" }')
    assert daemon.cli("esubmit", str(ok)).returncode == 0
    assert_daemon_kept(daemon, kept_job)


def test_a_relative_working_dir_on_the_control_channel_is_refused_not_resolved_by_the_daemon(
    daemon: RunningDaemon, kept_job: int
) -> None:
    with daemon.client() as c:
        io = c._io
        io.send_line(json.dumps({"op": "submit", "spec": {"name": "x", "command": ["true"], "nodes": 1,
                                                          "working_dir": "data/run1"}}).encode())
        reply = json.loads(io.read_line())
    assert reply["ok"] is False and reply["error"]["code"] == "bad_request"
    assert "working_dir 'data/run1' is relative: send an absolute path" in reply["error"]["message"]
    assert_daemon_kept(daemon, kept_job)


def raw_connect(rec: DaemonRecord) -> LineSocket:
    s = socket.create_connection((rec.control_host, rec.control_port), timeout=10)
    return LineSocket(s, MAX_LINE_BYTES * 2)


def test_wrong_secret_is_refused_and_logged(daemon: RunningDaemon, kept_job: int) -> None:
    io = raw_connect(daemon.record)
    io.send_line(Hello(version=PROTOCOL_VERSION, secret="0" * 64, client="intruder").model_dump_json().encode())
    reply = json.loads(io.read_line())
    assert reply["ok"] is False and reply["error"]["code"] == "auth_failed"
    assert io.read_line() is None  # connection closed
    io.close()
    log = (daemon.state_dir / "daemon.log").read_text()
    assert "wrong secret" in log and "intruder" in log
    assert_daemon_kept(daemon, kept_job)


def test_request_before_hello_is_refused(daemon: RunningDaemon) -> None:
    io = raw_connect(daemon.record)
    io.send_line(Queue().model_dump_json().encode())
    reply = json.loads(io.read_line())
    assert reply["error"]["code"] == "bad_request"
    io.close()


def test_garbage_and_over_long_lines_get_typed_errors_and_daemon_keeps_jobs(daemon: RunningDaemon, kept_job: int) -> None:
    with daemon.client() as c:
        io = c._io
        # A JSON true, 1.0 or "1" is not job 1 (lax validation cancelled the kept job for
        # `[true]`), and no number is infinite.
        for junk in (b"not json", b"[1,2,3]", b'{"op":"explode"}', b'{"op":"cancel","job_ids":"x"}', b"\xff\xfe\x00garbage",
                     b'{"op":"cancel","job_ids":[true]}', b'{"op":"cancel","job_ids":[1.0]}',
                     b'{"op":"cancel","job_ids":["1"]}', b'{"op":"wait","timeout":Infinity}'):
            io.send_line(junk)
            reply = json.loads(io.read_line())
            assert reply["ok"] is False and reply["error"]["code"] == "bad_request", (junk, reply)
            assert "Traceback" not in json.dumps(reply)
        # The connection is still usable after bad requests.
        assert c.request(Queue())["jobs"]
    io = raw_connect(daemon.record)
    io.send_line(Hello(version=PROTOCOL_VERSION, secret=daemon.record.secret).model_dump_json().encode())
    assert json.loads(io.read_line())["ok"]
    io.sock.sendall(b"x" * (MAX_LINE_BYTES + 10) + b"\n")
    reply = json.loads(io.read_line())
    assert reply["error"]["code"] == "line_too_long"
    io.close()
    assert_daemon_kept(daemon, kept_job)


def test_version_mismatch_is_refused_with_both_versions(daemon: RunningDaemon) -> None:
    io = raw_connect(daemon.record)
    io.send_line(Hello(version=99, secret=daemon.record.secret).model_dump_json().encode())
    reply = json.loads(io.read_line())
    assert reply["error"]["code"] == "version_mismatch"
    assert "99" in reply["error"]["message"]
    io.close()


def test_application_channel_refuses_a_wrong_job_secret(daemon: RunningDaemon, kept_job: int) -> None:
    s = socket.create_connection((daemon.record.app_host, daemon.record.app_port), timeout=10)
    io = LineSocket(s, 8192)
    io.send_line(f"hello {PROTOCOL_VERSION} {kept_job} deadbeef".encode())
    assert io.read_line().startswith(b"error auth_failed")
    io.close()
    assert_daemon_kept(daemon, kept_job)


@pytest.mark.parametrize("tool", [["esubmit", "x.toml"], ["equeue"], ["ecancel", "1"], ["elasticd", "stop"]])
def test_tool_without_a_daemon_says_so_and_how_to_start_one(tmp_path: Path, tool: list[str]) -> None:
    (tmp_path / "x.toml").write_text('name = "x"\ncommand = ["true"]\nnodes = 1\n')
    env = {**os.environ, "ELASTIC_STATE_DIR": str(tmp_path / "nostate")}
    r = subprocess.run([str(BIN / tool[0]), *tool[1:]], check=False, capture_output=True, text=True, env=env, timeout=30, cwd=tmp_path)
    assert r.returncode == 1
    assert "no elastic daemon is running" in r.stderr
    assert "elasticd start --local N" in r.stderr
    assert "Traceback" not in r.stderr


def test_second_daemon_on_the_same_state_directory_is_refused(daemon: RunningDaemon) -> None:
    r = daemon.cli("elasticd", "start", "--local", "2")
    assert r.returncode == 1
    assert "already running" in r.stderr


def test_client_error_is_a_typed_daemon_error(daemon: RunningDaemon) -> None:
    with daemon.client() as c, pytest.raises(DaemonError) as info:
        c.request(Queue(job_ids=[12345]))
    assert info.value.code == "unknown_job"


def test_state_directory_and_secret_file_are_private(daemon: RunningDaemon) -> None:
    assert (daemon.state_dir.stat().st_mode & 0o777) == 0o700
    assert ((daemon.state_dir / "daemon.json").stat().st_mode & 0o777) == 0o600


def test_control_client_refuses_wrong_secret_from_record(daemon: RunningDaemon) -> None:
    bad = DaemonRecord(**{**daemon.record.__dict__, "secret": "f" * 64})
    with pytest.raises(DaemonError) as info:
        ControlClient(bad)
    assert info.value.code == "auth_failed"
