"""Experiment grids: policies x malleable fractions x seeds, in parallel over the cores.

Each worker process reads the trace once; a run is (policy, fraction, seed) and returns
one row of metrics. Rows are aggregated over seeds as mean, median and IQR, the way the
seed papers report them.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, TextIO

from elasticd.metrics import WindowSummary, spread, windowed_summary
from elasticd.policies import make_policy
from elasticd.sim.simulator import simulate
from elasticd.sim.swf import Trace, read_swf
from elasticd.sim.workload import MalleabilityRule, build_workload
from elasticd.table import render_table

METRICS = (
    "makespan",
    "utilization",
    "mean_wait",
    "median_wait",
    "mean_turnaround",
    "median_turnaround",
    "mean_slowdown",
    "mean_bounded_slowdown",
    "shrinks_per_job",
    "expands_per_job",
    "timeouts",
)


@dataclass(frozen=True)
class TraceSource:
    path: Path
    nodes: int | None = None
    cores_per_node: int | None = None
    max_jobs: int | None = None  # only the first jobs (by submit time): a quicker, stated, subset
    strict: bool = False  # a malformed line is an error naming it, not a counted drop

    def load(self) -> Trace:
        trace = read_swf(self.path, self.nodes, self.cores_per_node, self.strict)
        if self.max_jobs is not None and len(trace.jobs) > self.max_jobs:
            trace.whole_log_kept = len(trace.jobs)
            trace.jobs = trace.jobs[: self.max_jobs]
            trace.name += f" (first {self.max_jobs} jobs)"
        return trace


def warmup_note(trace: Trace, warmup: float) -> str | None:
    """One line when the warm-up excludes nothing: submissions that span no more than it are
    all measured (elasticd.metrics.windowed_summary), which a user should know."""
    span = trace.jobs[-1].submit - trace.jobs[0].submit if trace.jobs else 0.0
    if warmup > 0 and span <= warmup:
        return (f"{trace.name}: its submissions span {span / 3600:.1f} h, shorter than the {warmup / 3600:.1f} h "
                "warm-up: every job is measured (no warm-up)")
    return None


@dataclass(frozen=True)
class RunSpec:
    policy: str
    fraction: float
    seed: int


@dataclass(frozen=True)
class RunRow:
    policy: str
    fraction: float
    seed: int
    wall_seconds: float
    metrics: WindowSummary


_trace: Trace | None = None


def _init(source: TraceSource) -> None:
    global _trace
    _trace = source.load()


def _init_worker(source: TraceSource) -> None:
    """A pool worker leaves Ctrl-C to the command (the terminal sends it to every process of
    the group): the command drops the runs not begun and waits for the ones running, and a
    worker interrupted in the middle of one printed a traceback."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _init(source)


def run_one(trace: Trace, spec: RunSpec, rule: MalleabilityRule, warmup: float, params: dict[str, Any] | None = None) -> RunRow:
    t = time.perf_counter()
    jobs = build_workload(trace, spec.fraction, spec.seed, rule)
    outcomes = simulate(jobs, trace.nodes, make_policy(spec.policy, params))
    s = windowed_summary([o.record() for o in outcomes], trace.nodes, warmup)
    return RunRow(spec.policy, spec.fraction, spec.seed, time.perf_counter() - t, s)


def _worker(spec: RunSpec, rule: MalleabilityRule, warmup: float, params: dict[str, Any] | None) -> RunRow:
    assert _trace is not None
    return run_one(_trace, spec, rule, warmup, params)


def run_grid(
    source: TraceSource,
    specs: list[RunSpec],
    rule: MalleabilityRule,
    warmup: float,
    workers: int | None = None,
    progress: Callable[[int, int, RunRow], None] | None = None,
    params: dict[str, dict[str, Any]] | None = None,
) -> list[RunRow]:
    """Every run, in parallel; rows come back in the order of `specs`. `params`: each
    policy's parameters by policy name."""
    params = params or {}
    workers = max(1, min(workers or os.cpu_count() or 1, len(specs)))
    rows: dict[RunSpec, RunRow] = {}
    if workers == 1:
        _init(source)
        for i, spec in enumerate(specs, 1):
            rows[spec] = _worker(spec, rule, warmup, params.get(spec.policy))
            if progress:
                progress(i, len(specs), rows[spec])
    else:
        pool = ProcessPoolExecutor(workers, initializer=_init_worker, initargs=(source,))
        try:
            futures = {pool.submit(_worker, spec, rule, warmup, params.get(spec.policy)): spec for spec in specs}
            for i, fut in enumerate(as_completed(futures), 1):
                rows[futures[fut]] = fut.result()
                if progress:
                    progress(i, len(specs), rows[futures[fut]])
        except BaseException:
            # Interrupted (Ctrl-C) or a run failed: the runs not begun are dropped, and only
            # the ones running are waited for. A `with` block's shutdown makes every queued run
            # first (hours, for an evaluation); so does one that does not wait, as the pool
            # it leaves behind is collected before it can drop them.
            pool.shutdown(wait=True, cancel_futures=True)
            raise
        pool.shutdown()
    return [rows[s] for s in specs]


def aggregate(rows: list[RunRow]) -> Iterator[dict[str, Any]]:
    """One record per (policy, fraction): mean, median, IQR, min and max of every metric over
    seeds."""
    groups: dict[tuple[str, float], list[RunRow]] = {}
    for r in rows:
        groups.setdefault((r.policy, r.fraction), []).append(r)
    for (policy, fraction), rs in groups.items():
        rec: dict[str, Any] = {"policy": policy, "fraction": fraction, "seeds": len(rs)}
        for m in METRICS:
            values = [getattr(r.metrics, m) for r in rs]
            mean, median, iqr = spread(values)
            rec[f"{m}_mean"], rec[f"{m}_median"], rec[f"{m}_iqr"] = mean, median, iqr
            rec[f"{m}_min"], rec[f"{m}_max"] = min(values), max(values)
        yield rec


def text_progress(stream: TextIO | None = None) -> Callable[[int, int, RunRow], None]:
    """A progress bar on a terminal, one line per run otherwise (logs stay readable). The
    stream is stderr as it is when called, not when this module was imported (a default
    bound at import kept a stream pytest had closed since)."""
    stream = stream if stream is not None else sys.stderr
    tty = stream.isatty()
    start = time.monotonic()

    def show(done: int, total: int, row: RunRow) -> None:
        width = 30
        bar = "#" * (width * done // total) + "." * (width - width * done // total)
        el = time.monotonic() - start
        msg = (f"[{bar}] {done}/{total} {el:5.1f} s  {row.policy} {100 * row.fraction:.0f}% "
               f"seed {row.seed} ({row.wall_seconds:.2f} s)")
        if tty:
            stream.write("\r" + msg.ljust(100))
            if done == total:
                stream.write("\n")
        else:
            stream.write(msg + "\n")
        stream.flush()

    return show


def row_dict(r: RunRow) -> dict[str, Any]:
    """One flat record per run, for CSV and JSON."""
    d = asdict(r)
    return {**{k: v for k, v in d.items() if k != "metrics"}, **d["metrics"]}


def print_summary(summary: list[dict[str, Any]]) -> None:
    """Means over seeds; turnaround, wait and bounded slowdown with their [min..max] over
    the seeds, which differ by up to tens of times on one configuration."""
    base = next((r for r in summary if r["policy"] == "easy" and r["fraction"] == 0), None)
    head = ("POLICY", "MALL%", "SEEDS", "TURNAROUND(s) [min..max]", "WAIT(s) [min..max]", "UTIL%",
            "BSLD [min..max]", "TIMEOUT%", "SHRINK/J", "EXPAND/J", "vs EASY 0%: TAT / WAIT / UTIL")

    def spread_of(r: dict[str, Any], m: str, fmt: str) -> str:
        mean = format(r[f"{m}_mean"], fmt)
        if r["seeds"] < 2:
            return mean
        return f"{mean} [{format(r[f'{m}_min'], fmt)}..{format(r[f'{m}_max'], fmt)}]"

    rows = [head]
    for r in summary:
        rel = ""
        if base is not None and r is not base:
            def pct(m: str) -> str:
                b = base[f"{m}_mean"]
                return f"{100 * (r[f'{m}_mean'] - b) / b:+.1f}%" if b else "n/a"  # noqa: B023 - called at once, in this iteration
            rel = f"{pct('mean_turnaround')} / {pct('mean_wait')} / {pct('utilization')}"
        rows.append((r["policy"], f"{100 * r['fraction']:.0f}", str(r["seeds"]), spread_of(r, "mean_turnaround", ".0f"),
                     spread_of(r, "mean_wait", ".0f"), f"{100 * r['utilization_mean']:.1f}",
                     spread_of(r, "mean_bounded_slowdown", ".2f"), f"{100 * r['timeouts_mean']:.2f}",
                     f"{r['shrinks_per_job_mean']:.2f}",
                     f"{r['expands_per_job_mean']:.2f}", rel))
    print(render_table(rows[0], rows[1:]))
