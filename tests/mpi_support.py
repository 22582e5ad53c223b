"""What the MPI tests share: why they skip, and finding a job's MPI ranks from outside."""

from __future__ import annotations

import ctypes.util
import shutil
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import psutil
import pytest

from conftest import RunningDaemon, of_job, start_daemon, stop_daemon, write_job


def mpi_skip_reason(need_mpi4py: bool = True) -> str | None:
    """None when Open MPI (mpirun, mpicc, libmpi) and mpi4py are usable here."""
    missing = [b for b in ("mpirun", "mpicc") if shutil.which(b) is None]
    if missing or ctypes.util.find_library("mpi") is None:
        return (f"needs Open MPI ({', '.join(missing) or 'libmpi'} missing): "
                "apt-get install openmpi-bin libopenmpi-dev (deploy/vcluster.sh install does)")
    if need_mpi4py:
        try:
            import mpi4py  # noqa: F401
        except ImportError:
            return "needs mpi4py: pip install '.[test]'"
    return None


@pytest.fixture
def mpi_daemon(tmp_path: Path) -> Iterator[RunningDaemon]:
    """A local daemon of 4 nodes for MPI jobs (orders' deadline 20 s: a spawn takes seconds),
    or a skip saying what is missing. Import it into the test module to use it."""
    reason = mpi_skip_reason()
    if reason:
        pytest.skip(reason)
    d = start_daemon(tmp_path / "state", extra=["--order-deadline", "20"])
    try:
        yield d
    finally:
        stop_daemon(d.record)


def job_ranks(job_id: int, state_dir: Path, node_of: Callable[[int], str | None] | None = None) -> dict[str, list[int]]:
    """Node -> pids of the MPI ranks of job JOB_ID of the daemon on STATE_DIR (conftest.of_job)
    on this machine: by the virtual host a rank was started for (local mode), or by
    `node_of(pid)` (namespace nodes)."""
    out: dict[str, list[int]] = {}
    for p in psutil.process_iter():
        try:
            env = p.environ()
            if p.status() == psutil.STATUS_ZOMBIE:
                continue
        except (psutil.Error, OSError):
            continue
        if "OMPI_COMM_WORLD_RANK" in env and of_job(env, state_dir, job_id):
            node = env.get("ELASTIC_MPI_NODE") if node_of is None else node_of(p.pid)
            out.setdefault(node or "?", []).append(p.pid)
    return out


def jacobi_job(
    folder: Path, name: str, mode: str, nodes: str, delay: float, *, points: int, iterations: int,
    time_limit: str, mpi_fields: str = "", hold: Path | None = None,
) -> Path:
    """The Jacobi example (elastic_apps.mpi.jacobi) as a malleable MPI job file writing
    `name`.bin; `mode`: spawn or restart; `mpi_fields`: more keys of its [mpi] table; `hold`:
    a file it waits on before its last iteration while it exists."""
    more = f", {mpi_fields}" if mpi_fields else ""
    held = f', "--hold", "{hold}"' if hold is not None else ""
    return write_job(folder, name, f'''
        name = "{name}"
        command = ["{sys.executable}", "-m", "elastic_apps.mpi.jacobi", "--points", "{points}",
                   "--iterations", "{iterations}", "--delay", "{delay}", "--out", "{name}.bin"{held}]
        nodes = {nodes}
        kind = "malleable"
        launcher = "mpi"
        mpi = {{ malleability = "{mode}"{more} }}
        working_dir = "."
        output = "{name}.out"
        time_limit = "{time_limit}"
    ''')
