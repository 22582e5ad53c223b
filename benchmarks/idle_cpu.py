"""CPU the daemon uses while nothing happens.

Why: the daemon lives for the whole allocation next to the user's application, on a node
the application wants all of. An idle daemon that polls (timers, process scans, busy
loops) steals cycles from the job it serves; the target is < 1 % of one core. Running
`sleep` jobs are included by default because watching job processes is where a daemon is
most tempted to poll; pending jobs are included so a scheduler that re-plans on a timer
would show up too.

The figure is the daemon process's own user+system CPU time over the window (psutil
cpu_times delta) divided by wall time; the `sleep` jobs are separate processes and not
counted. Voluntary context switches per second are shown as a hint of timer wake-ups.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import psutil
from _harness import bench_daemon, sleep_spec, submit, verdict, wait_running

TARGET_PERCENT = 1.0


def cpu_seconds(p: psutil.Process) -> float:
    t = p.cpu_times()
    return t.user + t.system


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=10.0, help="measurement window (default 10)")
    ap.add_argument("--nodes", type=int, default=8, help="local nodes of the daemon (default 8)")
    ap.add_argument("--jobs", type=int, default=4,
                    help="1-node `sleep` jobs running during the window (default 4; 0 for an empty daemon)")
    ap.add_argument("--pending", type=int, default=4,
                    help="extra jobs needing all nodes, left PENDING behind the running ones (default 4)")
    ap.add_argument("--warmup", type=float, default=1.0, help="seconds to settle before measuring (default 1)")
    ap.add_argument("--policy", default="easy", help="scheduling policy (default easy)")
    ap.add_argument("--keep", action="store_true", help="keep the temp dir (daemon.log) for inspection")
    args = ap.parse_args(argv)
    if args.jobs > args.nodes:
        ap.error("--jobs must not exceed --nodes (each job takes one node)")
    if args.pending and not args.jobs:
        ap.error("--pending needs --jobs > 0 (with free nodes the pending jobs would start)")

    print(f"idle CPU: {os.cpu_count()} CPUs, {args.nodes} nodes, {args.jobs} running sleep job(s), "
          f"{args.pending} pending job(s), window {args.seconds:g} s")
    with bench_daemon(args.nodes, args.policy, keep=args.keep) as d:
        print(f"daemon pid {d.pid} at {d.record.control_address}")
        with d.client("bench-setup") as c:
            running = [submit(c, sleep_spec(f"idle-{i}", 1, d.work_dir)) for i in range(args.jobs)]
            if running:
                wait_running(c, running)
            for i in range(args.pending):
                submit(c, sleep_spec(f"wait-{i}", args.nodes, d.work_dir))
        # The setup client is closed now: the window sees no open connection either.
        time.sleep(args.warmup)
        proc = psutil.Process(d.pid)
        cpu0, ctx0, t0 = cpu_seconds(proc), proc.num_ctx_switches().voluntary, time.monotonic()
        time.sleep(args.seconds)
        cpu1, ctx1, t1 = cpu_seconds(proc), proc.num_ctx_switches().voluntary, time.monotonic()
        threads = proc.num_threads()

    wall = t1 - t0
    used = cpu1 - cpu0
    percent = 100.0 * used / wall
    print(f"  daemon CPU {used * 1000:.1f} ms over {wall:.2f} s wall; "
          f"{(ctx1 - ctx0) / wall:.1f} voluntary context switches/s; {threads} thread(s)")
    print(f"  (clock tick resolution of cpu_times is ~10 ms, i.e. {1.0 / wall:.2f} % of this window)")
    print()
    ok = percent < TARGET_PERCENT
    print(f"idle CPU (daemon, {args.jobs} running + {args.pending} pending jobs): {percent:.2f} % of one core  "
          f"[target < {TARGET_PERCENT:g} %]  {verdict(ok)}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
