"""`elasticd report`: metrics and plots for any finished run, real or simulated.

Three inputs are understood: a run file written by `elasticd run --json` (one batch, with
its queue document and every event), an experiment folder (`elasticd experiment`), and a
simulation folder (`elasticd sim --out`).
"""

from __future__ import annotations

import json
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from elastic_protocol.control import QueueDocument
from elasticd.errors import ElasticError
from elasticd.table import render_table


@dataclass
class _JobView:
    """What the Gantt chart needs of a job, from a queue document."""

    job_id: int
    events: list[Any]


def report(target: Path) -> list[Path]:
    if target.is_dir():
        results = target / "results.json"
        if not results.exists():
            raise ElasticError(f"{target}: no results.json (not an experiment or simulation folder)")
        doc = json.loads(results.read_text())
        if doc.get("kind") == "experiment":
            return report_experiment(target, doc)
        return report_simulation(target, doc)
    try:
        doc = json.loads(target.read_text())
    except (OSError, ValueError) as exc:
        raise ElasticError(f"{target}: not a readable run file ({exc})") from None
    if doc.get("kind") != "run" or "queue" not in doc:
        raise ElasticError(f"{target}: not a run file written by `elasticd run --json`")
    return report_run(target, doc)


def report_run(path: Path, doc: dict[str, Any]) -> list[Path]:
    from elasticd.experiments.batchrun import print_report
    from elasticd.sim.plots import plot_gantt, plot_utilization

    queue = QueueDocument.model_validate(doc["queue"])
    nodes = doc["nodes"]
    print_report(queue, nodes)
    if not queue.jobs:
        return []
    t0 = min(j.submit_time for j in queue.jobs)
    t1 = max((j.end_time or j.submit_time) for j in queue.jobs)
    names = sorted({h for j in queue.jobs for e in j.events for h in e.hosts}, key=_node_key)
    index = {h: i for i, h in enumerate(names)}
    stem = path.with_suffix("")
    gantt = plot_gantt([_JobView(j.job_id, j.events) for j in queue.jobs], index, t0, t1, Path(f"{stem}-gantt.png"),
                       f"{path.name}: nodes over time ({doc.get('policy') or 'policy?'})", time_unit=1.0, unit_name="s")
    busy: list[tuple[float, int]] = []
    for j in queue.jobs:
        prev = 0
        for e in j.events:
            if e.event in ("started", "grow_ordered", "grown", "shrunk", "released", "ended"):
                n = 0 if e.event == "ended" else e.nodes
                busy.append((e.time - t0, n - prev))
                prev = n
    queued = [(j.submit_time - t0, 1) for j in queue.jobs] + [((j.start_time or j.end_time or t1) - t0, -1) for j in queue.jobs]
    util = plot_utilization({"busy nodes": _cumulative(busy), "queued jobs (x nodes)": [(t, n * 1) for t, n in _cumulative(queued)]},
                            nodes, Path(f"{stem}-utilization.png"), f"{path.name}: busy nodes and queue length",
                            time_unit=1.0, unit_name="s")
    print(f"plots: {gantt} {util}")
    return [gantt, util]


def _cumulative(changes: list[tuple[float, int]]) -> list[tuple[float, int]]:
    from elasticd.sim.plots import busy_series

    return busy_series(changes)


def _node_key(name: str) -> tuple[str, int]:
    head = name.rstrip("0123456789")
    tail = name[len(head):]
    return head, int(tail) if tail else -1


def report_experiment(folder: Path, doc: dict[str, Any]) -> list[Path]:
    from elasticd.sim.plots import plot_grid

    rows = doc["rows"]
    print_experiment(rows)
    summary = experiment_summary(rows)
    grid = plot_grid(summary, folder / "grid.png", f"real runs: {len({r['batch'] for r in rows})} batch(es) per point")
    paths = [grid]
    first = folder / "runs"
    run_files = sorted(first.glob("*/run.json"))
    if run_files:
        paths += report_run(run_files[-1], json.loads(run_files[-1].read_text()))
    return paths


def experiment_summary(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Grid-plot records (mean/median/IQR per policy and fraction) from real cells."""
    from elasticd.metrics import spread

    groups: dict[tuple[str, float], list[dict[str, Any]]] = {}
    for r in rows:
        groups.setdefault((r["policy"], r["fraction"]), []).append(r)
    out = []
    for (policy, fraction), rs in groups.items():
        rec = {"policy": policy, "fraction": fraction, "seeds": len(rs)}
        for m in ("mean_turnaround", "mean_wait", "utilization", "makespan", "mean_bounded_slowdown",
                  "expands_per_job"):
            if any(m not in x for x in rs):
                continue  # results.json written before the metric was kept: no panel, not zeros
            mean, med, iqr = spread([float(x[m]) for x in rs])
            rec[f"{m}_mean"], rec[f"{m}_median"], rec[f"{m}_iqr"] = mean, med, iqr
        out.append(rec)
    return out


def print_experiment(rows: list[dict[str, Any]]) -> None:
    summary = experiment_summary(rows)
    rigid = [r for r in summary if r["fraction"] == 0]
    best = min(rigid, key=lambda r: r["makespan_mean"]) if rigid else None
    head = ("POLICY", "MALL%", "RUNS", "MAKESPAN(s)", "UTIL%", "WAIT(s)", "TURNAROUND(s)", "vs best rigid: MAKESPAN / UTIL / TAT")
    out: list[tuple[str, ...]] = []
    for r in sorted(summary, key=lambda r: (r["policy"], r["fraction"])):
        rel = ""
        if best is not None:
            def pct(m: str) -> str:
                b = best[f"{m}_mean"]
                return f"{100 * (r[f'{m}_mean'] - b) / b:+.2f}%" if b else "n/a"  # noqa: B023 - called at once, in this iteration
            rel = f"{pct('makespan')} / {pct('utilization')} / {pct('mean_turnaround')}"
        out.append((r["policy"], f"{100 * r['fraction']:.0f}", str(r["seeds"]), f"{r['makespan_mean']:.1f}",
                    f"{100 * r['utilization_mean']:.1f}", f"{r['mean_wait_mean']:.1f}", f"{r['mean_turnaround_mean']:.1f}", rel))
    print(render_table(head, out))
    if best is not None:
        print(f"best rigid policy (0% malleable, by makespan): {best['policy']}")
    errs_m = [abs(r["makespan_error"]) for r in rows]
    errs_t = [abs(r["turnaround_error"]) for r in rows]
    within = sum(a <= 0.05 and b <= 0.10 for a, b in zip(errs_m, errs_t))
    print(f"simulator vs real, per run: makespan error mean {100 * statistics.fmean(errs_m):.2f}% max {100 * max(errs_m):.2f}%; "
          f"mean turnaround error mean {100 * statistics.fmean(errs_t):.2f}% max {100 * max(errs_t):.2f}%; "
          f"{within}/{len(rows)} runs within 5% / 10%")


def report_simulation(folder: Path, doc: dict[str, Any]) -> list[Path]:
    from elasticd.sim.grid import print_summary
    from elasticd.sim.plots import plot_grid

    print_summary(doc["summary"])
    return [plot_grid(doc["summary"], folder / "grid.png", f"{doc['trace']['name']}")]

