"""Time to grow a malleable MPI job by 2 ranks and to shrink it by 2 ranks, on the spawn path
(MPI_Comm_spawn + Merge from inside; shrink: hand over, free, disconnect, exit) and on the
restart path (checkpoint, exit, mpirun started again on the new host set), with the Jacobi
example (`python -m elastic_apps.mpi.jacobi`) under a real daemon.

Local mode: 4 virtual nodes, 1 rank per node, the job resized 2 <-> 4 nodes.
`--cluster`: across deploy/vcluster.sh's namespace nodes (run `deploy/vcluster.sh up` and
`eval "$(deploy/vcluster.sh env)"` first, as root): 2 ranks per node, resized 1 <-> 2 nodes.

Figures (the daemon's own timestamps): spawn path: `grow_ordered` -> `grown` (the ranks are
spawned, merged and have their data when the application answers) and `shrink_ordered` ->
`shrunk` (answer given and no rank left on the released hosts, verified by the daemon).
Restart path: order -> the restarted run `registered` again (checkpoint, exit, mpirun
start, resume: when the job computes again at its new size).

    .venv/bin/python benchmarks/mpi_resize.py [--cycles 3] [--cluster]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from _harness import bench_daemon, events, gaps, stop_daemon, submit, wait_event

from elastic_protocol.control import Cancel, Resize, Wait
from elastic_protocol.jobspec import JobSpec
from elasticd.client import ControlClient
from elasticd.daemonctl import start_detached


def jacobi_spec(mode: str, lo: int, hi: int, rpn: int, work: Path, cluster: bool) -> JobSpec:
    args = ["--mca", "btl_tcp_if_include", "10.200.0.0/24", "--mca", "oob_tcp_if_include", "10.200.0.0/24"] if cluster else []
    return JobSpec.model_validate({
        "name": f"jacobi-{mode}", "kind": "malleable", "launcher": "mpi",
        "command": [sys.executable, "-m", "elastic_apps.mpi.jacobi", "--points", "20000",
                    "--iterations", "100000000", "--delay", "0.002"],
        "nodes": {"min": lo, "max": hi}, "working_dir": str(work), "output": f"jacobi-{mode}-%j.out",
        "mpi": {"ranks_per_node": rpn, "malleability": mode, "mpirun_args": args}, "time_limit": "30",
    })


def run_mode(c: ControlClient, mode: str, lo: int, hi: int, rpn: int, work: Path, cluster: bool,
             cycles: int, settle: float) -> tuple[list[float], list[float]]:
    # A filler holds the other nodes so that the job starts at its minimum.
    total = 3 if cluster else 4
    filler = submit(c, JobSpec.model_validate({"name": "filler", "command": ["sleep", "600"], "nodes": total - lo,
                                               "working_dir": str(work)}))
    jid = submit(c, jacobi_spec(mode, lo, hi, rpn, work, cluster))
    wait_event(c, jid, "registered")
    c.request(Cancel(job_ids=[filler]))
    c.request(Wait(job_ids=[filler], timeout=30), timeout=40)
    time.sleep(0.5)
    regs = 1
    for _ in range(cycles):
        for size, done in ((hi, "grown"), (lo, "shrunk")):
            n = sum(e["event"] == done for e in events(c, jid))
            c.request(Resize(job_id=jid, nodes=size))
            wait_event(c, jid, done, count=n + 1, timeout=120)
            if mode == "restart":
                regs += 1
                wait_event(c, jid, "registered", count=regs, timeout=120)
            time.sleep(settle)
    ev = events(c, jid)
    c.request(Cancel(job_ids=[jid]))
    if mode == "spawn":
        return gaps(ev, "grow_ordered", "grown"), gaps(ev, "shrink_ordered", "shrunk")
    return gaps(ev, "grow_ordered", "registered"), gaps(ev, "shrink_ordered", "registered")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cycles", type=int, default=3)
    ap.add_argument("--settle", type=float, default=1.0)
    ap.add_argument("--cluster", action="store_true", help="across the vcluster's namespace nodes")
    args = ap.parse_args()
    lo, hi, rpn = (1, 2, 2) if args.cluster else (2, 4, 1)
    where = "namespace nodes node[1-3] (ssh)" if args.cluster else "local mode, 4 virtual nodes"
    print(f"MPI resize by 2 ranks ({lo * rpn} <-> {hi * rpn} ranks, {rpn} per node), {where}, {args.cycles} cycles")
    for mode in ("spawn", "restart"):
        if args.cluster:
            tmp = Path(tempfile.mkdtemp(prefix="elastic-bench-"))
            (tmp / "work").mkdir()
            cfg = os.environ.get("ELASTIC_SSH_CONFIG", "/run/elastic-vcluster/ssh_config")
            rec = start_detached(tmp / "state", None, "easy", 1.0, extra=["--hosts", "node[1-3]", "--ssh-config", cfg],
                                 timeout=40)
            try:
                with ControlClient(rec, "bench") as c:
                    grow, shrink = run_mode(c, mode, lo, hi, rpn, tmp / "work", True, args.cycles, args.settle)
            finally:
                stop_daemon(rec)
        else:
            with bench_daemon(4) as d, d.client() as c:
                grow, shrink = run_mode(c, mode, lo, hi, rpn, d.work_dir, False, args.cycles, args.settle)
        label = "order -> grown" if mode == "spawn" else "order -> running again"
        print(f"  {mode:8s} grow +2 ranks  ({label}): median {statistics.median(grow):.3f} s  "
              f"[{', '.join(f'{x:.3f}' for x in grow)}]")
        print(f"  {mode:8s} shrink -2 ranks ({label.replace('grown', 'shrunk')}): median "
              f"{statistics.median(shrink):.3f} s  [{', '.join(f'{x:.3f}' for x in shrink)}]")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
