"""The command-line tools as a new user meets them: every tool has --version, a wrong
argument is one line naming it (never a lambda or a traceback), the synthetic
application run by hand says what it is for, and every output is explained where it
appears: each command and argument has its line of help, the tables' columns a legend in
the --help of what prints them, counts agree with their nouns, and `eacct -o` holds with
--json."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import BIN, RunningDaemon
from elasticd import __version__


def run(*argv: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(argv), check=False, capture_output=True, text=True, timeout=30, env=env)


@pytest.mark.parametrize("tool", ["elasticd", "esubmit", "equeue", "ecancel", "eacct"])
def test_every_tool_says_its_version(tool: str) -> None:
    r = run(str(BIN / tool), "--version")
    assert r.returncode == 0 and r.stdout.strip() == f"{tool} {__version__}"


@pytest.mark.parametrize(("argv", "message"), [
    (["equeue", "-j", "abc"], "argument -j/--jobs: 'abc' is not a comma-separated list of job ids (e.g. 3,5,8)"),
    (["elasticd", "resize", "3", "0"], "argument nodes: 0 must be 1 or more"),
    (["ecancel", "x"], "argument ID: invalid int value: 'x'"),
    # Past a year a duration overflows the clock arithmetic it goes into: 1e308 was taken,
    # and `elasticd stop` then died in a traceback (settimeout out of range).
    (["elasticd", "start", "--local", "1", "--kill-wait", "1e308"],
     "argument --kill-wait: 1e308 must be a number of seconds from 0 to 31622400 (a year)"),
    (["elasticd", "start", "--local", "1", "--node-timeout", "nan"],
     "argument --node-timeout: nan must be a number of seconds from 0 to 31622400 (a year)"),
    (["elasticd", "run", "examples/mixed", "--timeout", "-1"],
     "argument --timeout: -1 must be a number of seconds from 0 to 31622400 (a year)"),
])
def test_a_wrong_argument_is_one_line_naming_it(argv: list[str], message: str) -> None:
    r = run(str(BIN / argv[0]), *argv[1:])
    assert r.returncode == 2
    assert r.stderr.strip().splitlines()[-1].endswith(message), r.stderr
    assert "Traceback" not in r.stderr and "lambda" not in r.stderr


def test_the_synthetic_app_outside_a_job_says_what_it_is_for() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ELASTIC_")}
    r = run(sys.executable, "-m", "elastic_apps.synthetic", "--work", "1", env=env)
    assert r.returncode == 2
    assert r.stderr.count("\n") == 1 and "not running inside an elastic job" in r.stderr
    assert "it is started as a job's command" in r.stderr


@pytest.mark.timeout(60)
def test_a_job_wider_than_the_cluster_is_refused_in_one_line(daemon: RunningDaemon, workdir: Path) -> None:
    (workdir / "wide.toml").write_text('name = "wide"\ncommand = ["true"]\nnodes = 9\n')
    r = daemon.cli("esubmit", str(workdir / "wide.toml"))
    assert r.returncode == 1
    assert r.stderr.count("9 nodes requested but the cluster has 4") == 1, r.stderr


@pytest.mark.parametrize("argv", [["elasticd", "start"], ["elasticd", "status"], ["elasticd", "release"],
                                  ["elasticd", "resize"], ["elasticd", "evaluate"], ["elasticd", "experiment"],
                                  ["elasticd", "sim"], ["esubmit"], ["equeue"], ["ecancel"], ["eacct"]])
def test_every_option_in_help_says_what_it_is_for(argv: list[str]) -> None:
    r = run(str(BIN / argv[0]), *argv[1:], "--help")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    bare = []
    for k, line in enumerate(lines):
        words = line.strip()
        if not line.startswith("  ") or line.startswith("   ") or not words or words.startswith(("-h", "--version")):
            continue
        name = words.split("  ", 1)[0]
        if not name.startswith("-") and " " in name:
            continue  # a group's description, not an option
        if "  " in words:  # help on the same line, after the option's name
            continue
        following = lines[k + 1] if k + 1 < len(lines) else ""
        if following.startswith("      ") and following.strip():
            continue  # help on the next line
        bare.append(words)
    assert bare == []


# ---- every output explained where it appears (issue #38, point 3) ----------------------------
def _parsers() -> list[tuple[str, argparse.ArgumentParser]]:
    from elasticd.cli import eacct, ecancel, elasticd_main, equeue, esubmit

    top = elasticd_main.build_parser()
    sub = next(a for a in top._actions if isinstance(a, argparse._SubParsersAction))
    return [("elasticd " + name, p) for name, p in sub.choices.items()] + [
        (m.__name__.rsplit(".", 1)[-1], m.build_parser()) for m in (equeue, esubmit, ecancel, eacct)]


@pytest.mark.parametrize(("name", "parser"), _parsers(), ids=[n for n, _ in _parsers()])
def test_every_command_and_argument_says_in_one_line_what_it_is(name: str, parser: argparse.ArgumentParser) -> None:
    assert parser.description, f"`{name} --help` does not say what it does"
    bare = [a.metavar or a.dest for a in parser._actions if not a.help and not isinstance(a, argparse._HelpAction)]
    assert bare == [], f"{name}: arguments without help: {bare}"


def test_the_column_legends_are_in_the_help_of_what_prints_them() -> None:
    from elasticd.cli.eacct import FIELDS
    from elasticd.cli.equeue import COLUMNS

    queue = run(str(BIN / "equeue"), "--help").stdout
    legend = queue[queue.index("columns:"):]
    assert all(f"\n  {c} " in legend for c in COLUMNS), legend
    batch = run(str(BIN / "elasticd"), "run", "--help").stdout
    assert "2/6/8 = it started, shrank or" in batch and "BSLD           bounded slowdown" in batch, batch
    assert "each job's output goes to its `output` file" in batch, batch
    acct = run(str(BIN / "eacct"), "--help").stdout
    legend = acct[acct.index("fields (-o):"):]
    assert all(f in legend for f in FIELDS), legend


def test_counts_agree_with_their_nouns() -> None:
    from elasticd.table import count, named

    assert [count(n, "node") for n in (0, 1, 2)] == ["0 nodes", "1 node", "2 nodes"]
    assert named("job", [3]) == "job 3" and named("job", [3, 4]) == "jobs 3, 4"


@pytest.mark.timeout(90)
def test_a_shrink_to_one_node_says_one_node(daemon: RunningDaemon, workdir: Path) -> None:
    recorder = Path(__file__).parent / "apps" / "recorder.py"
    (workdir / "rec.toml").write_text(f'name = "rec"\ncommand = ["{sys.executable}", "{recorder}"]\n'
                                      'nodes = { min = 1, max = 2 }\nkind = "malleable"\nworking_dir = "."\n')
    jid = daemon.submit(workdir / "rec.toml")
    daemon.wait_event(jid, "registered")
    r = daemon.cli("elasticd", "resize", str(jid), "1")
    assert r.returncode == 0 and r.stdout.strip() == f"job {jid}: shrunk to 1 node (node1)", (r.stdout, r.stderr)
    r = daemon.cli("elasticd", "resize", str(jid), "1")
    assert r.stdout.strip() == f"job {jid}: already runs on 1 node", r.stdout
    (workdir / "finish").touch()
    daemon.wait([jid], timeout=60)

    # eacct -o with --json: the fields asked for, by their JSON keys, and -l adds the timeline.
    r = daemon.cli("eacct", str(daemon.state_dir), "-j", str(jid), "-o", "jobid,state,nnodes,exitcode", "--json")
    assert r.returncode == 0, r.stderr
    [job] = json.loads(r.stdout)["jobs"]
    assert job == {"job_id": jid, "state": "COMPLETED", "max_nodes": 2, "exit_code": 0, "exit_signal": 0}
    r = daemon.cli("eacct", str(daemon.state_dir), "-j", str(jid), "-o", "resizes", "-l", "--json")
    [job] = json.loads(r.stdout)["jobs"]
    assert sorted(job) == ["resizes", "timeline"] and job["resizes"] == 1, job
    # Without -o, the whole account, as before.
    [whole] = json.loads(daemon.cli("eacct", str(daemon.state_dir), "-j", str(jid), "--json").stdout)["jobs"]
    assert {"job_id", "name", "node_seconds", "timeline"} <= set(whole)
