"""MPI jobs in local mode: one mpirun per job over the job's hosts, any MPI program."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import RunningDaemon, wait_until, write_job
from mpi_support import job_ranks, mpi_skip_reason

APPS = Path(__file__).parent / "apps"

pytestmark = [pytest.mark.timeout(90)]


@pytest.fixture(scope="module")
def mpi_hello_binary(tmp_path_factory: pytest.TempPathFactory) -> Path:
    reason = mpi_skip_reason(need_mpi4py=False)
    if reason:
        pytest.skip(reason)
    out = tmp_path_factory.mktemp("mpi") / "mpi_hello"
    subprocess.run(["mpicc", "-O1", "-o", str(out), str(APPS / "mpi_hello.c")], check=True, timeout=60)
    return out


def rank_lines(out: Path) -> list[tuple[int, str]]:
    # mpirun forwards each rank's output as it comes: lines of two ranks may run together.
    return sorted((int(r), h) for r, h in re.findall(r"rank (\d+) of \d+ on (\S+) pid", out.read_text()))


def test_rigid_c_mpi_job_runs_ranks_per_node_on_each_of_its_hosts(
    daemon: RunningDaemon, workdir: Path, mpi_hello_binary: Path
) -> None:
    jid = daemon.submit(write_job(workdir, "c", f'''
        name = "chello"
        command = ["{mpi_hello_binary}"]
        nodes = 3
        launcher = "mpi"
        mpi = {{ ranks_per_node = 2 }}
        working_dir = "."
        output = "out-%j.txt"
        time_limit = "1"
    '''))
    daemon.wait([jid], timeout=40)
    info = daemon.job(jid)
    out = workdir / f"out-{jid}.txt"
    assert info["state"] == "COMPLETED", (info, out.read_text())
    assert rank_lines(out) == [(0, "node1"), (1, "node1"), (2, "node2"), (3, "node2"), (4, "node3"), (5, "node3")]
    assert "sum 21" in out.read_text()
    assert job_ranks(jid, daemon.state_dir) == {}


def test_moldable_mpi4py_job_gets_one_rank_per_granted_host(daemon: RunningDaemon, workdir: Path) -> None:
    reason = mpi_skip_reason()
    if reason:
        pytest.skip(reason)
    jid = daemon.submit(write_job(workdir, "py", f'''
        name = "pyhello"
        command = ["{sys.executable}", "{APPS / 'mpi_hello.py'}"]
        nodes = {{ min = 2, max = 4 }}
        launcher = "mpi"
        working_dir = "."
        output = "out-%j.txt"
        time_limit = "1"
    '''))
    daemon.wait([jid], timeout=40)
    out = workdir / f"out-{jid}.txt"
    assert daemon.job(jid)["state"] == "COMPLETED", out.read_text()
    assert rank_lines(out) == [(0, "node1"), (1, "node2"), (2, "node3"), (3, "node4")]
    assert "sum 10" in out.read_text()


def test_cancelled_mpi_job_leaves_no_rank_running(daemon: RunningDaemon, workdir: Path, mpi_hello_binary: Path) -> None:
    jid = daemon.submit(write_job(workdir, "spin", '''
        name = "spin"
        command = ["sleep", "60"]
        nodes = 2
        launcher = "mpi"
        working_dir = "."
        time_limit = "1"
    '''))
    assert wait_until(lambda: sum(len(v) for v in job_ranks(jid, daemon.state_dir).values()) == 2, 60), job_ranks(jid, daemon.state_dir)
    r = daemon.cli("ecancel", str(jid))
    assert r.returncode == 0, r.stderr
    daemon.wait([jid], timeout=60)
    assert daemon.job(jid)["state"] == "CANCELLED"
    assert job_ranks(jid, daemon.state_dir) == {}


# Open MPI 4.1's rsh launcher forks, the child calls setpgid(0, 0) and execs the agent, and the
# parent calls setpgid(pid, pid) as well: when the child has already exec'd (a busy machine)
# the parent's call fails with EACCES and mpirun says so on its stderr. The child is in its
# own group all the same; any other errno (ESRCH: the child is gone) is not this race.
BENIGN_SETPGID = re.compile(r"\[[^\]]+\] plm:rsh: Warning: setpgid\((\d+),\1\) failed in parent "
                            r"with errno=Permission denied\(13\)")


@pytest.mark.timeout(90)
def test_the_readmes_mpi_example_writes_one_line_per_rank_naming_its_host(daemon: RunningDaemon) -> None:
    reason = mpi_skip_reason()
    if reason:
        pytest.skip(reason)
    example = Path(__file__).resolve().parent.parent / "examples" / "mpi" / "hello-rigid.toml"
    jid = daemon.submit(example)
    daemon.wait([jid], timeout=60)
    out = example.parent / "out" / f"mpi-hello-{jid}.out"
    err = out.with_suffix(".err")
    try:
        assert daemon.job(jid)["state"] == "COMPLETED", (out.read_text(), err.read_text())
        lines = sorted(out.read_text().splitlines())
        hosts = next(e["hosts"] for e in daemon.job(jid)["events"] if e["event"] == "started")
        assert lines == sorted(f"[1,{r}]<stdout>:{r} of 4 on {hosts[r // 2]}" for r in range(4)), lines
        said = [line for line in err.read_text().splitlines() if not BENIGN_SETPGID.fullmatch(line)]
        assert said == [], said
    finally:
        out.unlink(missing_ok=True)
        err.unlink(missing_ok=True)
