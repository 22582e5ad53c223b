"""A malleable MPI job (the Jacobi example) grown 2 -> 4 and shrunk 4 -> 2 by a real local
daemon, by spawning from inside and by checkpoint-restart: the result is bit-identical to a
run without resizes, and no rank is left on the released hosts."""

from __future__ import annotations

from pathlib import Path

import pytest

import mpi_support
from conftest import RunningDaemon, wait_until, write_job
from mpi_support import jacobi_job, job_ranks

mpi_daemon = mpi_support.mpi_daemon  # a fixture, shared with test_app_guide

pytestmark = [pytest.mark.timeout(120)]

ITERATIONS = 1500
POINTS = 5000



def jacobi(folder: Path, name: str, mode: str, nodes: str, delay: float, hold: Path | None = None) -> Path:
    return jacobi_job(folder, name, mode, nodes, delay, points=POINTS, iterations=ITERATIONS, time_limit="2",
                      hold=hold)


def reference(d: RunningDaemon, folder: Path) -> bytes:
    jid = d.submit(jacobi(folder, "ref", "spawn", "2", 0.0))
    d.wait([jid], timeout=60)
    assert d.job(jid)["state"] == "COMPLETED", (folder / "ref.out").read_text()
    return (folder / "ref.bin").read_bytes()


def grow_then_shrink(d: RunningDaemon, folder: Path, mode: str) -> tuple[int, str]:
    # A filler holds two nodes so that the job starts on two, then gives them back.
    filler = d.submit(write_job(folder, "filler", 'name = "filler"\ncommand = ["sleep", "300"]\nnodes = 2\nworking_dir = "."\n'))
    # The job waits before its last iteration until both resizes are done: on a loaded
    # machine its three CLI round trips took longer than its ~6 s of iterations.
    hold = folder / f"hold-{mode}"
    hold.touch()
    jid = d.submit(jacobi(folder, mode, mode, "{ min = 2, max = 4 }", 0.004, hold))
    d.wait_event(jid, "registered", timeout=60)
    assert d.job(jid)["hosts"] == ["node3", "node4"] or d.job(jid)["nodes"] == 2
    assert d.cli("ecancel", str(filler)).returncode == 0
    d.wait([filler], timeout=60)
    d.resize(jid, 4)
    d.wait_event(jid, "grown", timeout=30)
    if mode == "restart":
        d.wait_event(jid, "registered", count=2, timeout=30)
    hosts = d.job(jid)["hosts"]
    assert len(hosts) == 4
    assert wait_until(lambda: all(job_ranks(jid, d.state_dir).get(h) for h in hosts), 60), job_ranks(jid, d.state_dir)
    grown_on = sorted(job_ranks(jid, d.state_dir))
    d.resize(jid, 2)
    info = d.wait_event(jid, "shrunk", timeout=30)
    released = [h for h in hosts if h not in info["hosts"]]
    assert len(released) == 2
    ranks = job_ranks(jid, d.state_dir)
    assert not any(ranks.get(h) for h in released), ranks
    hold.unlink()
    d.wait([jid], timeout=60)
    out = (folder / f"{mode}.out").read_text()
    assert d.job(jid)["state"] == "COMPLETED", out
    assert job_ranks(jid, d.state_dir) == {}
    assert sorted(grown_on) == sorted(hosts)
    log = (d.state_dir / "daemon.log").read_text()
    assert f"job {jid}: verified no MPI rank left on {','.join(released)}" in log
    return jid, out


def test_spawn_mode_grow_and_shrink_give_the_same_result_as_no_resize(mpi_daemon: RunningDaemon, workdir: Path) -> None:
    ref = reference(mpi_daemon, workdir)
    jid, out = grow_then_shrink(mpi_daemon, workdir, "spawn")
    assert "2 ranks at the end, 2 resizes" in out, out
    assert (workdir / "spawn.bin").read_bytes() == ref
    log = (mpi_daemon.state_dir / "daemon.log").read_text()
    assert f"job {jid}: verified MPI ranks on new hosts" in log


def test_restart_mode_grow_and_shrink_resume_from_checkpoint_with_the_same_result(
    mpi_daemon: RunningDaemon, workdir: Path
) -> None:
    ref = reference(mpi_daemon, workdir)
    jid, out = grow_then_shrink(mpi_daemon, workdir, "restart")
    assert out.count("restarting") == 0
    assert (workdir / "restart.bin").read_bytes() == ref
    log = (mpi_daemon.state_dir / "daemon.log").read_text()
    assert log.count(f"job {jid}: restarting mpirun") == 2
