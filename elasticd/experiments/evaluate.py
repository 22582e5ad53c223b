"""`elasticd evaluate`: every policy on every trace, at every malleable fraction, over seeds, in
one command that writes the report, the plots, the CSVs and the README's tables.

Why one command: a figure in the README is a claim; it must be regenerated, with its spread
over seeds, by anyone with the repository. Runs are appended to `runs.jsonl` in the output
folder as they finish, so a long evaluation can be stopped and resumed (`--resume`) and a
smaller one (fewer traces, policies, seeds, or `--max-jobs`) can be run first.

A policy at 0 % malleable schedules exactly as its rigid base does (tests/test_policy_baselines),
so each base's 0 % run stands for every policy built on it. Every comparison is with rigid
EASY: the same trace at 0 % (the same schedule whatever the seed).
"""

from __future__ import annotations

import csv
import json
import math
import statistics
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from elasticd.errors import ElasticError, MissingExtra
from elasticd.policies.registry import REGISTRY, entry
from elasticd.sim.grid import METRICS, RunRow, RunSpec, TraceSource, run_grid
from elasticd.sim.workload import MalleabilityRule

# The seed policies (every published one that schedules rigid, moldable and malleable jobs;
# `fit` schedules evolving jobs' declared evolutions and has none here) and the bases.
SEED_POLICIES = ("malleable", "min", "avg", "pref", "keeppref", "mebf-basic-handoff", "mebf-basic-spare",
                 "mebf-basic-intensive", "sd")
DEFAULT_POLICIES = ("easy", "conservative", *SEED_POLICIES, "payoff")  # payoff: elastic's own
DEFAULT_FRACTIONS = tuple(f / 100 for f in range(0, 101, 10))
REPORTED = ("mean_turnaround", "mean_wait", "mean_bounded_slowdown", "utilization", "timeouts",
            "shrinks_per_job", "expands_per_job")

# What the seed papers report, to read our curves beside (their systems, their conversions).
SEED_CLAIMS = (
    ("Min / Avg / Pref / KeepPref (real workloads: Cori, Theta, Eagle)",
     ("best strategy per system vs rigid EASY: turnaround -37 to -67 %, wait -73 to -99 %, utilization +5 to "
     "+52 %; gains 'substantial even at 20 % malleable'")),
    ("SD-Policy (Slurm, up to 198K jobs on 5,040 nodes)",
     "vs static backfill: makespan -7 %, response time -50 %, slowdown -70 % at most"),
    ("MEBF (KIT workload, 40-100 % malleable)",
     ("all MEBF variants better than EASY backfilling on wait, turnaround and utilization; Intensive best at "
     "low reconfiguration cost, Handoff at full cost")),
)


@dataclass(frozen=True)
class EvalRun:
    trace: str
    policy: str
    fraction: float
    seed: int


def plan(traces: list[str], policies: list[str], fractions: list[float], seeds: int) -> list[EvalRun]:
    """The runs to make: at 0 % only each base once (its schedule stands for its policies)."""
    runs: list[EvalRun] = []
    for t in traces:
        for p in policies:
            for f in fractions:
                if f == 0 and _base(p) != p and _base(p) in policies:
                    continue
                runs.extend(EvalRun(t, p, f, s) for s in range(1, seeds + 1))
    return runs


def _base(policy: str) -> str:
    e = entry(policy)
    return e.base if e.base in REGISTRY else e.name


@dataclass
class Results:
    """Every finished run, by (trace, policy, fraction, seed): read back from runs.jsonl."""

    rows: dict[EvalRun, dict[str, Any]] = field(default_factory=dict)

    @classmethod
    def load(cls, path: Path) -> Results:
        out = cls()
        if path.exists():
            for line in path.read_text().splitlines():
                if line.strip():
                    r = json.loads(line)
                    out.rows[EvalRun(r["trace"], r["policy"], r["fraction"], r["seed"])] = r
        return out

    def of(self, trace: str, policy: str, fraction: float) -> list[dict[str, Any]]:
        """The seeds' rows of a cell; at 0 % a policy's cell is its base's."""
        if fraction == 0 and _base(policy) != policy:
            policy = _base(policy)
        return [r for k, r in self.rows.items() if k.trace == trace and k.policy == policy and k.fraction == fraction]


SETTINGS_FILE = "settings.json"


class SettingsChanged(ElasticError):
    """--resume on runs made with other settings: the report would mix two experiments."""

    code = "settings_changed"


def refuse_to_replace(out: Path) -> None:
    """A run without --resume starts afresh: refused where out/runs.jsonl holds runs (hours of
    CPU for the README's evaluation), unless --fresh says so."""
    log = out / "runs.jsonl"
    try:
        held = sum(1 for line in log.read_text().splitlines() if line.strip())
    except FileNotFoundError:
        return
    except OSError as exc:
        raise ElasticError(f"{log}: cannot read it: {exc.strerror}") from None
    if held:
        raise ElasticError(f"{out} already holds {held} run{'s' if held != 1 else ''} ({log}): --resume keeps them and "
                           "makes only the runs missing; --fresh replaces them (or delete the folder, or give "
                           "another --out)")


def keep_settings(out: Path, settings: dict[str, Any], resume: bool) -> None:
    """Start out/runs.jsonl afresh, or (resume) keep it only if its runs were made with the
    same settings: the same reading of each trace (machine size, units, jobs kept), the same
    warm-up. A trace not run before may be added."""
    log, saved = out / "runs.jsonl", out / SETTINGS_FILE
    if not resume:
        log.unlink(missing_ok=True)
    elif log.exists() and saved.exists():
        before = json.loads(saved.read_text())
        changed = [f"warm-up {before.get('warmup')} s, now {settings['warmup']} s"] \
            if before.get("warmup") != settings["warmup"] else []
        for name, now in settings["traces"].items():
            was = before.get("traces", {}).get(name)
            if was is not None and was != now:
                diffs = {key: value for key, value in now.items() if was.get(key) != value}
                if len(diffs) > 1:
                    # The reader's line only restates the option that changed (a whole
                    # paragraph per trace, in which `max_jobs 3000, now 2000` was lost).
                    diffs.pop("reading", None)
                changed.extend(f"{name} {key} {was.get(key)!r}, now {value!r}" for key, value in diffs.items())
        if changed:
            raise SettingsChanged(f"{log}: its runs were made with other settings ({'; '.join(changed)}): run "
                                  "with --fresh instead of --resume to start afresh, or give another --out")
        settings = {**settings, "traces": {**before.get("traces", {}), **settings["traces"]}}
    out.mkdir(parents=True, exist_ok=True)
    saved.write_text(json.dumps(settings, indent=1) + "\n")


def run(sources: dict[str, TraceSource], runs: list[EvalRun], out: Path, rule: MalleabilityRule,
        warmup: float, workers: int | None, progress: Any = None) -> Results:
    """Make every run not already in out/runs.jsonl, appending each as it finishes."""
    out.mkdir(parents=True, exist_ok=True)
    log = out / "runs.jsonl"
    done = Results.load(log)
    for trace, source in sources.items():
        todo = [r for r in runs if r.trace == trace and r not in done.rows]
        if not todo:
            continue
        with log.open("a") as f:

            def keep(i: int, n: int, row: RunRow, trace: str = trace, f: Any = f) -> None:
                rec = {"trace": trace, "policy": row.policy, "fraction": row.fraction, "seed": row.seed,
                       "wall": row.wall_seconds, **vars(row.metrics)}
                f.write(json.dumps(rec) + "\n")
                f.flush()
                if progress is not None:
                    progress(i, n, row)

            run_grid(source, [RunSpec(r.policy, r.fraction, r.seed) for r in todo], rule, warmup, workers, keep)
    return Results.load(log)


# ---- summaries -------------------------------------------------------------------------------
@dataclass(frozen=True)
class Cell:
    policy: str
    fraction: float
    seeds: int
    stats: dict[str, tuple[float, float, float, float]]  # metric -> (mean, min, max, 95 % CI half-width)

    def mean(self, metric: str) -> float:
        return self.stats[metric][0]


def _stats(values: list[float]) -> tuple[float, float, float, float]:
    mean = statistics.fmean(values)
    ci = 1.96 * statistics.stdev(values) / math.sqrt(len(values)) if len(values) > 1 else 0.0
    return mean, min(values), max(values), ci


def cells(results: Results, trace: str, policies: Iterable[str], fractions: Iterable[float]) -> Iterator[Cell]:
    for p in policies:
        for f in fractions:
            rows = results.of(trace, p, f)
            if rows:
                stats = {m: _stats([float(r[m]) for r in rows]) for m in METRICS}
                stats["resizes_per_job"] = _stats([float(r["shrinks_per_job"]) + float(r["expands_per_job"]) for r in rows])
                yield Cell(p, f, len(rows), stats)


def why_worse(cell: Cell, easy: Cell) -> str:
    """One line saying what made a cell worse than rigid EASY, from its own figures."""
    d_wait = cell.mean("mean_wait") - easy.mean("mean_wait")
    d_run = (cell.mean("mean_turnaround") - cell.mean("mean_wait")) - (
        easy.mean("mean_turnaround") - easy.mean("mean_wait"))
    parts = []
    if cell.mean("timeouts") > easy.mean("timeouts"):
        parts.append(f"{100 * cell.mean('timeouts'):.2f} % of jobs hit their time limit")
    if d_wait > 0:
        grown = cell.mean("expands_per_job")
        parts.append(f"jobs waited {d_wait:+.0f} s longer" + (
            f" (grown jobs, {grown:.2f} grows per job, held nodes that later arrivals waited for)" if grown > 0.05
            else ""))
    if d_run > 0:
        shrunk = cell.mean("shrinks_per_job")
        parts.append(f"jobs ran {d_run:+.0f} s longer" + (
            f" (started below their logged size or shrunk, {shrunk:.2f} shrinks per job)" if shrunk > 0.05
            else " (started below their logged size)"))
    base = _base(cell.policy)
    if base != "easy":
        parts.append(f"its rigid base is {base}, not EASY")
    return "; ".join(parts) or "within the seeds' spread"


def write_trace_outputs(out: Path, trace: str, results: Results, policies: list[str],
                        fractions: list[float]) -> list[Cell]:
    cs = list(cells(results, trace, policies, fractions))
    folder = out / trace
    folder.mkdir(parents=True, exist_ok=True)
    with (folder / "summary.csv").open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["policy", "malleable_pct", "seeds", *[f"{m}_{s}" for m in METRICS for s in ("mean", "min", "max", "ci95")]])
        for c in cs:
            w.writerow([c.policy, round(100 * c.fraction), c.seeds, *[v for m in METRICS for v in c.stats[m]]])
    try:
        _plot(folder / "turnaround.png", trace, cs, policies)
    except MissingExtra as exc:
        print(f"elasticd evaluate: no plot for {trace}: {exc}", file=sys.stderr)
    return cs


def _plot(path: Path, trace: str, cs: list[Cell], policies: list[str]) -> None:
    from elasticd.sim.plots import plot_curves

    series = {}
    for p in policies:
        pts = sorted((c for c in cs if c.policy == p), key=lambda c: c.fraction)
        series[p] = [(100 * c.fraction, *c.stats["mean_turnaround"][:3]) for c in pts]
    bsld = {}
    for p in policies:
        pts = sorted((c for c in cs if c.policy == p), key=lambda c: c.fraction)
        bsld[p] = [(100 * c.fraction, *c.stats["mean_bounded_slowdown"][:3]) for c in pts]
    plot_curves({"mean turnaround (s)": series, "mean bounded slowdown": bsld}, path,
                f"{trace}: mean over seeds, band = min..max over seeds")


def report(out: Path, traces: list[str], results: Results, policies: list[str], fractions: list[float],
           meta: dict[str, Any]) -> str:
    """REPORT.md: per trace, each policy's curve beside rigid EASY, and why where it is worse."""
    lines = ["# Policies on real traces", "",
             f"Regenerated by `{meta['command']}`. {meta['description']}", "",
             ("Each cell: mean over seeds [min..max]; change against rigid EASY (0 % malleable, the same "
             "schedule for every seed). Metrics exclude the warm-up and the drain-down."), "",
             "## What the seed papers report", ""]
    lines += [f"- **{who}**: {what}" for who, what in SEED_CLAIMS]
    for trace in traces:
        cs = write_trace_outputs(out, trace, results, policies, fractions)
        easy = next((c for c in cs if c.policy == "easy" and c.fraction == 0), None)
        if easy is None:
            continue
        lines += ["", f"## {trace}", ""]
        if trace in meta.get("readings", {}):  # what the simulation is made of, as the reader says it
            lines += [f"Read as: {meta['readings'][trace]}", ""]
        lines += [f"![{trace}]({trace}/turnaround.png)", "",
                  ("| policy | malleable | turnaround (s) | vs EASY | bounded slowdown | vs EASY | wait (s) | "
                  "utilization | timeouts | resizes/job | seeds |"), "|---|---|---|---|---|---|---|---|---|---|---|"]
        worse: list[str] = []
        for c in cs:
            tat, bsld = c.stats["mean_turnaround"], c.stats["mean_bounded_slowdown"]
            d_tat = 100 * (tat[0] / easy.mean("mean_turnaround") - 1)
            d_bsld = 100 * (bsld[0] / easy.mean("mean_bounded_slowdown") - 1)
            wait, util, tout = c.stats["mean_wait"], c.stats["utilization"], c.stats["timeouts"]
            resizes = c.stats["resizes_per_job"]
            lines.append(
                f"| {c.policy} | {100 * c.fraction:.0f} % | {tat[0]:.0f} [{tat[1]:.0f}..{tat[2]:.0f}] | {d_tat:+.1f} % | "
                f"{bsld[0]:.2f} [{bsld[1]:.2f}..{bsld[2]:.2f}] | {d_bsld:+.1f} % | "
                f"{wait[0]:.0f} [{wait[1]:.0f}..{wait[2]:.0f}] | "
                f"{100 * util[0]:.1f} [{100 * util[1]:.1f}..{100 * util[2]:.1f}] % | "
                f"{100 * tout[0]:.2f} [{100 * tout[1]:.2f}..{100 * tout[2]:.2f}] % | "
                f"{resizes[0]:.2f} [{resizes[1]:.2f}..{resizes[2]:.2f}] | {c.seeds} |")
            if c.fraction > 0 and (d_tat > 0.05 or d_bsld > 0.05):
                worse.append(f"- {c.policy} at {100 * c.fraction:.0f} %: turnaround {d_tat:+.1f} %, bounded "
                             f"slowdown {d_bsld:+.1f} %: {why_worse(c, easy)}.")
        if worse:
            lines += ["", "Worse than rigid EASY:", "", *worse]
        lines += target_lines(cs, easy)
    text = "\n".join(lines) + "\n"
    (out / "REPORT.md").write_text(text)
    return text


# What elastic's own policy is held to (issue 24), per trace and fraction, mean over seeds.
TARGET_POLICY = "payoff"
BETTER_THAN_BEST_SEED = 0.9  # bounded slowdown at most this times the best seed policy's ...
BETTER_AT = (0.5, 1.0)  # ... at these fractions
STABLE = 1.5  # the worst seed's turnaround at most this times the mean's


def target_lines(cs: list[Cell], easy: Cell) -> list[str]:
    """The target policy's cells against its targets, each miss said with its figures; a
    target that no schedule could meet (bounded slowdown is never below 1) said so."""
    mine = sorted((c for c in cs if c.policy == TARGET_POLICY), key=lambda c: c.fraction)
    if not mine:
        return []
    rows = [f"### {TARGET_POLICY} against its targets", "",
            ("Never worse than rigid EASY (mean turnaround and bounded slowdown), at "
             f"{' and '.join(f'{100 * f:.0f} %' for f in BETTER_AT)} a bounded slowdown at least "
             f"{100 * (1 - BETTER_THAN_BEST_SEED):.0f} % below the best seed policy's, the worst seed's turnaround "
             f"within {STABLE:g}x of the mean."), "",
            "| malleable | turnaround vs EASY | bounded slowdown vs EASY | vs best seed policy | worst seed / mean | met |",
            "|---|---|---|---|---|---|"]
    missed = met = 0
    for c in mine:
        tat, bsld = c.mean("mean_turnaround"), c.mean("mean_bounded_slowdown")
        e_tat, e_bsld = easy.mean("mean_turnaround"), easy.mean("mean_bounded_slowdown")
        ok = [tat <= e_tat * (1 + 1e-9), bsld <= e_bsld * (1 + 1e-9)]
        vs_best = "—"
        if c.fraction in BETTER_AT:
            seeds = [x for x in cs if x.fraction == c.fraction and x.policy in SEED_POLICIES]
            if seeds:
                best = min(seeds, key=lambda x: x.mean("mean_bounded_slowdown"))
                theirs = best.mean("mean_bounded_slowdown")
                goal = BETTER_THAN_BEST_SEED * theirs
                vs_best = f"{100 * (bsld / theirs - 1):+.1f} % ({best.policy} {theirs:.3f})"
                if goal < 1.0:
                    vs_best += ": unattainable, below 1"
                ok.append(bsld <= goal)
        worst = c.stats["mean_turnaround"][2] / tat
        ok.append(worst <= STABLE)
        met += sum(ok)
        missed += len(ok) - sum(ok)
        rows.append(f"| {100 * c.fraction:.0f} % | {100 * (tat / e_tat - 1):+.1f} % | {100 * (bsld / e_bsld - 1):+.1f} % | "
                    f"{vs_best} | {worst:.2f} | {'yes' if all(ok) else 'no'} |")
    rows += ["", f"{met} of {met + missed} target checks met on this trace."]
    return ["", *rows]


README_FRACTIONS = (0.2, 0.5, 0.8, 1.0)  # the README's rows; REPORT.md has every fraction run


def readme_table(results: Results, traces: list[str], policies: list[str], fractions: list[float]) -> str:
    """The README's summary: per trace and fraction, the best seed policy by mean bounded
    slowdown beside elastic's own `payoff`, both against rigid EASY, with the seeds' spread.

    Only README_FRACTIONS of those run (all of them if none is): the whole curve, 0 to 100 %
    by tens, is 60 rows, which a summary should point to rather than repeat."""
    shown = [f for f in fractions if f in README_FRACTIONS] or fractions
    lines = [("| trace | malleable | best seed policy | its turnaround vs EASY [seeds] | its bounded slowdown vs EASY | "
              "payoff turnaround vs EASY [seeds] | payoff bounded slowdown vs EASY |"),
             "|---|---|---|---|---|---|---|"]
    for trace in traces:
        cs = list(cells(results, trace, policies, fractions))
        easy = next((c for c in cs if c.policy == "easy" and c.fraction == 0), None)
        if easy is None:
            continue
        for f in shown:
            if f == 0:
                continue
            seeds = [c for c in cs if c.fraction == f and c.policy in SEED_POLICIES]
            pay = next((c for c in cs if c.fraction == f and c.policy == "payoff"), None)
            if not seeds:
                continue
            best = min(seeds, key=lambda c: c.mean("mean_bounded_slowdown"))
            theirs = f"{_vs_tat(pay, easy)} | {_vs_bsld(pay, easy)}" if pay is not None else "— | —"
            lines.append(f"| {trace} | {100 * f:.0f} % | {best.policy} | {_vs_tat(best, easy)} | "
                         f"{_vs_bsld(best, easy)} | {theirs} |")
    return "\n".join(lines) + "\n"


def _vs_tat(c: Cell, easy: Cell) -> str:
    """Mean turnaround against rigid EASY's, with the seeds' range."""
    base = easy.mean("mean_turnaround")
    mean, lo, hi = c.stats["mean_turnaround"][:3]
    return f"{100 * (mean / base - 1):+.1f} % [{100 * (lo / base - 1):+.0f}..{100 * (hi / base - 1):+.0f}]"


def _vs_bsld(c: Cell, easy: Cell) -> str:
    return f"{100 * (c.mean('mean_bounded_slowdown') / easy.mean('mean_bounded_slowdown') - 1):+.1f} %"


def readme_section(readme: Path, marker: str) -> str:
    """The README's text, if it has the section to regenerate. Called before a long run too:
    an evaluation of hours must not end with a README it cannot write."""
    try:
        text = readme.read_text()
    except OSError as exc:
        raise ElasticError(f"--readme {readme}: cannot read it: {exc.strerror}") from None
    begin, end = f"<!-- BEGIN {marker} -->", f"<!-- END {marker} -->"
    if begin not in text or end not in text:
        raise ElasticError(f"{readme}: no {begin} ... {end} section to regenerate")
    return text


def update_readme(readme: Path, marker: str, body: str) -> None:
    """Replace what stands between <!-- BEGIN marker --> and <!-- END marker -->."""
    text = readme_section(readme, marker)
    begin, end = f"<!-- BEGIN {marker} -->", f"<!-- END {marker} -->"
    head, rest = text.split(begin, 1)
    _, tail = rest.split(end, 1)
    try:
        readme.write_text(f"{head}{begin}\n{body}{end}{tail}")
    except OSError as exc:
        raise ElasticError(f"--readme {readme}: cannot write it: {exc.strerror}") from None
