"""What both benchmarks share: a real detached daemon in a throw-away state directory.

The benchmarks measure the daemon as users run it (a separate process behind the real
control socket), so they start it with the same `start_detached` that `elasticd start`
uses. Cleanup must never leave a daemon or its job processes behind, even when the
benchmark itself fails: stop by request first (that also ends the jobs cleanly), and only
if the daemon does not answer, signal the daemon's own pid and the job processes that were
its children -- never anything found by name.
"""

from __future__ import annotations

import os
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import psutil

from elastic_protocol.control import Queue, Stop, Submit
from elastic_protocol.jobspec import JobSpec
from elasticd.client import ControlClient
from elasticd.daemonctl import start_detached
from elasticd.statedir import DaemonRecord, pid_alive, read_record


@dataclass
class BenchDaemon:
    """A running daemon plus the scratch directory its state and job output live in."""

    record: DaemonRecord
    state_dir: Path
    work_dir: Path

    @property
    def pid(self) -> int:
        return self.record.pid

    def client(self, name: str = "bench") -> ControlClient:
        return ControlClient(self.record, name)


def sleep_spec(name: str, nodes: int, work_dir: Path, seconds: int = 1000) -> JobSpec:
    """A rigid job that just sleeps; output goes to the scratch dir, not the user's home."""
    return JobSpec(
        name=name,
        command=["sleep", str(seconds)],
        nodes=nodes,
        working_dir=str(work_dir),
        output="out/%j.out",
    )


def submit(client: ControlClient, spec: JobSpec) -> int:
    return int(client.request(Submit(spec=spec))["job_id"])


def timed_requests(client: ControlClient, reqs: list[Submit]) -> tuple[float, list[float]]:
    """Send the requests in sequence: (seconds in all, rate in each quarter of the run).

    Per-quarter rates show a cost that grows with the queue, which the average hides; with
    fewer than 4 requests there are no quarters."""
    quarter = len(reqs) // 4 if len(reqs) >= 4 else len(reqs) + 1
    marks: list[float] = []
    t0 = time.perf_counter()
    for i, req in enumerate(reqs, 1):
        client.request(req)
        if i % quarter == 0:
            marks.append(time.perf_counter())
    elapsed = time.perf_counter() - t0
    return elapsed, [quarter / (b - a) for a, b in zip([t0, *marks], marks[:4])]


def wait_running(client: ControlClient, job_ids: list[int], timeout: float = 20.0) -> None:
    """Block until every job is RUNNING, so the measurement starts in a steady state."""
    deadline = time.monotonic() + timeout
    while True:
        jobs = client.request(Queue(job_ids=job_ids))["jobs"]
        states = {j["job_id"]: j["state"] for j in jobs}
        if all(s == "RUNNING" for s in states.values()):
            return
        bad = {j: s for j, s in states.items() if s not in ("PENDING", "CONFIGURING", "RUNNING")}
        if bad:
            raise RuntimeError(f"job(s) ended instead of running: {bad}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"jobs not RUNNING after {timeout:.0f} s: {states}")
        time.sleep(0.02)


def _kill_tree(pid: int) -> None:
    """Last resort: SIGKILL the daemon pid and its child processes (its jobs), by pid."""
    try:
        daemon = psutil.Process(pid)
        victims = daemon.children(recursive=True)
    except psutil.Error:
        victims, daemon = [], None
    for p in victims:
        # Jobs run in their own sessions; end each job's whole group, which is its pid.
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    if daemon is not None:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        try:
            daemon.wait(5)
        except psutil.Error:
            pass


def stop_daemon(record: DaemonRecord, timeout: float = 30.0) -> str:
    """Stop by request; fall back to SIGTERM then SIGKILL of this pid only. Returns how."""
    try:
        with ControlClient(record, "bench-stop") as c:
            c.request(Stop(), timeout=timeout)
    except Exception as exc:  # noqa: BLE001 - any failure means: use the fallback
        how = f"stop request failed ({type(exc).__name__}: {exc})"
    else:
        how = "stop request"
    deadline = time.monotonic() + 10
    while pid_alive(record.pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    if not pid_alive(record.pid):
        return how
    try:
        os.kill(record.pid, signal.SIGTERM)  # the daemon's own handler ends its jobs
    except ProcessLookupError:
        return how
    deadline = time.monotonic() + 10
    while pid_alive(record.pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    if pid_alive(record.pid):
        _kill_tree(record.pid)
        return how + "; SIGTERM ignored, killed"
    return how + "; ended by SIGTERM"


@contextmanager
def bench_daemon(nodes: int, policy: str = "easy", log_level: str = "INFO",
                 keep: bool = False, extra: list[str] | None = None) -> Iterator[BenchDaemon]:
    """A daemon with `nodes` local nodes for the duration of the block; always cleaned up."""
    tmp = Path(tempfile.mkdtemp(prefix="elastic-bench-"))
    state_dir = tmp / "state"
    work_dir = tmp / "work"
    (work_dir / "out").mkdir(parents=True)
    record: DaemonRecord | None = None
    # SIGTERM (a CI timeout, `kill`) would end Python without running `finally`: turn it
    # into SystemExit so the daemon is still stopped.
    previous = signal.signal(signal.SIGTERM, _exit_on_sigterm)
    try:
        record = start_detached(state_dir, local=nodes, policy=policy, kill_wait=1.0, log_level=log_level,
                                extra=extra)
        yield BenchDaemon(record, state_dir, work_dir)
    finally:
        # If start_detached was interrupted after the daemon wrote its record, find it there.
        if record is None:
            record = read_record(state_dir)
        sys.stdout.flush()  # keep the report and the cleanup notes in order
        if record is not None and pid_alive(record.pid):
            how = stop_daemon(record)
            print(f"daemon pid {record.pid} stopped ({how})", file=sys.stderr)
        if keep:
            print(f"kept {tmp}", file=sys.stderr)
        else:
            shutil.rmtree(tmp, ignore_errors=True)
        signal.signal(signal.SIGTERM, previous)


def _exit_on_sigterm(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)


def verdict(ok: bool) -> str:
    return "OK" if ok else "BELOW TARGET"


def events(client: ControlClient, job_id: int) -> list[dict]:
    """The job's event log, as the daemon stamped it."""
    return client.request(Queue(job_ids=[job_id]))["jobs"][0]["events"]


def wait_event(client: ControlClient, job_id: int, name: str, count: int = 1, timeout: float = 60.0,
               poll: float = 0.005) -> list[dict]:
    """Poll until `name` has happened `count` times; the events then."""
    deadline = time.monotonic() + timeout
    while True:
        ev = events(client, job_id)
        if sum(e["event"] == name for e in ev) >= count:
            return ev
        if time.monotonic() > deadline:
            raise RuntimeError(f"job {job_id}: no {name} x{count}: {[e['event'] for e in ev]}")
        time.sleep(poll)


def gaps(ev: list[dict], start: str, end: str) -> list[float]:
    """Pair each `start` event with the next `end` event: the latencies between them."""
    out, t0 = [], None
    for e in ev:
        if e["event"] == start:
            t0 = e["time"]
        elif e["event"] == end and t0 is not None:
            out.append(e["time"] - t0)
            t0 = None
    return out


def synthetic_spec(name: str, nodes: int | dict, work_dir: Path, work: float = 3600) -> JobSpec:
    """A long malleable synthetic job: resizes can be timed on it for as long as needed."""
    return JobSpec(name=name, command=[sys.executable, "-m", "elastic_apps.synthetic", "--work", str(work)],
                   nodes=nodes, kind="malleable", working_dir=str(work_dir), output="out/%x-%j.out")
