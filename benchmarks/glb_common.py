"""What the GLB benchmarks share: UTS job specs, waiting for a quiet machine, and reading
the runtime's output lines (`{"glb": ...}` at the end, `{"glb_resize": ...}` per resize)
from a job's output file."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

import psutil

from elastic_protocol.control import Queue, Submit, Wait
from elastic_protocol.jobspec import JobSpec
from elasticd.client import ControlClient


def uts_spec(name: str, work_dir: Path, nodes: int | dict[str, int], uts_args: list[str],
             rigid: bool, extra: list[str] | None = None) -> JobSpec:
    command = [sys.executable, "-m", "elastic_apps.glb.apps.uts", *uts_args, *(extra or [])]
    if rigid:
        command.append("--rigid")
    return JobSpec(
        name=name,
        command=command,
        nodes=nodes,
        kind="rigid" if rigid else "malleable",
        working_dir=str(work_dir),
        output="out/%x-%j.out",
    )


def wait_for_quiet_cpu(busy_below: float = 15.0, timeout: float = 30.0) -> float:
    """The machine is shared: wait (up to `timeout`) until other load is small, so that a
    run can have the cores it counts on. Returns the last busy percentage seen."""
    deadline = time.monotonic() + timeout
    busy = psutil.cpu_percent(interval=0.5)
    while busy >= busy_below and time.monotonic() < deadline:
        busy = psutil.cpu_percent(interval=0.5)
    return busy


class OtherLoad:
    """How many cores other processes kept busy during a run: the machine's busy CPU time
    minus the job's own (its places report their CPU seconds), over the run's wall time.
    A run disturbed by someone else's tests says so, and can be done again."""

    def __init__(self) -> None:
        self.t0 = time.monotonic()
        self.c0 = psutil.cpu_times()

    @staticmethod
    def _busy(t: Any) -> float:
        return float(sum(t) - t.idle - getattr(t, "iowait", 0.0))

    def cores(self, own_cpu_s: float) -> float:
        wall = time.monotonic() - self.t0
        busy = self._busy(psutil.cpu_times()) - self._busy(self.c0)
        return max(0.0, (busy - own_cpu_s) / wall) if wall > 0 else 0.0


def own_cpu(out: dict[str, Any]) -> float:
    """CPU seconds of all the job's places (departed ones included)."""
    return float(sum(s["cpu_s"] for s in out["place_stats"].values()))


def undisturbed_time(out: dict[str, Any]) -> float:
    """The run time the job would have had with a core per place and nobody else on the
    machine: its slowest place's CPU plus idle seconds. Valid when places <= cores (no
    place then waits for a CPU except because of other load)."""
    return max(s["cpu_s"] + s["idle_s"] for s in out["place_stats"].values())


def submit(c: ControlClient, spec: JobSpec) -> int:
    return int(c.request(Submit(spec=spec))["job_id"])


def job_info(c: ControlClient, job_id: int) -> dict[str, Any]:
    return c.request(Queue(job_ids=[job_id], all=True))["jobs"][0]  # type: ignore[no-any-return]


def wait_event(c: ControlClient, job_id: int, name: str, count: int = 1, timeout: float = 60) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        info = job_info(c, job_id)
        if sum(e["event"] == name for e in info["events"]) >= count:
            return info
        if info["state"] in ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT"):
            raise RuntimeError(f"job {job_id} ended {info['state']} before {name} x{count}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"job {job_id}: no {name} x{count}: {[e['event'] for e in info['events']]}")
        time.sleep(0.01)


def wait_end(c: ControlClient, job_id: int, timeout: float = 900) -> dict[str, Any]:
    assert c.request(Wait(job_ids=[job_id], timeout=timeout), timeout=timeout + 10)["done"]
    return job_info(c, job_id)


def output_lines(info: dict[str, Any], key: str) -> list[dict[str, Any]]:
    """The runtime's JSON lines with top-level `key` in the job's output file."""
    path = Path(info["output_path"])
    if not path.exists():
        return []
    prefix = '{"' + key + '"'
    return [json.loads(x) for x in path.read_text().splitlines() if x.startswith(prefix)]


def final_output(info: dict[str, Any]) -> dict[str, Any]:
    if info["state"] != "COMPLETED":
        raise RuntimeError(f"job {info['job_id']} ended {info['state']}:\n{Path(info['output_path']).read_text()}")
    (line,) = output_lines(info, "glb")
    return line


def event_gaps(info: dict[str, Any], start: str, end: str) -> list[float]:
    """Each `start` event paired with the next `end` event (daemon timestamps)."""
    out, t0 = [], None
    for e in info["events"]:
        if e["event"] == start:
            t0 = e["time"]
        elif e["event"] == end and t0 is not None:
            out.append(e["time"] - t0)
            t0 = None
    return out


def wall_time(info: dict[str, Any]) -> float:
    times = {e["event"]: e["time"] for e in info["events"]}
    return float(times["ended"] - times["started"])
