"""Cluster mode over SSH on the namespace cluster, beside the same figures in local mode.

Measured through a real daemon and real processes; the namespace nodes are
deploy/vcluster.sh's (brought up here if they are not, and then taken down again; root).
- launch, K hosts: a rigid job's `started` event (daemon clock) -> the moment its last
  process runs (each process stamps the time, first thing, on the same machine's clock):
  SSH channel, the node agent, fork/exec -- what a job waits before its code runs;
- launch -> malleable-ready: `started` -> `registered` of the synthetic app;
- grow by 2: `grow_ordered` -> `grown` of a synthetic job going 1 -> 3 nodes (2 processes
  started over SSH on other nodes, joined the leader, answered);
- shrink by 2: `shrink_ordered` -> `shrunk` going 3 -> 1 (answer, the released processes
  ended and verified gone on their nodes, nodes free).
Targets (cluster mode): grow by 2 < 1.5 s, shrink by 2 < 1 s.

    .venv/bin/python benchmarks/cluster_ssh.py [--launches 10] [--cycles 10]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from _harness import BenchDaemon, bench_daemon, events, gaps, stop_daemon, verdict, wait_event
from _harness import synthetic_spec as synthetic

from elastic_protocol.control import Cancel, Resize, Submit
from elastic_protocol.jobspec import JobSpec
from elasticd.client import ControlClient
from elasticd.daemonctl import start_detached
from elasticd.statedir import DaemonRecord, pid_alive, read_record

ROOT = Path(__file__).resolve().parent.parent
VCLUSTER = ROOT / "deploy" / "vcluster.sh"
STATE = Path(os.environ.get("VCLUSTER_STATE", "/run/elastic-vcluster"))


# ---- the cluster and its daemon ---------------------------------------------------------------
def _vcluster(cmd: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(VCLUSTER), cmd], capture_output=True, text=True, timeout=600, check=False)


@contextmanager
def namespace_cluster() -> Iterator[Path]:
    """The virtual cluster's ssh_config; brought up (and down after) only if it was not up."""
    if os.geteuid() != 0:
        raise SystemExit("cluster_ssh: needs root (it runs on deploy/vcluster.sh's network namespaces)")
    was_up = _vcluster("status").returncode == 0
    if not was_up:
        r = _vcluster("up")
        if r.returncode != 0:
            raise SystemExit(f"cluster_ssh: vcluster up failed:\n{r.stdout}{r.stderr}")
    try:
        yield STATE / "ssh_config"
    finally:
        if not was_up:
            _vcluster("down")


@contextmanager
def cluster_daemon(ssh_config: Path) -> Iterator[BenchDaemon]:
    tmp = Path(tempfile.mkdtemp(prefix="elastic-bench-cluster-"))
    state_dir, work_dir = tmp / "state", tmp / "work"
    (work_dir / "out").mkdir(parents=True)
    record: DaemonRecord | None = None
    try:
        record = start_detached(state_dir, None, "easy", 1.0, extra=[
            "--hosts", "node[1-3]", "--ssh-config", str(ssh_config)], timeout=40)
        yield BenchDaemon(record, state_dir, work_dir)
    finally:
        if record is None:
            record = read_record(state_dir)
        sys.stdout.flush()
        if record is not None and pid_alive(record.pid):
            print(f"daemon pid {record.pid} stopped ({stop_daemon(record)})", file=sys.stderr)
        shutil.rmtree(tmp, ignore_errors=True)


# ---- measurements -----------------------------------------------------------------------------








def launch_latency(c: ControlClient, work: Path, hosts: int, runs: int) -> list[float]:
    out = []
    for i in range(runs):
        stamp = f"stamp-{hosts}-{i}"
        spec = JobSpec(name=f"launch{hosts}", nodes=hosts, working_dir=str(work), output="out/%x-%j.out",
                       command=["sh", "-c", f'date +%s.%N > {stamp}-"$ELASTIC_HOST"; exec sleep 600'])
        jid = int(c.request(Submit(spec=spec))["job_id"])
        ev = wait_event(c, jid, "started")
        started = next(e["time"] for e in ev if e["event"] == "started")
        deadline = time.monotonic() + 30
        while len(files := list(work.glob(f"{stamp}-*"))) < hosts or any(f.stat().st_size == 0 for f in files):
            if time.monotonic() > deadline:
                raise RuntimeError(f"job {jid}: {len(files)} of {hosts} processes started")
            time.sleep(0.005)
        out.append(max(float(f.read_text()) for f in files) - started)
        c.request(Cancel(job_ids=[jid]))
        wait_event(c, jid, "ended")
    return out


def measure(d: BenchDaemon, launches: int, cycles: int) -> dict[str, list[float]]:
    with d.client() as c:
        res = {
            "launch, 1 host": launch_latency(c, d.work_dir, 1, launches),
            "launch, 3 hosts": launch_latency(c, d.work_dir, 3, launches),
        }
        ready = []
        for i in range(launches):
            jid = int(c.request(Submit(spec=synthetic(f"ready{i}", 1, d.work_dir)))["job_id"])
            ready.extend(gaps(wait_event(c, jid, "registered"), "started", "registered"))
            c.request(Cancel(job_ids=[jid]))
            wait_event(c, jid, "ended")
        res["launch -> malleable-ready"] = ready
        jid = int(c.request(Submit(spec=synthetic("resizer", {"min": 1, "max": 3}, d.work_dir)))["job_id"])
        ev = wait_event(c, jid, "registered")
        size = next(e["nodes"] for e in ev if e["event"] == "started")
        shrunk = 0
        if size > 1:
            c.request(Resize(job_id=jid, nodes=1))
            shrunk += 1
            wait_event(c, jid, "shrunk", shrunk)
        for grown in range(1, cycles + 1):
            c.request(Resize(job_id=jid, nodes=3))
            wait_event(c, jid, "grown", grown)
            c.request(Resize(job_id=jid, nodes=1))
            shrunk += 1
            wait_event(c, jid, "shrunk", shrunk)
        ev = events(c, jid)
        res["grow by 2 (order -> grown)"] = gaps(ev, "grow_ordered", "grown")
        res["shrink by 2 (order -> free)"] = gaps(ev, "shrink_ordered", "shrunk")[-cycles:]
        c.request(Cancel(job_ids=[jid]))
        wait_event(c, jid, "ended")
    return res


TARGETS = {"grow by 2 (order -> grown)": 1.5, "shrink by 2 (order -> free)": 1.0}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--launches", type=int, default=10, help="jobs launched per launch figure")
    ap.add_argument("--cycles", type=int, default=10, help="grow-by-2 / shrink-by-2 cycles")
    args = ap.parse_args()

    with bench_daemon(nodes=3) as d:
        local = measure(d, args.launches, args.cycles)
    with namespace_cluster() as ssh_config, cluster_daemon(ssh_config) as d:
        cluster = measure(d, args.launches, args.cycles)

    print()
    print("cluster mode: 3 namespace nodes over SSH (fabric) vs local mode: 3 virtual nodes; p50 / p90")
    print(f"{'':<30} {'local':>21}   {'ssh (namespace nodes)':>23}")
    ok = True
    for label, xs in cluster.items():
        loc = local[label]
        target = TARGETS.get(label)
        med = statistics.median(xs)
        tgt = ""
        if target is not None:
            ok &= med < target
            tgt = f"  [target < {1000 * target:.0f} ms] {verdict(med < target)}"
        print(f"{label:<30} {_ms(loc)}   {_ms(xs)}  n={len(xs)}{tgt}")
    return 0 if ok else 1


def _ms(xs: list[float]) -> str:
    xs = sorted(xs)
    p90 = xs[min(len(xs) - 1, round(0.9 * (len(xs) - 1)))]
    return f"{1000 * statistics.median(xs):7.1f} / {1000 * p90:7.1f} ms"


if __name__ == "__main__":
    sys.exit(main())
