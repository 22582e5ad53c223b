"""Running the seed experiment for real through the daemon, and replaying it simulated.

Each cell (policy, malleable fraction, batch seed) writes its job files, runs them on a
private local daemon in real time, saves the whole run (queue document with every event),
replays the very same job files in the simulator with the same policy settings, and
records both sets of metrics side by side.
"""

from __future__ import annotations

import json
import sys
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from elastic_protocol.control import QueueDocument
from elasticd.experiments.batches import generate_batch, malleable_set, write_batch
from elasticd.experiments.batchrun import execute_batch, load_batch, queue_rows, report_json
from elasticd.metrics import JobRow, measurement_window, summarize
from elasticd.perjob import RunFile, rounded, write
from elasticd.policies import make_policy
from elasticd.sim.rows import job_rows
from elasticd.sim.simulator import simulate
from elasticd.sim.workload import from_specs


@dataclass(frozen=True)
class Settings:
    nodes: int = 16
    time_scale: float = 1 / 15
    jobs: int = 25
    kill_wait: float = 1.0
    min_resize_interval: float = 2.0
    schedule_interval: float = 1.0
    order_deadline: float = 10.0
    # Launch-to-progress latency the replay charges a job started on n nodes: a + b*n,
    # fitted on real local-mode runs (process starts, workers joining the leader).
    startup: float = 0.25
    startup_per_node: float = 0.063
    grow_latency: float = 0.1
    grow_latency_per_node: float = 0.035

    def daemon_args(self) -> list[str]:
        return ["--order-deadline", str(self.order_deadline), "--min-resize-interval", str(self.min_resize_interval),
                "--schedule-interval", str(self.schedule_interval)]


@dataclass(frozen=True)
class CellRow:
    policy: str
    fraction: float
    batch: int
    jobs: int
    completed: int
    makespan: float
    utilization: float
    mean_wait: float
    mean_turnaround: float
    sim_makespan: float
    sim_utilization: float
    sim_mean_wait: float
    sim_mean_turnaround: float
    makespan_error: float  # (sim - real) / real
    turnaround_error: float
    # The real run's, for the grid's panels (older results.json files lack them: 0).
    mean_bounded_slowdown: float = 0.0
    expands_per_job: float = 0.0


def run_cell(out: Path, policy: str, fraction: float, batch: int, s: Settings) -> CellRow:
    cell = out / "runs" / f"{policy}-{round(100 * fraction)}-b{batch}"
    jobs_dir = cell / "jobs"
    b = generate_batch(batch, jobs=s.jobs)
    write_batch(jobs_dir, b, malleable_set(b, fraction, batch), s.time_scale, python=sys.executable)
    specs = load_batch([jobs_dir], s.nodes)
    doc, _done, by_id = execute_batch(specs, s.nodes, policy, s.kill_wait, s.daemon_args(), announce=False,
                                      timeout=3600)
    (cell / "run.json").write_text(json.dumps(report_json(doc, s.nodes, policy, by_id), indent=1))
    return compare(doc, specs, policy, fraction, batch, s, cell)


def _per_job_file(path: Path, rows: list[JobRow], nodes: int) -> None:
    """The run's per-job file (elasticd.perjob), measured over its whole submission window."""
    if rows:
        write(path, RunFile(rows, nodes, measurement_window(rows, 0.0)))


def compare(doc: QueueDocument, specs: list[Any], policy: str, fraction: float, batch: int, s: Settings,
            cell: Path | None = None) -> CellRow:
    """A real run beside its replay in the simulator, with the same policy settings; with
    `cell`, each one's per-job file is written there (jobs-real.csv.gz, jobs-sim.csv.gz).
    Jobs are matched to their files by submission order, as the batch submitted them."""
    by_id = dict(zip(sorted(j.job_id for j in doc.jobs), sorted(specs, key=lambda sp: sp.submit_offset)))
    real_rows = queue_rows(doc, by_id)
    real = summarize(real_rows, s.nodes)
    jobs = from_specs(specs, s.startup, s.startup_per_node, s.grow_latency, s.grow_latency_per_node)
    outcomes = simulate(jobs, s.nodes, make_policy(policy, min_resize_interval=s.min_resize_interval))
    sim_rows = [rounded(r) for r in job_rows(jobs, outcomes)]
    sim = summarize(sim_rows, s.nodes)
    if cell is not None:
        _per_job_file(cell / "jobs-real.csv.gz", real_rows, s.nodes)
        _per_job_file(cell / "jobs-sim.csv.gz", sim_rows, s.nodes)
    completed = sum(j.state == "COMPLETED" for j in doc.jobs)
    grows = sum(1 for j in doc.jobs for e in j.events if e.event == "grown")

    def err(a: float, b: float) -> float:
        return (a - b) / b if b else 0.0

    return CellRow(policy, fraction, batch, len(doc.jobs), completed, real.makespan, real.utilization, real.mean_wait,
                   real.mean_turnaround, sim.makespan, sim.utilization, sim.mean_wait, sim.mean_turnaround,
                   err(sim.makespan, real.makespan), err(sim.mean_turnaround, real.mean_turnaround),
                   real.mean_bounded_slowdown, grows / len(doc.jobs) if doc.jobs else 0.0)


def replay_experiment(out: Path, s: Settings) -> list[CellRow]:
    """Re-simulate every real run of an experiment folder (after changing the simulator's
    settings, say) without running anything again; results.json is rewritten."""
    doc = json.loads((out / "results.json").read_text())
    rows = []
    for r in doc["rows"]:
        cell = out / "runs" / f"{r['policy']}-{round(100 * r['fraction'])}-b{r['batch']}"
        run = json.loads((cell / "run.json").read_text())
        specs = load_batch([cell / "jobs"], run["nodes"])
        settings = Settings(**{**asdict(s), "nodes": run["nodes"]})
        rows.append(compare(QueueDocument.model_validate(run["queue"]), specs, r["policy"], r["fraction"], r["batch"],
                            settings, cell))
    doc["rows"] = [asdict(r) for r in rows]
    doc["replay_settings"] = asdict(s)
    (out / "results.json").write_text(json.dumps(doc, indent=1))
    return rows


def run_experiment(
    out: Path,
    policies: list[str],
    fractions: list[float],
    batches: list[int],
    s: Settings,
    parallel: int = 1,
    progress: Callable[[int, int, CellRow], None] | None = None,
) -> list[CellRow]:
    """All cells; `parallel` daemons at once (the synthetic jobs sleep, so a 2-core machine
    runs two 16-node batches side by side without distorting them)."""
    cells = [(p, f, b) for b in batches for f in fractions for p in policies]
    rows: dict[tuple[str, float, int], CellRow] = {}
    lock = threading.Lock()
    with ThreadPoolExecutor(max(1, parallel)) as pool:
        futures = {pool.submit(run_cell, out, p, f, b, s): (p, f, b) for p, f, b in cells}
        for i, fut in enumerate(as_completed(futures), 1):
            row = fut.result()
            with lock:
                rows[futures[fut]] = row
            if progress:
                progress(i, len(cells), row)
    ordered = [rows[c] for c in cells]
    # A folder accumulates cells: earlier runs of other cells (another policy, say) stay.
    results = out / "results.json"
    kept: list[dict[str, Any]] = []
    if results.exists():
        done = {(r.policy, r.fraction, r.batch) for r in ordered}
        kept = [r for r in json.loads(results.read_text())["rows"] if (r["policy"], r["fraction"], r["batch"]) not in done]
    doc = {"version": 1, "kind": "experiment", "settings": asdict(s), "rows": kept + [asdict(r) for r in ordered]}
    results.write_text(json.dumps(doc, indent=1))
    return ordered
