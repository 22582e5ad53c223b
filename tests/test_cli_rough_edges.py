"""The command-line tools as a new user meets them: every tool has --version, a wrong
argument is one line naming it (never a lambda or a traceback), and the synthetic
application run by hand says what it is for."""

from __future__ import annotations

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
