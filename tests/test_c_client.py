"""The application channel spec is enough for a C program: a gcc-built client obeys
shrink and grow from a real daemon."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import RunningDaemon, read_pid, wait_until, write_job
from test_malleability import alive, resize

SOURCE = Path(__file__).parent.parent / "apps" / "c" / "elastic_client.c"


@pytest.fixture(scope="module")
def c_client(tmp_path_factory: pytest.TempPathFactory) -> Path:
    gcc = shutil.which("gcc") or shutil.which("cc")
    if gcc is None:
        pytest.skip("no C compiler (gcc) on this machine: apt-get install gcc")
    out = tmp_path_factory.mktemp("cbuild") / "elastic_client"
    subprocess.run([gcc, "-O2", "-Wall", "-Werror", "-o", str(out), str(SOURCE)], check=True, timeout=60)
    return out


def test_c_client_registers_obeys_shrink_and_grow_and_exits(daemon: RunningDaemon, workdir: Path, c_client: Path) -> None:
    jid = daemon.submit(write_job(workdir, "c", f'''
        name = "cclient"
        command = ["sh", "-c", "echo $$ > pid-$ELASTIC_HOST-$ELASTIC_JOINING; exec {c_client} 2"]
        nodes = {{ min = 1, max = 4 }}
        kind = "malleable"
        working_dir = "."
        time_limit = "1"
    '''))
    daemon.wait_event(jid, "registered")
    assert wait_until(lambda: (workdir / "pid-node4-0").exists())
    released = [read_pid(workdir / f"pid-node{i}-0") for i in (3, 4)]
    assert resize(daemon, jid, 2).returncode == 0
    info = daemon.wait_event(jid, "shrunk")
    assert info["hosts"] == ["node1", "node2"]
    assert not any(alive(p) for p in released)
    assert resize(daemon, jid, 4).returncode == 0
    info = daemon.wait_event(jid, "grown")
    # The event's hosts, not the job's: the client ends right after its second order.
    grown = next(e for e in info["events"] if e["event"] == "grown")
    assert grown["hosts"] == ["node1", "node2", "node3", "node4"]
    # The grow's processes write these as they start, which may be after `grown`.
    assert wait_until(lambda: (workdir / "pid-node3-1").exists() and (workdir / "pid-node4-1").exists(), 30)
    daemon.wait([jid], timeout=60)
    info = daemon.job(jid)
    assert info["state"] == "COMPLETED", info
    assert "deregistered" in [e["event"] for e in info["events"]]
    assert "obeyed 2 orders, ending on 4 hosts" in (workdir / f"elastic-{jid}.out").read_text()
