"""A live daemon under a flood of malformed traffic on both channels keeps answering a
well-behaved client on time, keeps every job, and stays within bounded memory and
descriptors.

The flood runs in its own process (tests/apps/fuzz_flood.py) so that it competes with the
well-behaved client for the daemon, not for this process's interpreter lock.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest

from conftest import RunningDaemon, wait_until, write_job
from elastic_protocol.control import Queue, Status
from test_auth import secret_job

pytestmark = pytest.mark.timeout(90)

FLOOD = Path(__file__).parent / "apps" / "fuzz_flood.py"
MESSAGES = 15_000
# Generous: a 2-core machine shared with other work; a stalled daemon takes far longer.
MAX_LATENCY_S = 3.0


class WellBehaved(threading.Thread):
    """Asks the daemon something every 20 ms, over one long connection and over new ones."""

    def __init__(self, d: RunningDaemon, expected: dict[int, str]) -> None:
        super().__init__(daemon=True)
        self.d = d
        self.expected = expected
        self.stop = threading.Event()
        self.latencies: list[float] = []
        self.failures: list[str] = []

    def run(self) -> None:
        try:
            with self.d.client() as c:
                i = 0
                while not self.stop.is_set():
                    t0 = time.perf_counter()
                    if i % 10 == 9:
                        with self.d.client() as fresh:  # a new connection and hello through the flood
                            fresh.request(Status(), timeout=30)
                    else:
                        jobs = c.request(Queue(job_ids=list(self.expected)), timeout=30)["jobs"]
                        states = {j["job_id"]: j["state"] for j in jobs}
                        if states != self.expected:
                            self.failures.append(f"jobs changed: {states}")
                    self.latencies.append(time.perf_counter() - t0)
                    i += 1
                    time.sleep(0.02)
        except Exception as exc:  # noqa: BLE001 - any failure of the good client is the finding
            self.failures.append(f"{type(exc).__name__}: {exc}")


def test_ten_thousand_malformed_messages_leave_the_daemon_answering_and_every_job_kept(
    daemon: RunningDaemon, tmp_path: Path
) -> None:
    a, a_secret, _ = secret_job(daemon, tmp_path / "a")
    b, _, _ = secret_job(daemon, tmp_path / "b", "2")
    wide = write_job(tmp_path, "wide", 'name = "wide"\ncommand = ["sleep", "300"]\nnodes = 4\nworking_dir = "."')
    r = daemon.cli("esubmit", "--parsable", str(wide), str(wide), str(wide))
    assert r.returncode == 0, r.stderr
    pending = [int(x) for x in r.stdout.split()]
    expected = {a: "RUNNING", b: "RUNNING"} | {p: "PENDING" for p in pending}
    proc = psutil.Process(daemon.record.pid)
    rss_before, fds_before = proc.memory_info().rss, proc.num_fds()

    good = WellBehaved(daemon, expected)
    good.start()
    cfg = {"control": [daemon.record.control_host, daemon.record.control_port],
           "app": [daemon.record.app_host, daemon.record.app_port],
           "secret": daemon.record.secret, "job_id": a, "job_secret": a_secret, "other_job_id": b,
           "messages": MESSAGES, "concurrency": 24, "idle": 8, "seed": 9}
    peak_fds = fds_before
    flood = subprocess.Popen([sys.executable, str(FLOOD), json.dumps(cfg)], stdout=subprocess.PIPE, text=True)
    try:
        while flood.poll() is None:
            peak_fds = max(peak_fds, proc.num_fds())
            time.sleep(0.1)
        out, _ = flood.communicate(timeout=60)
    finally:
        if flood.poll() is None:
            flood.kill()
            flood.wait()
        good.stop.set()
        good.join(30)
    rss_after = proc.memory_info().rss
    counts = json.loads(out)

    assert flood.returncode == 0
    assert counts["sent"] >= 10_000, counts
    assert counts["untyped_count"] == 0, counts["untyped"]
    assert counts["typed_errors"] > 5_000, counts
    assert not good.failures, good.failures[:5]
    assert len(good.latencies) > 20, "the well-behaved client hardly ran"
    worst = max(good.latencies)
    assert worst < MAX_LATENCY_S, f"slowest answer {worst:.2f} s"
    assert daemon.jobs(*expected) and {j: s["state"] for j, s in daemon.jobs(*expected).items()} == expected
    # Bounded: descriptors never exceed both channels' limits, and come back once it is over.
    assert peak_fds < fds_before + 2 * 256
    assert wait_until(lambda: proc.num_fds() <= fds_before + 2, 30), (fds_before, proc.num_fds())
    assert rss_after - rss_before < 64 * 1024 * 1024, (rss_before, rss_after)
    log = (daemon.state_dir / "daemon.log").read_text()
    assert "Traceback" not in log
    # Each refusal is logged with its source, but a flood cannot fill the disk.
    assert "refused 127.0.0.1:" in log
    assert log.count("\n") < 300, f"{log.count(chr(10))} log lines"
    print(f"\nflood: {counts}; good client: {len(good.latencies)} answers, worst {worst * 1000:.0f} ms, "
          f"fds {fds_before}->{peak_fds}, rss {rss_before >> 20}->{rss_after >> 20} MiB")
