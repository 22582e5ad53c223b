"""Faults as operators meet them: a state directory on a file system that fills up, or under
a file-size limit (the way without root), damaged journals, jobs that misbehave."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # tests/conftest.py helpers

from conftest import BIN, RunningDaemon, start_daemon, wait_gone, write_job


def can_mount() -> bool:
    return os.geteuid() == 0 and shutil.which("mount") is not None


def fill(path: Path, leave: int = 0) -> Path:
    """Fill the file system `path` is on, leaving about `leave` bytes."""
    filler = path / "filler"
    st = os.statvfs(path)
    size = max(0, st.f_bavail * st.f_frsize - leave)
    # Unbuffered: a write the disk refuses leaves nothing in a buffer for the close to try
    # again (it raised ENOSPC out of the `with` when the daemon wrote meanwhile and the disk
    # filled before `size` bytes were in).
    with open(filler, "wb", buffering=0) as f:
        block = b"\0" * 65536
        try:
            while size > 0:
                f.write(block[: min(len(block), size)])
                size -= len(block)
            os.fsync(f.fileno())
        except OSError:
            pass
    return filler


def cli(state_dir: Path, tool: str, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "ELASTIC_STATE_DIR": str(state_dir)}
    return subprocess.run([str(BIN / tool), *args], check=False, capture_output=True, text=True, env=env, timeout=timeout)


def kill9(d: RunningDaemon) -> None:
    os.kill(d.record.pid, signal.SIGKILL)
    wait_gone(d.record.pid, 30)


def start(daemons: list[RunningDaemon], state_dir: Path, **kw: object) -> RunningDaemon:
    d = start_daemon(state_dir, **kw)  # type: ignore[arg-type]
    daemons.append(d)
    return d


def sleeper(folder: Path, name: str, seconds: float = 120, nodes: int = 1) -> Path:
    """A job file: `sleep` on `nodes` nodes, output thrown away (the disk is what is tested)."""
    return write_job(folder, name, f'''
        name = "{name}"
        command = ["sleep", "{seconds}"]
        nodes = {nodes}
        time_limit = "5"
        working_dir = "{folder}"
        output = "/dev/null"
    ''')


def queue(state_dir: Path) -> dict[int, dict]:
    """Every job the daemon has (equeue --all --json), by id."""
    r = cli(state_dir, "equeue", "--all", "--json")
    assert r.returncode == 0, r.stderr
    return {j["job_id"]: j for j in json.loads(r.stdout)["jobs"]}
