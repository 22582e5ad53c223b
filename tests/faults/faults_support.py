"""Faults as operators meet them: a state directory on a file system that fills up, or under
a file-size limit (the way without root), damaged journals, jobs that misbehave."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # tests/conftest.py helpers

from conftest import BIN, RunningDaemon, start_daemon, stop_daemon  # noqa: E402


def can_mount() -> bool:
    return os.geteuid() == 0 and shutil.which("mount") is not None


@pytest.fixture
def tiny_fs(tmp_path: Path) -> Iterator[Path]:
    """A 4 MiB tmpfs (root), or, without root, a plain folder: tests then use RLIMIT_FSIZE."""
    mnt = tmp_path / "tiny"
    mnt.mkdir()
    if not can_mount():
        pytest.skip("needs root to mount a small file system (the RLIMIT_FSIZE tests cover the rest)")
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m,mode=0700", "tmpfs", str(mnt)], check=True, timeout=10)
    try:
        yield mnt
    finally:
        for p in psutil.process_iter():
            with contextlib.suppress(psutil.Error):
                if any(str(mnt) in (f.path or "") for f in p.open_files()):
                    p.kill()
        subprocess.run(["umount", "-l", str(mnt)], check=False, timeout=10)


def fill(path: Path, leave: int = 0) -> Path:
    """Fill the file system `path` is on, leaving about `leave` bytes."""
    filler = path / "filler"
    st = os.statvfs(path)
    size = max(0, st.f_bavail * st.f_frsize - leave)
    with open(filler, "wb") as f:
        block = b"\0" * 65536
        try:
            while size > 0:
                f.write(block[: min(len(block), size)])
                size -= len(block)
            f.flush()
            os.fsync(f.fileno())
        except OSError:
            pass
    return filler


def cli(state_dir: Path, tool: str, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "ELASTIC_STATE_DIR": str(state_dir)}
    return subprocess.run([str(BIN / tool), *args], capture_output=True, text=True, env=env, timeout=timeout)


def kill9(d: RunningDaemon) -> None:
    os.kill(d.record.pid, signal.SIGKILL)
    psutil.Process(d.record.pid).wait(10)


@pytest.fixture
def daemons() -> Iterator[list[RunningDaemon]]:
    """Daemons a test starts (append them); each stopped, or its pid ended, at the end, and
    the processes of their jobs too."""
    started: list[RunningDaemon] = []
    yield started
    for d in started:
        if psutil.pid_exists(d.record.pid):
            with contextlib.suppress(Exception):
                stop_daemon(d.record)
        for f in (d.state_dir / "jobs").glob("*/proc-*.pid"):
            with contextlib.suppress(ValueError, OSError):
                os.killpg(int(f.read_text()), signal.SIGKILL)


def start(daemons: list[RunningDaemon], state_dir: Path, **kw: object) -> RunningDaemon:
    d = start_daemon(state_dir, **kw)  # type: ignore[arg-type]
    daemons.append(d)
    return d
