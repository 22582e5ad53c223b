"""A plain mpi4py program: each rank says where it runs; rank 0 prints the sum of ranks."""

import os
import socket

from mpi4py import MPI

comm = MPI.COMM_WORLD
host = os.environ.get("ELASTIC_HOST") or socket.gethostname()
print(f"rank {comm.rank} of {comm.size} on {host} pid {os.getpid()}", flush=True)
total = comm.reduce(comm.rank + 1, root=0)
comm.Barrier()
if comm.rank == 0:
    print(f"sum {total}", flush=True)
