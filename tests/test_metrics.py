"""`elasticd start --metrics-port`: Prometheus metrics scraped over HTTP from a real daemon,
checked against what `equeue --json` and `elasticd status --json` say at the same time."""

from __future__ import annotations

import json
import os
import signal
import socket
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from conftest import RunningDaemon, start_daemon, stop_daemon, wait_gone, wait_until, write_job

RECORDER = Path(__file__).parent / "apps" / "recorder.py"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def scrape(port: int) -> dict[str, float]:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    out: dict[str, float] = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            out[name] = float(value)
    return out


def recorder_job(work: Path) -> Path:
    """A malleable job on 1-3 nodes that takes every order (tests/apps/recorder.py)."""
    return write_job(work, "rec", f'''
        name = "rec"
        command = ["{sys.executable}", "{RECORDER}"]
        nodes = {{ min = 1, max = 3 }}
        kind = "malleable"
        working_dir = "."
        time_limit = "2"
    ''')


@pytest.fixture
def metered(tmp_path: Path) -> Iterator[tuple[RunningDaemon, int]]:
    port = free_port()
    d = start_daemon(tmp_path / "state", nodes=4, extra=["--metrics-port", str(port)])
    try:
        yield d, port
    finally:
        stop_daemon(d.record)


@pytest.mark.timeout(60)
def test_metrics_agree_with_equeue_and_status_and_count_resizes_by_outcome_and_cause(
    metered: tuple[RunningDaemon, int], tmp_path: Path
) -> None:
    d, port = metered
    work = tmp_path / "work"
    work.mkdir()
    mall = d.submit(recorder_job(work))
    d.wait_event(mall, "registered")
    waiting = d.submit(write_job(work, "wide", 'name = "wide"\ncommand = ["sleep", "30"]\nnodes = 4\nworking_dir = "."\n'))
    assert d.cli("elasticd", "resize", str(mall), "2").returncode == 0

    def agree() -> bool:
        m = scrape(port)
        jobs = json.loads(d.cli("equeue", "--all", "--json").stdout)["jobs"]
        nodes = json.loads(d.cli("elasticd", "status", "--json").stdout)["nodes"]
        by_state = {s: sum(1 for j in jobs if j["state"] == s) for s in ("PENDING", "RUNNING", "RESIZING")}
        by_node = {s: sum(1 for n in nodes if n["state"] == s) for s in ("idle", "allocated", "down")}
        return (all(m[f'elastic_jobs{{state="{s}"}}'] == n for s, n in by_state.items())
                and all(m[f'elastic_nodes{{state="{s}"}}'] == n for s, n in by_node.items())
                and m.get('elastic_resizes_total{cause="user",outcome="shrunk"}') == 1.0)

    assert wait_until(agree, 30), scrape(port)
    m = scrape(port)
    assert m['elastic_jobs{state="RUNNING"}'] == 1 and m['elastic_jobs{state="PENDING"}'] == 1
    assert m["elastic_submitted_total"] == 2
    assert m["elastic_order_seconds_count"] == 1 and 0 < m["elastic_order_seconds_sum"] < 10
    assert m["elastic_launch_seconds_count"] == 1
    assert m["elastic_journal_commit_seconds_count"] >= 3
    assert d.cli("ecancel", str(mall), str(waiting)).returncode == 0


@pytest.mark.timeout(90)
def test_a_metrics_port_the_system_picks_is_printed_by_start_and_status(tmp_path: Path) -> None:
    """`--metrics-port 0` binds a port the system picks: it appeared only in daemon.log. Now
    `elasticd start` and `elasticd status` print where the metrics are, and they are there."""
    import os
    import re
    import subprocess

    from conftest import BIN

    env = {**os.environ, "ELASTIC_STATE_DIR": str(tmp_path / "state")}

    def tool(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(BIN / "elasticd"), *args], check=False, capture_output=True, text=True, env=env,
                              timeout=60)

    started = tool("start", "--local", "1", "--metrics-port", "0")
    try:
        assert started.returncode == 0, started.stderr
        said = re.search(r"metrics at http://127\.0\.0\.1:(\d+)/metrics", started.stdout)
        assert said is not None and said[1] != "0", started.stdout
        status = tool("status")
        assert status.returncode == 0 and f"metrics at http://127.0.0.1:{said[1]}/metrics" in status.stdout, \
            status.stdout
        assert json.loads(tool("status", "--json").stdout)["metrics"] == f"http://127.0.0.1:{said[1]}/metrics"
        assert scrape(int(said[1]))['elastic_nodes{state="idle"}'] == 1
    finally:
        if started.returncode == 0:
            assert tool("stop").returncode == 0


@pytest.mark.timeout(120)
def test_a_restarted_daemon_counts_only_what_happens_after_its_start(tmp_path: Path) -> None:
    """Counters start at zero in a new process (Prometheus reads a reset as such); a restart
    counted again every resize in its recovered jobs' histories, so a rate over the restart
    showed a burst of resizes that had happened before it."""
    work = tmp_path / "work"
    work.mkdir()
    port = free_port()
    d = start_daemon(tmp_path / "state", nodes=4, extra=["--metrics-port", str(port)])
    try:
        mall = d.submit(recorder_job(work))
        d.wait_event(mall, "registered")
        assert d.cli("elasticd", "resize", str(mall), "2").returncode == 0
        assert wait_until(lambda: scrape(port).get('elastic_resizes_total{cause="user",outcome="shrunk"}') == 1.0, 30)
    except BaseException:
        stop_daemon(d.record)
        raise
    os.kill(d.record.pid, signal.SIGKILL)  # the job runs on, to be taken back with its history
    wait_gone(d.record.pid)
    port = free_port()
    d = start_daemon(tmp_path / "state", nodes=4, extra=["--metrics-port", str(port)])
    try:
        assert "shrunk" in d.cli("eacct", "-j", str(mall), "-l").stdout  # its history is back
        m = scrape(port)
        assert m['elastic_jobs{state="RUNNING"}'] == 1
        assert m.get('elastic_resizes_total{cause="user",outcome="shrunk"}', 0.0) == 0.0, m
        assert d.cli("ecancel", str(mall)).returncode == 0
    finally:
        stop_daemon(d.record)
