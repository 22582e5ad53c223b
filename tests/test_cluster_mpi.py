"""MPI jobs across the virtual cluster's namespace nodes (deploy/vcluster.sh): mpirun on the
job's first node reaches the others over ssh; the Jacobi example grows from 2 to 4 ranks
(1 -> 2 nodes) and shrinks back, by spawning and by restarting, with the result of a run
without resizes; no rank is left on the released node (checked from outside, by network
namespace). Needs root and the packages, as tests/test_cluster_vcluster.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import stop_daemon, wait_until, write_job
from mpi_support import jacobi_job, job_ranks, mpi_skip_reason
from test_cluster_vcluster import VCluster, cluster_daemon, node_of, vcluster  # noqa: F401 - the fixture

NET = "10.200.0.0/24"


def ranks_by_node(job_id: int) -> dict[str, list[int]]:
    return job_ranks(job_id, node_of)


def jacobi(folder: Path, name: str, mode: str, nodes: str, delay: float) -> Path:
    # Two ranks per node, and MPI's own traffic kept on the namespaces' network.
    args = f'["--mca", "btl_tcp_if_include", "{NET}", "--mca", "oob_tcp_if_include", "{NET}"]'
    return jacobi_job(folder, name, mode, nodes, delay, points=4000, iterations=700, time_limit="3",
                      mpi_fields=f"ranks_per_node = 2, mpirun_args = {args}")


@pytest.mark.timeout(170)
def test_jacobi_grows_and_shrinks_across_namespace_nodes_by_spawn_and_by_restart(
    vcluster: VCluster, tmp_path: Path  # noqa: F811
) -> None:
    reason = mpi_skip_reason()
    if reason:
        pytest.skip(reason)
    work = tmp_path / "work"
    work.mkdir()
    d = cluster_daemon(vcluster, tmp_path / "state", "node[1-3]", extra=["--order-deadline", "25"])
    try:
        ref = d.submit(jacobi(work, "ref", "spawn", "1", 0.0))
        d.wait([ref], timeout=60)
        assert d.job(ref)["state"] == "COMPLETED", (work / "ref.out").read_text()
        for mode in ("spawn", "restart"):
            filler = d.submit(write_job(work, "filler", 'name = "filler"\ncommand = ["sleep", "300"]\nnodes = 2\nworking_dir = "."\n'))
            jid = d.submit(jacobi(work, mode, mode, "{ min = 1, max = 2 }", 0.008))
            d.wait_event(jid, "registered", timeout=30)
            first = d.job(jid)["hosts"]
            assert len(first) == 1
            assert d.cli("ecancel", str(filler)).returncode == 0
            d.wait([filler], timeout=30)
            assert d.cli("elasticd", "resize", str(jid), "2").returncode == 0
            d.wait_event(jid, "grown", timeout=40)
            if mode == "restart":  # the restarted run registers again before it takes orders
                d.wait_event(jid, "registered", count=2, timeout=40)
            hosts = d.job(jid)["hosts"]
            assert wait_until(lambda: {h: len(p) for h, p in ranks_by_node(jid).items()} == {h: 2 for h in hosts}, 30), \
                (hosts, ranks_by_node(jid))
            assert d.cli("elasticd", "resize", str(jid), "1").returncode == 0
            info = d.wait_event(jid, "shrunk", timeout=40)
            released = [h for h in hosts if h not in info["hosts"]]
            assert released and not ranks_by_node(jid).get(released[0]), ranks_by_node(jid)
            d.wait([jid], timeout=90)
            out = (work / f"{mode}.out").read_text()
            assert d.job(jid)["state"] == "COMPLETED", out
            assert (work / f"{mode}.bin").read_bytes() == (work / "ref.bin").read_bytes(), out
            assert ranks_by_node(jid) == {}
            log = (d.state_dir / "daemon.log").read_text()
            assert f"job {jid}: verified no MPI rank left on {released[0]}" in log
    finally:
        stop_daemon(d.record)
