"""The daemon at scale: 200 connected applications and 10,000 queued jobs at once.

Why: a scheduler that is fine with four jobs can fall over with a real queue -- a queue
request that serialises ten thousand jobs, a scheduling pass per submission over a deep
queue, a descriptor per connected application. This shows what one daemon costs at that
size on the machine it runs on.

Setup: a daemon with `--nodes` (200) local nodes. `--apps` (200) one-node jobs run there;
each job's process (`sh` then `sleep`, so 200 of them fit any machine) writes the secret
the daemon gave it, and this script then opens one real application-channel connection
per job with that secret (`hello`, `register`), as the client library does, and holds it
open for the rest of the run. Then `--queued` (10,000) rigid jobs of 1-32 nodes with time
limits are submitted over one control connection; no node is free, so all stay PENDING.

Figures:
  - submit rate with the applications connected (and per quarter, as the queue deepens);
  - queue latency with the whole queue: the `Queue` request `equeue` sends (p50/p99 over
    `--queries`), and the real `equeue` command, process start included;
  - application-channel round trip (`ping` on all connections at once) with the queue full;
  - daemon peak memory (VmHWM), RSS and open descriptors: before, after the applications
    connected, with the queue full.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
from _harness import BenchDaemon, bench_daemon, submit, timed_requests, verdict

from elastic_protocol.control import Queue, Status, Submit
from elastic_protocol.jobspec import JobSpec

SUBMIT_TARGET = 500.0  # jobs/s, as benchmarks/submit_throughput.py
QUEUE_P99_TARGET = 2.0  # seconds for the whole 10,000-job queue document
PING_P99_TARGET = 0.5  # seconds, every application at once


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1)))]


class Sampler(threading.Thread):
    """The daemon's RSS and descriptor count, every 50 ms, peaks kept."""

    def __init__(self, pid: int) -> None:
        super().__init__(daemon=True)
        self.proc = psutil.Process(pid)
        self.peak_rss = 0
        self.peak_fds = 0
        self.halt = threading.Event()

    def run(self) -> None:
        while not self.halt.is_set():
            try:
                self.peak_rss = max(self.peak_rss, self.proc.memory_info().rss)
                self.peak_fds = max(self.peak_fds, self.proc.num_fds())
            except psutil.Error:
                return
            time.sleep(0.05)

    def now(self) -> tuple[int, int, int]:
        """(rss, fds, VmHWM) in bytes and count."""
        hwm = 0
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                hwm = int(line.split()[1]) * 1024
        return self.proc.memory_info().rss, self.proc.num_fds(), hwm


def mib(n: int) -> str:
    return f"{n / 2**20:.0f} MiB"


def app_spec(i: int, work: Path) -> JobSpec:
    return JobSpec(name=f"app{i}", nodes=1, working_dir=str(work), output="out/%j.out",
                   command=["sh", "-c", ('printf %s "$ELASTIC_JOB_SECRET" > secrets/$ELASTIC_JOB_ID.tmp && '
                            "mv secrets/$ELASTIC_JOB_ID.tmp secrets/$ELASTIC_JOB_ID; exec sleep 100000")])


def queued_spec(i: int, rng: random.Random, work: Path) -> JobSpec:
    return JobSpec(name=f"q{i}", nodes=rng.randint(1, 32), time_limit=rng.choice([10, 30, 60, 120]),
                   command=["sleep", "1"], working_dir=str(work), output="out/%j.out")


class Apps:
    """One real application-channel connection per job, on an event loop in a thread."""

    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.conns: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = []

    def call(self, coro, timeout: float = 120):
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    async def _ask(self, r: asyncio.StreamReader, w: asyncio.StreamWriter, line: str) -> str:
        w.write(line.encode() + b"\n")
        await w.drain()
        return (await r.readline()).decode().strip()

    async def _connect(self, job_id: int, secret: str) -> None:
        r, w = await asyncio.open_connection(self.host, self.port)
        for line, expect in ((f"hello 1 {job_id} {secret}", "ok hello"), ("register", "ok register")):
            reply = await self._ask(r, w, line)
            if not reply.startswith(expect):
                raise RuntimeError(f"job {job_id}: {line.split()[0]} answered {reply!r}")
        self.conns.append((r, w))

    async def _connect_all(self, secrets: dict[int, str]) -> None:
        await asyncio.gather(*(self._connect(j, s) for j, s in secrets.items()))

    def connect_all(self, secrets: dict[int, str]) -> None:
        self.call(self._connect_all(secrets))

    async def _ping_all(self) -> list[float]:
        async def one(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> float:
            t0 = time.perf_counter()
            reply = await self._ask(r, w, "ping")
            if reply != "pong":
                raise RuntimeError(f"ping answered {reply!r}")
            return time.perf_counter() - t0

        return list(await asyncio.gather(*(one(r, w) for r, w in self.conns)))

    def ping_all(self) -> list[float]:
        return self.call(self._ping_all())

    def close(self) -> None:
        async def close_all() -> None:
            for _, w in self.conns:
                w.close()

        self.call(close_all())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)


def wait_secrets(folder: Path, job_ids: list[int], timeout: float) -> dict[int, str]:
    deadline = time.monotonic() + timeout
    while True:
        found = {j: (folder / str(j)).read_text() for j in job_ids if (folder / str(j)).exists()}
        if len(found) == len(job_ids):
            return found
        if time.monotonic() > deadline:
            raise RuntimeError(f"only {len(found)} of {len(job_ids)} jobs started within {timeout:.0f} s")
        time.sleep(0.1)


def run(d: BenchDaemon, args: argparse.Namespace) -> bool:
    sampler = Sampler(d.pid)
    sampler.start()
    rss0, fds0, _ = sampler.now()
    print(f"daemon pid {d.pid}: at start RSS {mib(rss0)}, {fds0} fds")
    (d.work_dir / "secrets").mkdir()

    t0 = time.perf_counter()
    with d.client("load-apps") as c:
        app_ids = [submit(c, app_spec(i, d.work_dir)) for i in range(args.apps)]
    secrets = wait_secrets(d.work_dir / "secrets", app_ids, timeout=120)
    started = time.perf_counter() - t0
    apps = Apps(d.record.app_host, d.record.app_port)
    try:
        t1 = time.perf_counter()
        apps.connect_all(secrets)
        connected = time.perf_counter() - t1
        rss1, fds1, _ = sampler.now()
        print(f"{args.apps} jobs running in {started:.1f} s; {len(apps.conns)} applications connected and "
              f"registered in {connected:.2f} s; daemon RSS {mib(rss1)}, {fds1} fds")

        rng = random.Random(1)
        reqs = [Submit(spec=queued_spec(i, rng, d.work_dir)) for i in range(args.queued)]
        with d.client("load-submit") as c:
            submit_s, quarters = timed_requests(c, reqs)
            status = c.request(Status())["jobs_by_state"]
        rate = args.queued / submit_s
        print(f"submitted {args.queued} jobs in {submit_s:.2f} s = {rate:.0f} jobs/s "
              f"(per quarter: {', '.join(f'{q:.0f}' for q in quarters)}); jobs by state: {status}")

        with d.client("load-queue") as c:
            lat, size = [], 0
            for _ in range(args.queries):
                t = time.perf_counter()
                doc = c.request(Queue(), timeout=120)
                lat.append(time.perf_counter() - t)
                size = len(doc["jobs"])
        print(f"Queue request ({size} jobs listed): p50 {pct(lat, 50) * 1000:.0f} ms, "
              f"p99 {pct(lat, 99) * 1000:.0f} ms, max {max(lat) * 1000:.0f} ms over {len(lat)}")
        equeue = Path(sys.executable).with_name("equeue")
        cmd_lat = []
        for _ in range(args.equeue_runs):
            t = time.perf_counter()
            subprocess.run([str(equeue), "--state-dir", str(d.state_dir)], check=True, stdout=subprocess.DEVNULL)
            cmd_lat.append(time.perf_counter() - t)
        if cmd_lat:
            print(f"equeue command (process start included): p50 {pct(cmd_lat, 50) * 1000:.0f} ms, "
                  f"p99 {pct(cmd_lat, 99) * 1000:.0f} ms over {len(cmd_lat)}")

        pings: list[float] = []
        for _ in range(args.ping_rounds):
            pings += apps.ping_all()
        print(f"application ping, all {len(apps.conns)} at once, {args.ping_rounds} rounds: "
              f"p50 {pct(pings, 50) * 1000:.1f} ms, p99 {pct(pings, 99) * 1000:.1f} ms")
        rss2, fds2, hwm = sampler.now()
    finally:
        apps.close()
        sampler.halt.set()
    print(f"daemon with {args.apps} apps + {args.queued} queued: RSS {mib(rss2)}, {fds2} fds; "
          f"peak RSS {mib(max(hwm, sampler.peak_rss))} (VmHWM), peak fds {sampler.peak_fds}")

    print()
    ok_submit = rate >= SUBMIT_TARGET
    ok_queue = pct(lat, 99) <= QUEUE_P99_TARGET
    ok_ping = pct(pings, 99) <= PING_P99_TARGET
    print(f"submit with {args.apps} apps connected: {rate:.0f} jobs/s  [target >= {SUBMIT_TARGET:.0f}/s]  "
          f"{verdict(ok_submit)}")
    print(f"equeue (Queue request) with {args.queued} queued, p99: {pct(lat, 99):.2f} s  "
          f"[target <= {QUEUE_P99_TARGET:g} s]  {verdict(ok_queue)}")
    print(f"app ping with {args.apps} connected + {args.queued} queued, p99: {pct(pings, 99) * 1000:.1f} ms  "
          f"[target <= {PING_P99_TARGET * 1000:.0f} ms]  {verdict(ok_ping)}")
    print(f"daemon peak memory: {mib(max(hwm, sampler.peak_rss))}; peak fds: {sampler.peak_fds} "
          f"(informational)")
    return ok_submit and ok_queue and ok_ping


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--nodes", type=int, default=200, help="local nodes (default 200)")
    p.add_argument("--apps", type=int, default=200, help="running jobs with a connected application (default 200)")
    p.add_argument("--queued", type=int, default=10_000, help="jobs submitted to stay queued (default 10000)")
    p.add_argument("--queries", type=int, default=20, help="Queue requests timed (default 20)")
    p.add_argument("--equeue-runs", type=int, default=5, help="runs of the real equeue command (default 5)")
    p.add_argument("--ping-rounds", type=int, default=20, help="rounds of ping on every connection (default 20)")
    p.add_argument("--keep", action="store_true", help="keep the temp dir (daemon.log) for inspection")
    args = p.parse_args(argv)
    if args.apps > args.nodes:
        p.error("--apps must not exceed --nodes (one node per application job)")
    print(f"load: {os.cpu_count()} CPUs, python {sys.version.split()[0]}, {args.nodes} nodes, "
          f"{args.apps} applications, {args.queued} queued jobs")
    with bench_daemon(args.nodes, keep=args.keep) as d:
        ok = run(d, args)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
