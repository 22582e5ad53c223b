"""Grow by 4 places and shrink by 4 places of a running GLB job, split as in the seed's
Fig. 7 into the runtime's part and the GLB part.

A malleable UTS job (T1's parameters at depth 13: it runs for minutes, and is cancelled
at the end) starts on 5 hosts of a 5-node local daemon, one place per host, all places
computing. Then, `--cycles` times: shrink to 1 host (4 places leave), let the job run
`--settle` s, grow back to 5 (4 places join), let it run again.

- total: the daemon's own timestamps, `shrink_ordered` -> `shrunk` (the answer and the
  released processes verified gone, nodes free) and `grow_ordered` -> `grown`;
- GLB part: what the runtime's handler spent on GLB work, as it reports it: for a shrink
  the whole of pre_shrink (take the leaving places out of the steal and lifeline network,
  move their bags and partial results); for a grow, admitting the new places (ids,
  member lists, lifelines) once they connected;
- runtime part: the rest (the daemon's order, starting and connecting the new processes,
  ending the released ones, freeing nodes) -- what APGAS's process management is in the
  seed. For a grow, the handler's own view of it (order received -> last new place
  connected) is shown too.

Seed (32 nodes, Java, Hazelcast): grow 14.55 s = 14.09 APGAS + 0.46 GLB (3.8 places);
shrink 7.41 s = 6.31 APGAS + 1.10 GLB (2.55 places). Targets here (local mode): grow by 4
< 1 s, shrink by 4 < 0.5 s.

    .venv/bin/python benchmarks/glb_resize.py [--cycles 5] [--settle 1.0]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

from _harness import bench_daemon, verdict
from glb_common import (
    event_gaps,
    job_info,
    output_lines,
    submit,
    uts_spec,
    wait_end,
    wait_event,
)

from elastic_protocol.control import Cancel, Resize


def p50(xs: list[float]) -> float:
    return statistics.median(xs)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cycles", type=int, default=5, help="shrink-by-4 / grow-by-4 cycles (default 5)")
    ap.add_argument("--settle", type=float, default=1.0, help="seconds of computing between orders")
    args = ap.parse_args()

    with bench_daemon(nodes=5) as d, d.client() as c:
        spec = uts_spec("uts-resize", d.work_dir, {"min": 1, "max": 5}, ["--tree", "T1", "--depth", "13"], rigid=False)
        jid = submit(c, spec)
        wait_event(c, jid, "registered")
        time.sleep(args.settle)
        for k in range(1, args.cycles + 1):
            c.request(Resize(job_id=jid, nodes=1))
            wait_event(c, jid, "shrunk", k)
            time.sleep(args.settle)
            c.request(Resize(job_id=jid, nodes=5))
            wait_event(c, jid, "grown", k)
            time.sleep(args.settle)
            print(f"  cycle {k} done", flush=True)
        info = job_info(c, jid)
        records = output_lines(info, "glb_resize")
        c.request(Cancel(job_ids=[jid]))
        wait_end(c, jid, 60)

    shrink_total = event_gaps(info, "shrink_ordered", "shrunk")
    grow_total = event_gaps(info, "grow_ordered", "grown")
    shrinks = [r["glb_resize"] for r in records if r["glb_resize"]["op"] == "shrink"]
    grows = [r["glb_resize"] for r in records if r["glb_resize"]["op"] == "grow"]
    assert len(shrinks) == len(shrink_total) == args.cycles and len(grows) == len(grow_total) == args.cycles
    assert all(s["places"] == 4 and s["moved_bags"] <= 4 for s in shrinks) and all(g["places"] == 4 for g in grows)

    shrink_glb = [s["glb_s"] for s in shrinks]
    grow_glb = [g["glb_s"] for g in grows]
    shrink_rt = [t - g for t, g in zip(shrink_total, shrink_glb)]
    grow_rt = [t - g for t, g in zip(grow_total, grow_glb)]
    grow_start = [g["start_s"] for g in grows]
    moved = sum(s["moved_bags"] for s in shrinks)

    def ms(x: float) -> str:
        return f"{1000 * x:7.1f} ms"

    print()
    print(f"GLB resize costs, local mode, UTS computing on every place, {args.cycles} cycles, medians "
          f"(max in brackets)")
    print(f"grow by 4 places:   total {ms(p50(grow_total))} [{ms(max(grow_total)).strip()}] = runtime "
          f"{ms(p50(grow_rt))} + GLB {ms(p50(grow_glb))}   (handler: order -> 4 places connected "
          f"{ms(p50(grow_start))})  [target < 1000 ms] {verdict(p50(grow_total) < 1.0)}")
    print(f"shrink by 4 places: total {ms(p50(shrink_total))} [{ms(max(shrink_total)).strip()}] = runtime "
          f"{ms(p50(shrink_rt))} + GLB {ms(p50(shrink_glb))}   ({moved} of {4 * args.cycles} leaving bags "
          f"held work and were moved)  [target < 500 ms] {verdict(p50(shrink_total) < 0.5)}")
    print("seed prototype: grow 14.55 s = 14.09 APGAS + 0.46 GLB (3.8 places); "
          "shrink 7.41 s = 6.31 APGAS + 1.10 GLB (2.55 places)")
    return 0 if p50(grow_total) < 1.0 and p50(shrink_total) < 0.5 else 1


if __name__ == "__main__":
    sys.exit(main())
