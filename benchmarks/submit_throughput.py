"""Submissions per second through the daemon's real control socket.

Why: a malleable scheduler is driven by bursts of submissions (workflow engines, parameter
sweeps); the target is >= 500 submissions/s on a 2-core machine. This measures the whole
path a user's tool takes -- TCP, JSON framing, pydantic validation on both sides, the
core's bookkeeping, the log line, and the scheduling pass each submission triggers.

So that starting processes does not distort the figure, one "blocker" job holds every
node (`sleep 1000`) and every measured job is a rigid job needing all nodes: it is queued
(PENDING) and never launched. The queue therefore grows during the run, which is also
what a real burst does; the per-quarter rates show whether the cost grows with it.

Modes:
  (a) persistent  -- one connection, K submits in sequence (what esubmit does with many files)
  (b) per-job     -- a new connection + hello + one submit per job (a script looping a client)
  (c) esubmit     -- the real `esubmit` command per job, process start included (small count)
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from _harness import BenchDaemon, bench_daemon, sleep_spec, submit, timed_requests, verdict, wait_running

from elastic_protocol.control import Status, Submit
from elasticd.client import ControlClient

TARGET = 500.0  # submissions per second


@dataclass
class Result:
    label: str
    count: int
    elapsed: float
    quarters: list[float] | None = None  # jobs/s in each quarter of the run

    @property
    def rate(self) -> float:
        return self.count / self.elapsed if self.elapsed > 0 else float("inf")


def make_requests(d: BenchDaemon, nodes: int, n: int, tag: str) -> list[Submit]:
    """Built before the clock starts: the client's own validation is not the daemon's cost."""
    return [Submit(spec=sleep_spec(f"{tag}-{i}", nodes, d.work_dir)) for i in range(n)]


def bench_persistent(d: BenchDaemon, nodes: int, n: int) -> Result:
    reqs = make_requests(d, nodes, n, "persist")
    with d.client("bench-persistent") as c:
        elapsed, quarters = timed_requests(c, reqs)
    return Result("persistent connection", n, elapsed, quarters)


def bench_per_connection(d: BenchDaemon, nodes: int, n: int) -> Result:
    reqs = make_requests(d, nodes, n, "conn")
    t0 = time.perf_counter()
    for req in reqs:
        with ControlClient(d.record, "bench-conn") as c:
            c.request(req)
    return Result("new connection per job", n, time.perf_counter() - t0)


def bench_esubmit(d: BenchDaemon, nodes: int, n: int) -> Result:
    exe = Path(sys.executable).with_name("esubmit")
    if not exe.exists():
        raise SystemExit(f"esubmit not found next to {sys.executable}; run with the project's venv")
    job_file = d.work_dir / "bench.toml"
    job_file.write_text(
        f'name = "esubmit-bench"\ncommand = ["sleep", "1000"]\nnodes = {nodes}\n'
        f'working_dir = "{d.work_dir}"\noutput = "out/%j.out"\n'
    )
    cmd = [str(exe), "--parsable", "--state-dir", str(d.state_dir), str(job_file)]
    env = dict(os.environ)
    t0 = time.perf_counter()
    for _ in range(n):
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, env=env)
    return Result("esubmit process per job", n, time.perf_counter() - t0)


def count_pending(d: BenchDaemon) -> int:
    # Status, not Queue: a queue reply of a few hundred jobs exceeds the 64 KiB line limit.
    with d.client("bench-check") as c:
        return int(c.request(Status())["jobs_by_state"].get("PENDING", 0))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--jobs", type=int, default=2000, help="submissions over one persistent connection (default 2000)")
    p.add_argument("--conn-jobs", type=int, default=500,
                   help="submissions with a new connection each (default 500; 0 to skip)")
    p.add_argument("--esubmit-jobs", type=int, default=20,
                   help="runs of the real esubmit command (default 20; 0 to skip)")
    p.add_argument("--nodes", type=int, default=4, help="local nodes of the daemon (default 4)")
    p.add_argument("--policy", default="easy", help="scheduling policy (default easy)")
    p.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"],
                   help="daemon log level (default INFO, as `elasticd start` runs)")
    p.add_argument("--keep", action="store_true", help="keep the temp dir (daemon.log) for inspection")
    args = p.parse_args(argv)

    print(f"submit throughput: {os.cpu_count()} CPUs, python {sys.version.split()[0]}, "
          f"{args.nodes} nodes, policy {args.policy}, daemon log level {args.log_level}")
    results: list[Result] = []
    with bench_daemon(args.nodes, args.policy, args.log_level, keep=args.keep) as d:
        print(f"daemon pid {d.pid} at {d.record.control_address}, state {d.state_dir}")
        with d.client("bench-setup") as c:
            blocker = submit(c, sleep_spec("blocker", args.nodes, d.work_dir))
            wait_running(c, [blocker])
        print(f"blocker job {blocker} RUNNING on all {args.nodes} nodes; measured jobs stay PENDING")

        if args.jobs > 0:
            results.append(r := bench_persistent(d, args.nodes, args.jobs))
            print(f"  (a) {r.label}: {r.count} jobs in {r.elapsed:.3f} s = {r.rate:.0f} jobs/s")
            if r.quarters:
                print("      per quarter of the run (queue growing): "
                      + ", ".join(f"{q:.0f}" for q in r.quarters) + " jobs/s")
        if args.conn_jobs > 0:
            results.append(r := bench_per_connection(d, args.nodes, args.conn_jobs))
            print(f"  (b) {r.label}: {r.count} jobs in {r.elapsed:.3f} s = {r.rate:.0f} jobs/s"
                  f"  (queue already {args.jobs} long)")
        if args.esubmit_jobs > 0:
            results.append(r := bench_esubmit(d, args.nodes, args.esubmit_jobs))
            print(f"  (c) {r.label}: {r.count} jobs in {r.elapsed:.3f} s = {r.rate:.1f} jobs/s"
                  f"  ({1000 * r.elapsed / r.count:.0f} ms per esubmit)")

        expected = args.jobs + args.conn_jobs + args.esubmit_jobs
        pending = count_pending(d)
        if pending != expected:
            print(f"WARNING: {pending} jobs PENDING, expected {expected}: some submissions were lost "
                  "or started", file=sys.stderr)

    print()
    failed = False
    for r in results:
        if r.label == "esubmit process per job":
            # Dominated by interpreter start-up; reported, not held to the daemon's target.
            print(f"submit ({r.label}): {r.rate:.1f} jobs/s  [{r.count} jobs, {r.elapsed:.2f} s; "
                  "informational, includes process start]")
            continue
        ok = r.rate >= TARGET
        failed |= not ok
        print(f"submit ({r.label}): {r.rate:.0f} jobs/s  [target >= {TARGET:.0f}/s]  {verdict(ok)}"
              f"  ({r.count} jobs, {r.elapsed:.2f} s)")
        if r.quarters:
            # The average hides a rate that falls as the queue grows: hold the tail to the
            # target too, since a long queue is exactly when a burst arrives.
            deep = r.count * 3 // 4
            ok = r.quarters[-1] >= TARGET
            failed |= not ok
            print(f"submit ({r.label}, last quarter, queue {deep}-{r.count} deep): "
                  f"{r.quarters[-1]:.0f} jobs/s  [target >= {TARGET:.0f}/s]  {verdict(ok)}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
