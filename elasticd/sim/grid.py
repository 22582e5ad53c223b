"""Experiment grids: every run a deterministic function of its key, dispatched in one place.

A run's key (RunKey: trace, policy, malleable fraction, seed, load, conversion rule) and the
grid's settings (GridSettings: the rule's parameters, the warm-up, the policies' parameters,
where per-job files go) say everything about it: `run_one` builds the workload, simulates it,
writes the run's per-job file (elasticd.perjob) and computes its summary from the rows as
written. Nothing a run returns depends on which process made it, or when (but its wall
time): `run_grid` is the one place that spreads runs over processes, and another dispatcher
(Dask) can call `run_from_source` for each key instead and get byte-identical files.

Rows are aggregated over seeds as mean, median and IQR (the seed papers' way), and each cell
compared with rigid EASY seed by seed (elasticd.intervals).
"""

from __future__ import annotations

import os
import signal
import sys
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any, TextIO

from elasticd.intervals import Paired, paired
from elasticd.metrics import WindowSummary, measurement_window, spread, summarize_window
from elasticd.perjob import SUFFIX, RunFile, rounded, write
from elasticd.policies import make_policy
from elasticd.sim.rows import job_rows
from elasticd.sim.simulator import simulate
from elasticd.sim.swf import Trace, read_swf
from elasticd.sim.workload import MalleabilityRule, at_load, build_workload
from elasticd.table import render_table

METRICS = tuple(f.name for f in fields(WindowSummary))


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
    all measured (elasticd.metrics.measurement_window), which a user should know."""
    span = trace.jobs[-1].submit - trace.jobs[0].submit if trace.jobs else 0.0
    if warmup > 0 and span <= warmup:
        return (f"{trace.name}: its submissions span {span / 3600:.1f} h, shorter than the {warmup / 3600:.1f} h "
                "warm-up: every job is measured (no warm-up)")
    return None


def load_text(load: float) -> str:
    """1 -> '1', 0.5 -> '0.5': as keys, file names and headings say a load."""
    return f"{load:g}"


@dataclass(frozen=True, order=True)
class RunKey:
    """One run. At 0 % malleable every rule gives the same workload (no job is converted), so
    a grid makes those runs once, under the efficiency rule (GridPlan.key)."""

    trace: str
    policy: str
    fraction: float
    seed: int
    load: float = 1.0
    rule: str = "efficiency"

    def path(self) -> str:
        """Its per-job file, relative to the grid's folder for them."""
        return (f"{self.trace}/load-{load_text(self.load)}/{self.rule}/"
                f"{self.policy}-{round(100 * self.fraction)}-s{self.seed}{SUFFIX}")

    def record(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def of(cls, rec: dict[str, Any]) -> RunKey:
        return cls(rec["trace"], rec["policy"], float(rec["fraction"]), int(rec["seed"]), float(rec.get("load", 1.0)),
                   rec.get("rule", "efficiency"))


@dataclass(frozen=True)
class GridSettings:
    """What every run of a grid shares. `rule`'s own `rule` field is the key's at each run."""

    rule: MalleabilityRule = MalleabilityRule()  # noqa: RUF009 - frozen, shared safely
    warmup: float = 43200.0
    params: dict[str, dict[str, Any]] = field(default_factory=dict)  # by policy name
    out: Path | None = None  # where per-job files go (None: not written)


@dataclass(frozen=True)
class RunResult:
    key: RunKey
    metrics: WindowSummary
    wall_seconds: float  # the one thing that differs between two makings of a run
    file: str | None  # its per-job file, relative to GridSettings.out
    file_bytes: int = 0

    def record(self) -> dict[str, Any]:
        """One flat record per run (runs.jsonl, runs.csv)."""
        return {**self.key.record(), **asdict(self.metrics), "file": self.file, "file_bytes": self.file_bytes,
                "wall": self.wall_seconds}


def run_one(trace: Trace, key: RunKey, settings: GridSettings) -> RunResult:
    """The run of `key` on `trace` (already read: the caller's to keep between runs)."""
    t = time.perf_counter()
    scaled = at_load(trace, key.load)
    jobs = build_workload(scaled, key.fraction, key.seed, replace(settings.rule, rule=key.rule))
    outcomes = simulate(jobs, scaled.nodes, make_policy(key.policy, settings.params.get(key.policy)))
    rows = [rounded(r) for r in job_rows(jobs, outcomes)]
    window = measurement_window(rows, settings.warmup)
    summary = summarize_window(rows, scaled.nodes, *window)
    name, size = None, 0
    if settings.out is not None:
        name = key.path()
        size = write(settings.out / name, RunFile(rows, scaled.nodes, window))
    return RunResult(key, summary, time.perf_counter() - t, name, size)


# ---- dispatch: the one place runs are spread over processes ------------------------------------
_traces: dict[TraceSource, Trace] = {}


def run_from_source(source: TraceSource, key: RunKey, settings: GridSettings) -> RunResult:
    """run_one with the trace read from its source, once per process: what a dispatcher
    (this module's pool, or Dask's workers) calls for each key."""
    trace = _traces.get(source)
    if trace is None:
        trace = _traces[source] = source.load()
    return run_one(trace, key, settings)


def _init_worker() -> None:
    """A pool worker leaves Ctrl-C to the command (the terminal sends it to every process of
    the group): the command drops the runs not begun and waits for the ones running, and a
    worker interrupted in the middle of one printed a traceback."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def run_grid(
    sources: dict[str, TraceSource],
    keys: list[RunKey],
    settings: GridSettings,
    workers: int | None = None,
    progress: Callable[[int, int, RunResult], None] | None = None,
) -> list[RunResult]:
    """Every run, in parallel; results come back in the order of `keys`, `progress` is told
    of each as it finishes."""
    workers = max(1, min(workers or os.cpu_count() or 1, len(keys)))
    results: dict[RunKey, RunResult] = {}
    if workers == 1:
        for i, key in enumerate(keys, 1):
            results[key] = run_from_source(sources[key.trace], key, settings)
            if progress:
                progress(i, len(keys), results[key])
    else:
        pool = ProcessPoolExecutor(workers, initializer=_init_worker)
        try:
            futures = {pool.submit(run_from_source, sources[key.trace], key, settings): key for key in keys}
            for i, fut in enumerate(as_completed(futures), 1):
                results[futures[fut]] = fut.result()
                if progress:
                    progress(i, len(keys), results[futures[fut]])
        except BaseException:
            # Interrupted (Ctrl-C) or a run failed: the runs not begun are dropped, and only
            # the ones running are waited for. A `with` block's shutdown makes every queued run
            # first (hours, for an evaluation); so does one that does not wait, as the pool
            # it leaves behind is collected before it can drop them.
            pool.shutdown(wait=True, cancel_futures=True)
            raise
        pool.shutdown()
    return [results[k] for k in keys]


# ---- summaries of a grid ------------------------------------------------------------------------
def aggregate(results: list[RunResult]) -> Iterator[dict[str, Any]]:
    """One record per (policy, fraction): mean, median, IQR, min and max of every metric over
    seeds, and the mean turnaround's and bounded slowdown's paired change against rigid EASY
    (easy at 0 %, seed by seed) with its 95 % interval, when the grid has it."""
    groups: dict[tuple[str, float], list[RunResult]] = {}
    for r in results:
        groups.setdefault((r.key.policy, r.key.fraction), []).append(r)
    easy = {r.key.seed: r.metrics for r in groups.get(("easy", 0.0), [])}
    for (policy, fraction), rs in groups.items():
        rec: dict[str, Any] = {"policy": policy, "fraction": fraction, "seeds": len(rs)}
        for m in METRICS:
            values = [float(getattr(r.metrics, m)) for r in rs]
            mean, median, iqr = spread(values)
            rec[f"{m}_mean"], rec[f"{m}_median"], rec[f"{m}_iqr"] = mean, median, iqr
            rec[f"{m}_min"], rec[f"{m}_max"] = min(values), max(values)
        for m in ("mean_turnaround", "mean_bounded_slowdown"):
            p = vs_easy(rs, easy, m)
            if p is not None:
                rec[f"{m}_vs_easy"], rec[f"{m}_vs_easy_ci95"] = p.mean, p.half_width
                rec[f"{m}_vs_easy_seeds"] = p.n
        yield rec


def vs_easy(rs: list[RunResult], easy: dict[int, WindowSummary], metric: str) -> Paired | None:
    mine = {r.key.seed: float(getattr(r.metrics, metric)) for r in rs}
    theirs = {s: float(getattr(m, metric)) for s, m in easy.items()}
    return paired(mine, theirs)


def text_progress(stream: TextIO | None = None) -> Callable[[int, int, RunResult], None]:
    """A progress bar on a terminal, one line per run otherwise (logs stay readable). The
    stream is stderr as it is when called, not when this module was imported (a default
    bound at import kept a stream pytest had closed since)."""
    stream = stream if stream is not None else sys.stderr
    tty = stream.isatty()
    start = time.monotonic()

    def show(done: int, total: int, r: RunResult) -> None:
        width = 30
        bar = "#" * (width * done // total) + "." * (width - width * done // total)
        el = time.monotonic() - start
        k = r.key
        msg = (f"[{bar}] {done}/{total} {el:5.1f} s  {k.trace} {k.policy} {100 * k.fraction:.0f}% seed {k.seed}"
               + (f" load {load_text(k.load)}" if k.load != 1 else "") + (f" {k.rule}" if k.fraction else "")
               + f" ({r.wall_seconds:.2f} s)")
        if tty:
            stream.write("\r" + msg.ljust(110))
            if done == total:
                stream.write("\n")
        else:
            stream.write(msg + "\n")
        stream.flush()

    return show


def print_summary(summary: list[dict[str, Any]]) -> None:
    """Means over seeds; turnaround, wait and bounded slowdown with their [min..max] over the
    seeds, which differ by up to tens of times on one configuration; stretch; and against
    rigid EASY, the mean paired change with its 95 % interval ("~" marks one that includes 0:
    not told apart from the seeds' noise)."""
    head = ("POLICY", "MALL%", "SEEDS", "TURNAROUND(s) [min..max]", "WAIT(s) [min..max]", "UTIL%",
            "BSLD [min..max]", "STRETCH p95/max", ">2x%", "TIMEOUT%", "SHRINK/J", "EXPAND/J",
            "vs EASY 0%: TAT / BSLD [95% CI]")

    def spread_of(r: dict[str, Any], m: str, fmt: str) -> str:
        mean = format(r[f"{m}_mean"], fmt)
        if r["seeds"] < 2:
            return mean
        return f"{mean} [{format(r[f'{m}_min'], fmt)}..{format(r[f'{m}_max'], fmt)}]"

    def rel(r: dict[str, Any], m: str) -> str:
        if f"{m}_vs_easy" not in r:
            return "n/a"
        return Paired(r[f"{m}_vs_easy"], r[f"{m}_vs_easy_ci95"], r[f"{m}_vs_easy_seeds"]).text()

    rows = [head]
    for r in summary:
        against = "" if (r["policy"], r["fraction"]) == ("easy", 0.0) else \
            f"{rel(r, 'mean_turnaround')} / {rel(r, 'mean_bounded_slowdown')}"
        rows.append((r["policy"], f"{100 * r['fraction']:.0f}", str(r["seeds"]), spread_of(r, "mean_turnaround", ".0f"),
                     spread_of(r, "mean_wait", ".0f"), f"{100 * r['utilization_mean']:.1f}",
                     spread_of(r, "mean_bounded_slowdown", ".2f"),
                     f"{r['stretch_p95_mean']:.2f}/{r['stretch_max_mean']:.1f}", f"{100 * r['stretched_mean']:.1f}",
                     f"{100 * r['timeouts_mean']:.2f}", f"{r['shrinks_per_job_mean']:.2f}",
                     f"{r['expands_per_job_mean']:.2f}", against))
    print(render_table(rows[0], rows[1:]))
