"""One hash of many trace schedules: the check that a change left every schedule as it was.

Simulates a fixed set of (trace prefix, policy, malleable fraction, seed) runs and hashes
what each run decided for each job (start, end, state, the sizes it held and when). A
refactor or a speed-up must print the same hash before and after; a change of behaviour
changes it, and its commit says so. Per-run hashes are printed too, so a difference is
found by run.

    .venv/bin/python benchmarks/outcome_hash.py [--jobs 3000] [--workers 2]
"""

from __future__ import annotations

import argparse
import hashlib
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TRACES = ("theta-2023", "hpc2n-2002-subset", "nasa-ipsc-1993", "sdsc-sp2-1998")
POLICIES = ("easy", "malleable", "min", "avg", "pref", "keeppref", "sd", "payoff")
FRACTIONS = (0.0, 1.0)
SEED = 1


def one(trace: str, policy: str, fraction: float, max_jobs: int) -> tuple[str, str]:
    from elasticd.policies.registry import make_policy
    from elasticd.sim.grid import TraceSource
    from elasticd.sim.simulator import simulate
    from elasticd.sim.workload import build_workload

    t = TraceSource(ROOT / "examples" / "traces" / f"{trace}.swf.gz", max_jobs=max_jobs).load()
    jobs = build_workload(t, fraction, SEED)
    h = hashlib.sha256()
    for o in sorted(simulate(jobs, t.nodes, make_policy(policy)), key=lambda o: o.job_id):
        h.update(repr((o.job_id, o.start, o.end, o.state, o.shrinks, o.expands, o.sizes)).encode())
    return f"{trace} {policy} {fraction:.0%}", h.hexdigest()[:16]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--jobs", type=int, default=3000, help="first N jobs of each trace (default 3000)")
    ap.add_argument("--workers", type=int, default=2)
    args = ap.parse_args()
    runs = [(t, p, f) for t in TRACES for p in POLICIES for f in FRACTIONS]
    with ProcessPoolExecutor(args.workers) as pool:
        results = list(pool.map(one, *zip(*runs), [args.jobs] * len(runs)))
    total = hashlib.sha256()
    for name, digest in results:
        print(f"{digest}  {name}")
        total.update(f"{name} {digest}\n".encode())
    print(f"outcome hash of {len(results)} runs (first {args.jobs} jobs each): {total.hexdigest()[:16]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
