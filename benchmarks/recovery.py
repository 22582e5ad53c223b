"""Recovery after SIGKILL with a deep queue, and what the journal costs at submission.

Why: a daemon that crashes must not lose the queue (issue #9), and the journal that
prevents it is written before every reply, so it sits on the submission path whose target
is >= 500 submissions/s. Both figures come from the same run:

  1. submit rate without the journal (`elasticd start --no-journal`): the "before" figure;
  2. submit rate with the journal, filling a queue of --jobs (default 10,000) jobs behind a
     blocker job that holds every node;
  3. SIGKILL of that daemon, then a new daemon on the same state directory: the time from
     starting it to its answering with every job back (all PENDING, the blocker RUNNING
     on its original process). Target < 5 s. The restore itself (reading the journal into
     the core) is shown separately, from the daemon's log.
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import sys
import time

import psutil
from _harness import bench_daemon, sleep_spec, stop_daemon, submit, verdict, wait_running
from submit_throughput import TARGET as SUBMIT_TARGET
from submit_throughput import bench_persistent

from elastic_protocol.control import Queue, Status
from elasticd.client import ControlClient
from elasticd.daemonctl import start_detached

TARGET_S = 5.0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--jobs", type=int, default=10_000, help="jobs in the journal at the crash (default 10000)")
    p.add_argument("--rate-jobs", type=int, default=2000, help="submissions timed without the journal (default 2000)")
    p.add_argument("--nodes", type=int, default=4, help="local nodes (default 4)")
    p.add_argument("--keep", action="store_true", help="keep the temp dirs (daemon.log) for inspection")
    args = p.parse_args(argv)
    print(f"recovery: {os.cpu_count()} CPUs, python {sys.version.split()[0]}, {args.nodes} nodes, "
          f"{args.jobs} jobs in the journal")

    with bench_daemon(args.nodes, keep=args.keep, extra=["--no-journal"]) as d:
        with d.client("bench-setup") as c:
            wait_running(c, [submit(c, sleep_spec("blocker", args.nodes, d.work_dir))])
        before = bench_persistent(d, args.nodes, args.rate_jobs)
    print(f"  submit without journal: {before.count} jobs in {before.elapsed:.2f} s = {before.rate:.0f} jobs/s")

    with bench_daemon(args.nodes, keep=args.keep) as d:
        with d.client("bench-setup") as c:
            blocker = submit(c, sleep_spec("blocker", args.nodes, d.work_dir))
            wait_running(c, [blocker])
            pid_file = d.state_dir / "jobs" / str(blocker) / "proc-node1.pid"
            while not pid_file.exists() or not pid_file.read_text().strip():  # the wrapper writes it
                time.sleep(0.01)
            pgid = int(pid_file.read_text())
        # The same count as without the journal first (same queue depths), then the rest.
        with_journal = bench_persistent(d, args.nodes, args.rate_jobs)
        print(f"  submit with journal:    {with_journal.count} jobs in {with_journal.elapsed:.2f} s = "
              f"{with_journal.rate:.0f} jobs/s")
        if args.jobs > args.rate_jobs:
            fill = bench_persistent(d, args.nodes, args.jobs - args.rate_jobs)
            print(f"  filling the queue to {args.jobs} with the journal: {fill.rate:.0f} jobs/s (per quarter "
                  + ", ".join(f"{q:.0f}" for q in fill.quarters or []) + ")")
        size = sum(f.stat().st_size for f in d.state_dir.glob("journal.db*"))
        print(f"  journal size: {size / 1e6:.1f} MB")

        os.kill(d.pid, signal.SIGKILL)
        psutil.Process(d.pid).wait(10)
        t0 = time.perf_counter()
        record = start_detached(d.state_dir, local=args.nodes, policy="easy", kill_wait=1.0)
        t_listen = time.perf_counter() - t0
        try:
            with ControlClient(record, "bench-recovery") as c:
                counts = c.request(Status())["jobs_by_state"]
                t_all = time.perf_counter() - t0
                state = c.request(Queue(job_ids=[blocker]))["jobs"][0]["state"]
            # The restart rotated the log: daemon.log is the new daemon's own.
            log = (d.state_dir / "daemon.log").read_text().splitlines()
            restored = next(ln for ln in log if "journal: recovered" in ln)
            pending = counts.get("PENDING", 0)
            print(f"  after SIGKILL: new daemon answering in {t_listen:.2f} s, every job back in {t_all:.2f} s "
                  f"({pending} PENDING, blocker {state}, its process group {pgid} "
                  f"{'still running' if psutil.pid_exists(pgid) else 'GONE'})")
            print(f"    in the daemon's log: {re.sub(r'^.*journal: ', '', restored)}; the rest is Python "
                  "starting and importing")
            complete = pending == args.jobs and state == "RUNNING"
        finally:
            how = stop_daemon(record)
            print(f"restarted daemon pid {record.pid} stopped ({how})", file=sys.stderr)

    print()
    ok = t_all < TARGET_S and complete
    failed = not ok
    print(f"recovery after SIGKILL, {args.jobs} jobs: {t_all:.2f} s  [target < {TARGET_S:g} s]  {verdict(ok)}"
          + ("" if complete else "  (jobs missing!)"))
    ok = with_journal.rate >= SUBMIT_TARGET
    failed |= not ok
    print(f"submit with journal: {with_journal.rate:.0f} jobs/s vs {before.rate:.0f} without "
          f"({100 * (with_journal.rate / before.rate - 1):+.0f} %)  [target >= {SUBMIT_TARGET:.0f}/s]  {verdict(ok)}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
