"""A malleable mpi4py program (docs/APP_GUIDE.md): it sums i*i for i < ITEMS, every rank a
share of each round's block, and grows by spawning ranks on the hosts a grow names, shrinks
by letting the ranks on the released hosts leave. Run under elasticd with `launcher = "mpi"`:
`python3 mpi_app.py ITEMS` (mpi_app.toml).
"""

from __future__ import annotations

import sys
import time

from elastic_apps.mpi import ElasticMPI, MpiHandler


class Sum(MpiHandler):
    """Hooks run on every rank at once, at a safe point; `self.mpi` is the ElasticMPI."""

    def __init__(self) -> None:
        self.done = 0    # items summed so far: the same on every rank
        self.total = 0   # the sum so far: rank 0's

    def post_grow(self, n: int, continued_hosts: list[str], new_hosts: list[str]) -> None:
        # The new ranks run this too (from ElasticMPI()): they learn where the work stands.
        self.done = self.mpi.comm.bcast(self.done, root=0)


def main() -> int:
    items = int(sys.argv[1]) if len(sys.argv) > 1 else 1_000_000
    app = Sum()
    mpi = ElasticMPI(app)             # rank 0 registers; spawned ranks join here
    while app.done < items:
        comm = mpi.comm               # every rank of the job now
        end = min(items, app.done + 500 * comm.size)
        part = sum(i * i for i in range(app.done + comm.rank, end, comm.size))
        total = comm.reduce(part, root=0)
        if comm.rank == 0:
            app.total += total
        app.done = end
        time.sleep(0.02)              # a round's worth of computing
        if app.done < items and not mpi.safe_point():
            return 0                  # this rank's host was given back: leave
    if mpi.comm.rank == 0:
        mpi.finish()                  # no more orders
        print(f"sum {app.total} on {mpi.comm.size} ranks after {mpi.resizes} resizes", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
