"""A malleable 1-D Jacobi heat solver (mpi4py): the interior points are split in blocks
over the ranks; each iteration exchanges one halo point with each neighbour and sets
u[i] = (u[i-1] + u[i+1]) / 2 + s[i]. Each point's arithmetic does not depend on who
computes it, so the result after K iterations is bit-identical whatever the resize history:
a resize gathers the blocks at rank 0 (the leaving ranks hand theirs over) and scatters
them again over the new set of ranks; restart mode writes the same to a checkpoint.

    mpirun -np 2 python -m elastic_apps.mpi.jacobi --points 20000 --iterations 400 --out u.bin

Under elasticd (`launcher = "mpi"`, kind malleable) it checks for orders between iterations.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import time
from pathlib import Path

import numpy as np
from mpi4py import MPI

from elastic_apps.mpi import ElasticMPI, MpiHandler


def block(n: int, parts: int, i: int) -> tuple[int, int]:
    """The i-th of `parts` balanced blocks of range(n)."""
    q, r = divmod(n, parts)
    lo = i * q + min(i, r)
    return lo, lo + q + (1 if i < r else 0)


class Jacobi(MpiHandler):
    def __init__(self, points: int) -> None:
        self.m = points - 2  # interior points; u[0] = 1 and u[-1] = 0 are fixed
        self.it = 0
        self.full: np.ndarray | None = None  # the whole interior, at rank 0 during a resize
        self.u = np.zeros(0)
        self.s = np.zeros(0)
        self.lo = 0

    # ---- layout -----------------------------------------------------------------------------
    @property
    def comm(self) -> MPI.Intracomm:
        return self.mpi.comm

    def scatter(self) -> None:
        """Rank 0's `full` (and iteration) to every rank's block of the current communicator."""
        comm = self.comm
        self.it = comm.bcast(self.it if comm.rank == 0 else None, root=0)
        parts = None
        if comm.rank == 0:
            assert self.full is not None
            parts = [self.full[slice(*block(self.m, comm.size, r))] for r in range(comm.size)]
        mine = comm.scatter(parts, root=0)
        self.lo, hi = block(self.m, comm.size, comm.rank)
        self.u = np.empty(hi - self.lo + 2)
        self.u[1:-1] = mine
        idx = np.arange(self.lo + 1, hi + 1, dtype=np.float64)  # global point indices
        self.s = 1e-4 * np.sin(idx * 0.01)
        self.full = None

    def gather(self) -> None:
        parts = self.comm.gather(self.u[1:-1].copy(), root=0)
        self.full = np.concatenate(parts) if parts is not None else None

    # ---- the computation --------------------------------------------------------------------
    def step(self) -> None:
        comm, u = self.comm, self.u
        left = comm.rank - 1 if comm.rank > 0 else MPI.PROC_NULL
        right = comm.rank + 1 if comm.rank < comm.size - 1 else MPI.PROC_NULL
        ghost = np.array([1.0, 0.0])  # the fixed boundary, unless a neighbour sends
        # Shift left, then right: every rank sends and receives in each step, no chain.
        comm.Sendrecv(u[1:2], dest=left, recvbuf=ghost[1:2], source=right)
        comm.Sendrecv(u[-2:-1], dest=right, recvbuf=ghost[0:1], source=left)
        u[0], u[-1] = ghost[0], ghost[1]
        u[1:-1] = 0.5 * (u[:-2] + u[2:]) + self.s
        self.it += 1

    # ---- the hooks (every rank, collectively) -----------------------------------------------
    def pre_shrink(self, n: int) -> list[str]:
        self.gather()
        self.checkpoint()
        return list(self.mpi.leaving_hosts)

    def post_shrink(self, n: int, removed_hosts: list[str]) -> None:
        self.scatter()

    def pre_grow(self, n: int) -> None:
        self.gather()
        self.checkpoint()

    def post_grow(self, n: int, continued_hosts: list[str], new_hosts: list[str]) -> None:
        self.scatter()

    # ---- restart mode -----------------------------------------------------------------------
    def checkpoint(self) -> None:
        if self.mpi.mode != "restart" or self.comm.rank != 0:
            return
        assert self.full is not None
        path = Path(self.mpi.checkpoint_dir) / "jacobi.npz"
        tmp = path.with_name("jacobi.tmp.npz")
        np.savez(tmp, full=self.full, it=np.array(self.it))
        os.replace(tmp, path)

    def resume(self) -> None:
        if self.comm.rank == 0:
            data = np.load(Path(self.mpi.checkpoint_dir) / "jacobi.npz")
            self.full, self.it = data["full"], int(data["it"])
        self.scatter()


def hold(mpi: ElasticMPI, path: Path) -> bool:
    """Collective: wait at safe points, taking orders, while `path` exists (rank 0 looks, every
    rank learns). Lets a script resize the job at a point of its choosing, however slowly its
    commands come, without the job ending first. False: this rank must stop and exit."""
    while mpi.comm.bcast(path.exists() if mpi.comm.rank == 0 else None, root=0):
        time.sleep(0.05)
        if not mpi.safe_point():
            return False
    return True


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m elastic_apps.mpi.jacobi")
    ap.add_argument("--points", type=int, default=20000)
    ap.add_argument("--iterations", type=int, default=400)
    ap.add_argument("--delay", type=float, default=0.0, help="seconds of sleep per iteration (to watch resizes)")
    ap.add_argument("--check-every", type=int, default=1, help="iterations between safe points")
    ap.add_argument("--out", type=Path, help="rank 0 writes the final interior here (float64, raw)")
    ap.add_argument("--hold", type=Path, help="before the last iteration, wait (taking orders) while this file exists")
    args = ap.parse_args(argv)
    app = Jacobi(args.points)
    mpi = ElasticMPI(app)
    if not mpi.joined:
        if mpi.restarted:
            app.resume()
        else:
            if mpi.comm.rank == 0:
                app.full = np.zeros(app.m)
            app.scatter()
    t0 = time.monotonic()
    while app.it < args.iterations:
        if args.hold is not None and app.it == args.iterations - 1 and not hold(mpi, args.hold):
            return 0  # left the job (spawn mode) or restarting
        app.step()
        if args.delay:
            time.sleep(args.delay)
        if app.it % args.check_every == 0 and app.it < args.iterations and not mpi.safe_point():
            return 0  # left the job (spawn mode) or restarting
    if mpi.comm.rank == 0:
        mpi.finish()
    app.gather()
    if mpi.comm.rank == 0:
        assert app.full is not None
        digest = hashlib.sha256(app.full.tobytes()).hexdigest()
        if args.out is not None:
            args.out.write_bytes(app.full.tobytes())
        print(f"jacobi: {args.iterations} iterations, {app.m} points, {mpi.comm.size} ranks at the end, "
              f"{mpi.resizes} resizes, {time.monotonic() - t0:.2f} s, sha256 {digest}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
