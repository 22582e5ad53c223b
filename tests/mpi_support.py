"""What the MPI tests share: why they skip, and finding a job's MPI ranks from outside."""

from __future__ import annotations

import ctypes.util
import shutil
from collections.abc import Callable

import psutil


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


def job_ranks(job_id: int, node_of: Callable[[int], str | None] | None = None) -> dict[str, list[int]]:
    """Node -> pids of the job's MPI ranks on this machine: by the virtual host a rank was
    started for (local mode), or by `node_of(pid)` (namespace nodes)."""
    out: dict[str, list[int]] = {}
    for p in psutil.process_iter():
        try:
            env = p.environ()
            if p.status() == psutil.STATUS_ZOMBIE:
                continue
        except (psutil.Error, OSError):
            continue
        if env.get("ELASTIC_JOB_ID") == str(job_id) and "OMPI_COMM_WORLD_RANK" in env:
            node = env.get("ELASTIC_MPI_NODE") if node_of is None else node_of(p.pid)
            out.setdefault(node or "?", []).append(p.pid)
    return out
