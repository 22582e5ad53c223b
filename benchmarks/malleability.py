"""Malleability latencies through a real daemon and real application processes.

Measured from the daemon's own job event log (both ends stamped by the daemon's clock):
- ready:     `started` -> `registered` of the synthetic app (process start, Python start,
             connect, hello, register): when a job can take orders;
- grow by K: `grow_ordered` -> `grown` (K new processes started and joined the leader);
- shrink by K: `shrink_ordered` -> `shrunk` (answer, released processes verified gone,
             nodes free);
- order round trip: `shrink_ordered` -> `refused` with an application that refuses at once.

The seed's prototype: 6 s to malleable-ready, 14.55 s to grow by 3.8 places on average,
7.41 s to shrink by 2.55.  Targets here (local mode): ready < 0.5 s, grow by 4 < 0.5 s,
shrink by 4 < 0.3 s.

    .venv/bin/python benchmarks/malleability.py [--cycles 10] [--jobs 10] [--orders 200]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import textwrap

from _harness import bench_daemon, events, gaps, verdict, wait_event
from _harness import synthetic_spec as synthetic

from elastic_protocol.control import Cancel, Resize, Submit
from elastic_protocol.jobspec import JobSpec

REFUSER = textwrap.dedent('''
    import time
    from elastic_apps import JobChannel, MalleableHandler, Refuse, job_env

    class Refuser(MalleableHandler):
        def pre_shrink(self, n):
            raise Refuse("benchmark")

    env = job_env()
    if env.is_leader:
        job = JobChannel.connect(env)
        job.register(Refuser())
    time.sleep(3600)
''')










def pct(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, round(p / 100 * (len(xs) - 1)))]


def line(label: str, xs: list[float], target: float | None, seed: float | None) -> None:
    med = statistics.median(xs)
    tail = f"p99 {1000 * pct(xs, 99):7.1f} ms"
    tgt = f"  [target < {1000 * target:.0f} ms] {verdict(med < target)}" if target else ""
    s = f"  (seed prototype: {seed:.2f} s, {seed / med:.0f}x)" if seed else ""
    print(f"{label:<28} n={len(xs):<4} p50 {1000 * med:7.1f} ms  {tail}{tgt}{s}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cycles", type=int, default=10, help="shrink-by-4 / grow-by-4 cycles")
    ap.add_argument("--jobs", type=int, default=10, help="jobs launched to time readiness")
    ap.add_argument("--orders", type=int, default=200, help="refused orders to time the round trip")
    args = ap.parse_args()

    with bench_daemon(nodes=5) as d, d.client() as c:
        # Readiness: one 1-node job at a time.
        ready = []
        for i in range(args.jobs):
            jid = int(c.request(Submit(spec=synthetic(f"ready{i}", 1, d.work_dir)))["job_id"])
            ev = wait_event(c, jid, "registered", 1)
            ready.extend(gaps(ev, "started", "registered"))
            c.request(Cancel(job_ids=[jid]))
            wait_event(c, jid, "ended", 1)

        # Shrink 5 -> 1 and grow 1 -> 5, repeatedly, on one job.
        jid = int(c.request(Submit(spec=synthetic("resizer", {"min": 1, "max": 5}, d.work_dir)))["job_id"])
        wait_event(c, jid, "registered", 1)
        for k in range(1, args.cycles + 1):
            c.request(Resize(job_id=jid, nodes=1))
            wait_event(c, jid, "shrunk", k)
            c.request(Resize(job_id=jid, nodes=5))
            wait_event(c, jid, "grown", k)
        ev = events(c, jid)
        shrink = gaps(ev, "shrink_ordered", "shrunk")
        grow = gaps(ev, "grow_ordered", "grown")
        c.request(Cancel(job_ids=[jid]))
        wait_event(c, jid, "ended", 1)

        # Order round trip: an application that refuses every order at once.
        spec = JobSpec(name="refuser", command=[sys.executable, "-c", REFUSER], nodes={"min": 1, "max": 2},
                       kind="malleable", working_dir=str(d.work_dir), output="out/%x-%j.out")
        jid = int(c.request(Submit(spec=spec))["job_id"])
        wait_event(c, jid, "registered", 1)
        for k in range(1, args.orders + 1):
            c.request(Resize(job_id=jid, nodes=1))
            wait_event(c, jid, "refused", k)
        rtt = gaps(events(c, jid), "shrink_ordered", "refused")
        c.request(Cancel(job_ids=[jid]))

    print()
    print("malleability in local mode (5 virtual nodes, synthetic app), daemon-side timestamps")
    line("order round trip", rtt, None, None)
    line("launch -> malleable-ready", ready, 0.5, 6.0)
    line("grow by 4 (order -> grown)", grow, 0.5, 14.55)
    line("shrink by 4 (order -> free)", shrink, 0.3, 7.41)
    return 0


if __name__ == "__main__":
    sys.exit(main())
