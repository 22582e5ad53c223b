"""A synthetic malleable application that follows a speedup model in real time.

One process per host, as elastic launches jobs. The leader (first process) does the
bookkeeping: remaining work shrinks at rate S(n) per second on n hosts, and each resize
stops progress for the modelled reconfiguration time. Workers only take part: they join
the leader and leave when told. Everyone sleeps, so a batch of 25+ such jobs costs almost
no CPU, and the run time under a history of sizes is exactly what `models` predicts.

    python -m elastic_apps.synthetic --work 120 --speedup amdahl:0.05 [--alpha 0.01 ...]
"""

from __future__ import annotations

import argparse
import json
import socket
import sys
import threading
import time

from elastic_apps.channel import JobChannel
from elastic_apps.env import job_env
from elastic_apps.errors import ElasticAppError, NotInJob
from elastic_apps.handler import MalleableHandler
from elastic_protocol.models import ReconfigCost, SpeedupModel, WorkProgress, parse_speedup

LEADER_KEY = "synthetic-leader"


class Progress:
    """The model's state on the real clock; shared between the leader and the handler thread."""

    def __init__(self, work: float, model: SpeedupModel, cost: ReconfigCost, size: int) -> None:
        self.t0 = time.monotonic()
        self.work = WorkProgress(work, model, cost, size, self.t0)
        self.history: list[tuple[float, int]] = [(0.0, size)]
        self.lock = threading.Lock()
        self.changed = threading.Event()  # wakes the leader's sleep on a resize

    @property
    def size(self) -> int:
        return self.work.size

    def resize(self, new_size: int) -> None:
        with self.lock:
            now = time.monotonic()
            self.work.resize(new_size, now)
            self.history.append((now - self.t0, new_size))
        self.changed.set()

    def time_left(self) -> float:
        with self.lock:
            now = time.monotonic()
            return self.work.end_time(now) - now


class Workers:
    """The leader's side of its workers: one socket per host; closing it ends the worker."""

    def __init__(self) -> None:
        self.server = socket.socket()
        self.socks: dict[str, socket.socket] = {}
        self.cond = threading.Condition()

    def listen(self, address: str) -> str:
        self.server.bind((address, 0))
        self.server.listen(128)
        threading.Thread(target=self._accept, daemon=True).start()
        host, port = self.server.getsockname()[:2]
        return f"{host}:{port}"

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.server.accept()
            except OSError:
                return
            f = conn.makefile("r")
            host = f.readline().strip()
            with self.cond:
                self.socks[host] = conn
                self.cond.notify_all()

    def wait_for(self, hosts: list[str], timeout: float) -> bool:
        with self.cond:
            return self.cond.wait_for(lambda: all(h in self.socks for h in hosts), timeout)

    def dismiss(self, hosts: list[str]) -> None:
        with self.cond:
            for h in hosts:
                s = self.socks.pop(h, None)
                if s is not None:
                    s.close()


class SyntheticHandler(MalleableHandler):
    def __init__(self, job: JobChannel, progress: Progress, workers: Workers) -> None:
        self.job = job
        self.progress = progress
        self.workers = workers

    def pre_shrink(self, n: int) -> list[str]:
        # Keep the leader's own host; release the most recently added ones.
        candidates = [h for h in self.job.hosts if h != self.job.env.host]
        chosen = candidates[-n:]
        self.workers.dismiss(chosen)
        return chosen

    def post_shrink(self, n: int, removed_hosts: list[str]) -> None:
        self.progress.resize(len(self.job.hosts))

    def post_grow(self, n: int, continued_hosts: list[str], new_hosts: list[str]) -> None:
        if not self.workers.wait_for(new_hosts, timeout=20.0):
            raise ElasticAppError(f"new workers on {new_hosts} did not join")
        self.progress.resize(len(continued_hosts) + len(new_hosts))


def run_leader(args: argparse.Namespace) -> int:
    job = JobChannel.connect()
    workers = Workers()
    job.put(LEADER_KEY, workers.listen(job.local_address))
    others = [h for h in job.hosts if h != job.env.host]
    if not workers.wait_for(others, timeout=30.0):
        print("synthetic: workers did not join in time", file=sys.stderr)
        return 1
    progress = Progress(args.work, parse_speedup(args.speedup), ReconfigCost(args.alpha, args.beta, args.b), len(job.hosts))
    if not args.rigid:
        job.register(SyntheticHandler(job, progress, workers))
    while True:
        left = progress.time_left()
        if left <= 0:
            break
        progress.changed.wait(min(left, args.step))
        progress.changed.clear()
    # The work ended here: deregistering is a round trip to the daemon (and waits for an
    # order being handled), which on a loaded machine would add its delay to the run time.
    elapsed = time.monotonic() - progress.t0
    if not args.rigid:
        job.disable()
    workers.dismiss(list(workers.socks))
    print(json.dumps({"work": args.work, "elapsed": round(elapsed, 4), "history": progress.history,
                      "final_nodes": progress.size}))
    job.close()
    return 0


def run_worker(args: argparse.Namespace) -> int:
    env = job_env()
    job = JobChannel.connect(env)
    address = job.wait_value(LEADER_KEY, timeout=30.0)
    job.close()
    host, _, port = address.rpartition(":")
    with socket.create_connection((host, int(port)), timeout=30) as s:
        s.sendall(env.host.encode() + b"\n")
        s.settimeout(None)
        while s.recv(4096):
            pass
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="elastic-synthetic", description=__doc__.split("\n\n")[0])
    p.add_argument("--work", type=float, required=True, help="seconds the job takes on one node")
    p.add_argument("--speedup", default="linear", help="amdahl:F, rho:R or linear (default)")
    p.add_argument("--alpha", type=float, default=0.0, help="reconfiguration: seconds per node changed (T_dr)")
    p.add_argument("--beta", type=float, default=0.0, help="reconfiguration: beta / (nodes involved) seconds (T_dr)")
    p.add_argument("--b", type=float, default=0.0, help="reconfiguration: process creation seconds per node (T_p)")
    p.add_argument("--step", type=float, default=0.5, help="longest sleep between progress checks (s)")
    p.add_argument("--rigid", action="store_true", help="never register: run as a rigid job")
    args = p.parse_args(argv)
    try:
        env = job_env()
    except NotInJob as exc:
        # Run by hand: say what it is for, not a traceback.
        print(f"elastic-synthetic: {exc}; it is started as a job's command (see README: Submit, watch, cancel)",
              file=sys.stderr)
        return 2
    return run_leader(args) if env.is_leader else run_worker(args)


if __name__ == "__main__":
    sys.exit(main())
