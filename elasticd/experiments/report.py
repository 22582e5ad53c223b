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
    """A run file's table and figures: a Gantt chart of the nodes it really used (hosts from
    its queue document) and its busy nodes per second."""
    from elasticd.experiments.batchrun import print_report, rows_of_run_file
    from elasticd.metrics import StepIntegral
    from elasticd.sim.gantt import blocks_from_events, plot_gantt
    from elasticd.sim.plots import busy_changes, plot_utilization

    queue = QueueDocument.model_validate(doc["queue"])
    nodes = doc["nodes"]
    rows = rows_of_run_file(doc)
    print_report(queue, nodes, rows)
    if not queue.jobs:
        return []
    t0 = min(j.submit_time for j in queue.jobs)
    t1 = max((j.end_time or j.submit_time) for j in queue.jobs)
    names = sorted({h for j in queue.jobs for e in j.events for h in e.hosts}, key=_node_key)
    index = {h: i for i, h in enumerate(names)}
    stem = path.with_suffix("")
    blocks, marks = blocks_from_events(queue.jobs, index)
    gantt = plot_gantt(blocks, marks, max(len(names), 1), t0, t1, Path(f"{stem}-gantt.png"),
                       f"{path.name}: nodes over time ({doc.get('policy') or 'policy?'})", time_unit=1.0,
                       unit_name="s")
    ends = [r.end for r in rows if r.end is not None]
    util = plot_utilization({"busy nodes": StepIntegral(busy_changes(rows))}, None, nodes, t0, max(ends, default=t1),
                            Path(f"{stem}-utilization.png"), f"{path.name}: busy nodes ({doc.get('policy') or 'policy?'})")
    print(f"plots: {gantt} {util}")
    return [gantt, util]


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
    """Per policy and fraction (in the order the rows first name them), each metric's
    mean/median/IQR (the grid's panels) and min/max (the README table) over the batches."""
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
            values = [float(x[m]) for x in rs]
            mean, med, iqr = spread(values)
            rec[f"{m}_mean"], rec[f"{m}_median"], rec[f"{m}_iqr"] = mean, med, iqr
            rec[f"{m}_min"], rec[f"{m}_max"] = min(values), max(values)
        out.append(rec)
    return out


def best_rigid(summary: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The reference of every comparison: the 0 %-malleable record with the lowest mean makespan."""
    rigid = [r for r in summary if r["fraction"] == 0]
    return min(rigid, key=lambda r: r["makespan_mean"]) if rigid else None


@dataclass(frozen=True)
class SimulatorError:
    """How far each run's replay in the simulator is from the real run: |sim - real| / real."""

    makespan_mean: float
    makespan_max: float
    turnaround_mean: float
    turnaround_max: float
    within: int  # runs within 5 % on makespan and 10 % on mean turnaround
    runs: int


def simulator_error(rows: list[dict[str, Any]]) -> SimulatorError:
    errs_m = [abs(r["makespan_error"]) for r in rows]
    errs_t = [abs(r["turnaround_error"]) for r in rows]
    within = sum(a <= 0.05 and b <= 0.10 for a, b in zip(errs_m, errs_t))
    return SimulatorError(statistics.fmean(errs_m), max(errs_m), statistics.fmean(errs_t), max(errs_t), within, len(rows))


def print_experiment(rows: list[dict[str, Any]]) -> None:
    summary = experiment_summary(rows)
    best = best_rigid(summary)
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
    e = simulator_error(rows)
    print(f"simulator vs real, per run: makespan error mean {100 * e.makespan_mean:.2f}% max {100 * e.makespan_max:.2f}%; "
          f"mean turnaround error mean {100 * e.turnaround_mean:.2f}% max {100 * e.turnaround_max:.2f}%; "
          f"{e.within}/{e.runs} runs within 5% / 10%")


# The README table's columns: results.json's metric, its heading, its format.
TABLE_METRICS = (
    ("makespan", "makespan (s)", ".1f"),
    ("utilization", "utilization", ".3f"),
    ("mean_wait", "mean wait (s)", ".2f"),
    ("mean_turnaround", "mean turnaround (s)", ".1f"),
    ("mean_bounded_slowdown", "mean bounded slowdown", ".3f"),
    ("expands_per_job", "expands/job", ".2f"),
)


def experiment_table(rows: list[dict[str, Any]], command: str) -> str:
    """An experiment's README table: per malleable fraction and policy, each metric's mean
    (min-max) over the batches, the means against the best rigid run, then the simulator's
    error and the command that writes it again. A metric some rows lack (results.json files
    older than it) has no column rather than zeros."""
    summary = experiment_summary(rows)
    order = {p: i for i, p in enumerate(dict.fromkeys(r["policy"] for r in rows))}
    summary.sort(key=lambda r: (r["fraction"], order[r["policy"]]))
    metrics = [(m, h, f) for m, h, f in TABLE_METRICS if all(f"{m}_mean" in r for r in summary)]
    best = best_rigid(summary)
    head = ["policy", "malleable", *(h for _, h, _ in metrics)]
    if best is not None:
        head.append("vs best rigid: makespan / utilization / turnaround")
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in summary:
        cells = [r["policy"], f"{100 * r['fraction']:.0f} %"]
        cells += [f"{r[f'{m}_mean']:{f}} ({r[f'{m}_min']:{f}}-{r[f'{m}_max']:{f}})" for m, _, f in metrics]
        if best is not None:
            cells.append(" / ".join(_against(r, best, m) for m in ("makespan", "utilization", "mean_turnaround")))
        lines.append("| " + " | ".join(cells) + " |")
    seeds = sorted({r["seeds"] for r in summary})
    n = str(seeds[0]) if len(seeds) == 1 else f"{seeds[0]}-{seeds[-1]}"
    note = f"Mean (min-max) over the {n} batch{'' if n == '1' else 'es'} of each row, from the real runs"
    if best is not None:
        note += (f"; the last column compares the means with the best rigid run (0 % malleable, lowest mean "
                 f"makespan: `{best['policy']}` at 0 %)")
    e = simulator_error(rows)
    note += (f". Each run replayed in the simulator: makespan error mean {100 * e.makespan_mean:.1f} % (max "
             f"{100 * e.makespan_max:.1f} %), mean turnaround error mean {100 * e.turnaround_mean:.1f} % (max "
             f"{100 * e.turnaround_max:.1f} %); {e.within}/{e.runs} runs within 5 % / 10 %.")
    short = [r for r in rows if r["completed"] < r["jobs"]]
    if short:
        note += f" {len(short)} of {len(rows)} runs did not complete every job."
    note += f" Regenerated from `results.json` by `{command}`."
    return "\n".join(lines) + "\n\n" + note + "\n"


def _against(r: dict[str, Any], best: dict[str, Any], m: str) -> str:
    b = best[f"{m}_mean"]
    return f"{100 * (r[f'{m}_mean'] - b) / b:+.1f} %" if b else "n/a"


def check_readme(folder: Path, readme: Path) -> None:
    """Before a long run: the README given for the table must have the folder's section."""
    from elasticd.experiments.evaluate import readme_section

    readme_section(readme, folder.resolve().name)


def write_experiment_table(folder: Path, rows: list[dict[str, Any]], command: str, readme: Path | None = None) -> Path:
    """The table into FOLDER/README.md (made if missing) between <!-- BEGIN name --> and
    <!-- END name -->, name being the folder's, and into that section of `readme` if given;
    whatever stands around the section is kept."""
    from elasticd.experiments.evaluate import update_readme

    marker = folder.resolve().name
    table = experiment_table(rows, command)
    if readme is not None:
        update_readme(readme, marker, table)  # first: it refuses a README without the section
    own = folder / "README.md"
    text = own.read_text() if own.exists() else f"# {marker}\n"
    begin, end = f"<!-- BEGIN {marker} -->", f"<!-- END {marker} -->"
    if begin not in text and end not in text:
        own.write_text(f"{text.rstrip()}\n\n{begin}\n{end}\n")
    update_readme(own, marker, table)
    return own


def report_simulation(folder: Path, doc: dict[str, Any]) -> list[Path]:
    """A simulation folder's table, and its figures drawn again from its per-job files."""
    from elasticd.sim.figures import plot_simulation
    from elasticd.sim.grid import print_summary

    print_summary(doc["summary"])
    params = doc.get("parameters", {})
    name = Path(str(params.get("trace") or doc["trace"]["name"])).name.split(".swf")[0]
    seeds = max((int(r["seed"]) for r in doc["runs"]), default=1)
    gantt = params.get("gantt_window")
    hours = None
    if gantt:
        h0, h1 = (float(x) for x in gantt.split(","))
        hours = (h0, h1)
    return plot_simulation(folder, doc["runs"], doc["summary"], name, float(params.get("warmup", 43200.0)), seeds,
                           hours)
