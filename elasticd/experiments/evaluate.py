"""`elasticd evaluate`: every policy on every trace, at every malleable fraction, load and
conversion rule, over seeds, in one command that writes a per-job file per run, the report,
the plots, the CSVs and the README's table (elasticd.experiments.evaluation_report).

Why one command: a figure in the README is a claim; it must be regenerated, with its spread
over seeds, by anyone with the repository. Runs are appended to `runs.jsonl` in the output
folder as they finish, each with the per-job file it wrote (`jobs/...`, elasticd.perjob), so a
long evaluation can be stopped and resumed (`--resume`) and a smaller one (fewer traces,
policies, seeds, or `--max-jobs`) can be run first.

A policy at 0 % malleable schedules exactly as its rigid base does (tests/test_policy_baselines),
so each base's 0 % run stands for every policy built on it that was run with it; a policy whose
base was not run has its own 0 % run. At 0 % no job is converted, so every rule gives the same
workload: those runs are made once, under the efficiency rule. Every comparison is with rigid
EASY: the same trace and load at 0 %, seed by seed.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from elasticd.errors import ElasticError
from elasticd.intervals import Paired, paired
from elasticd.policies.registry import REGISTRY, entry
from elasticd.sim.grid import METRICS, GridSettings, RunKey, RunResult, TraceSource, run_grid

# The seed policies (every published one that schedules rigid, moldable and malleable jobs;
# `fit` schedules evolving jobs' declared evolutions and has none here) and the bases.
SEED_POLICIES = ("malleable", "min", "avg", "pref", "keeppref", "mebf-basic-handoff", "mebf-basic-spare",
                 "mebf-basic-intensive", "sd")
DEFAULT_POLICIES = ("easy", *SEED_POLICIES, "payoff")  # payoff: elastic's own
DEFAULT_FRACTIONS = tuple(f / 100 for f in range(0, 101, 10))
# How the metrics are defined (elasticd.metrics): runs made under another definition are not
# mixed with these on --resume.
METRICS_VERSION = 2
JOBS_DIR = "jobs"  # per-job files, under the evaluation's folder


def _base(policy: str) -> str:
    e = entry(policy)
    return e.base if e.base in REGISTRY else e.name


def plan(traces: list[str], policies: list[str], fractions: list[float], seeds: int,
         loads: Iterable[float] = (1.0,), rules: Iterable[str] = ("efficiency",)) -> list[RunKey]:
    """The runs to make (module docstring: which run stands for which cell at 0 %)."""
    runs: list[RunKey] = []
    loads, rules = list(loads), list(rules)
    for t in traces:
        for load in loads:
            for f in fractions:
                for rule in (["efficiency"] if f == 0 else rules):
                    for p in policies:
                        if f == 0 and _base(p) != p and _base(p) in policies:
                            continue
                        runs.extend(RunKey(t, p, f, s, load, rule) for s in range(1, seeds + 1))
    return runs


@dataclass(frozen=True, order=True)
class Setting:
    """What a trace's runs are made under, beside the policy, fraction and seed."""

    load: float = 1.0
    rule: str = "efficiency"

    def text(self) -> str:
        return f"load x{self.load:g}, {self.rule} rule"


@dataclass
class Results:
    """Every finished run's record (runs.jsonl), by key."""

    rows: dict[RunKey, dict[str, Any]] = field(default_factory=dict)

    @classmethod
    def load(cls, path: Path) -> Results:
        out = cls()
        if path.exists():
            for line in path.read_text().splitlines():
                if line.strip():
                    r = json.loads(line)
                    out.rows[RunKey.of(r)] = r
        return out

    def of(self, trace: str, policy: str, fraction: float, setting: Setting = Setting()) -> list[dict[str, Any]]:
        """The seeds' records of a cell. At 0 % the rule changes nothing (module docstring), and
        a policy's cell is its own runs, else its base's (a base stands for it when both run)."""
        rule = "efficiency" if fraction == 0 else setting.rule

        def rows(p: str) -> list[dict[str, Any]]:
            return [r for k, r in self.rows.items() if k.trace == trace and k.policy == p and k.fraction == fraction
                    and k.load == setting.load and k.rule == rule]

        own = rows(policy)
        if own or fraction != 0 or _base(policy) == policy:
            return own
        return rows(_base(policy))

    def settings_of(self, trace: str) -> list[Setting]:
        """The settings a trace was run under, own load first, the efficiency rule first."""
        found = {Setting(k.load, k.rule) for k in self.rows if k.trace == trace and k.fraction > 0}
        found |= {Setting(k.load) for k in self.rows if k.trace == trace}
        return sorted(found, key=lambda s: (s.load != 1.0, -s.load, s.rule != "efficiency", s.rule))


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
    """Start out/runs.jsonl (and its per-job files) afresh, or (resume) keep it only if its runs
    were made with the same settings: the same metric definitions, the same reading of each
    trace (machine size, units, jobs kept), the same warm-up and conversion parameters. A
    trace, load, rule, policy, fraction or seed not run before may be added."""
    log, saved = out / "runs.jsonl", out / SETTINGS_FILE
    settings = {"metrics_version": METRICS_VERSION, **settings}
    if not resume:
        log.unlink(missing_ok=True)
        _remove_per_job_files(out / JOBS_DIR)
    elif log.exists() and saved.exists():
        before = json.loads(saved.read_text())
        changed = []
        if before.get("metrics_version") != METRICS_VERSION:
            changed.append("the metrics' definitions (slowdown is now over each job's static run, elasticd.metrics)")
        for key in ("warmup", "conversion"):
            if key in settings and before.get(key) != settings[key]:
                changed.append(f"{key} {before.get(key)!r}, now {settings[key]!r}")
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


def _remove_per_job_files(folder: Path) -> None:
    """A fresh evaluation's per-job files are its runs' only: an earlier run's left there
    would read as this one's."""
    if not folder.is_dir():
        return
    for f in sorted(folder.rglob("*"), reverse=True):
        if f.is_dir():
            f.rmdir()
        else:
            f.unlink()
    folder.rmdir()


def run(sources: dict[str, TraceSource], runs: list[RunKey], out: Path, settings: GridSettings,
        workers: int | None, progress: Callable[[int, int, RunResult], None] | None = None) -> Results:
    """Make every run not already in out/runs.jsonl, appending each as it finishes; each
    writes its per-job file under out/jobs."""
    out.mkdir(parents=True, exist_ok=True)
    log = out / "runs.jsonl"
    done = Results.load(log)
    todo = [r for r in runs if r not in done.rows]
    if todo:
        with log.open("a") as f:

            def keep(i: int, n: int, result: RunResult) -> None:
                f.write(json.dumps(result.record()) + "\n")
                f.flush()
                if progress is not None:
                    progress(i, n, result)

            run_grid(sources, todo, GridSettings(settings.rule, settings.warmup, settings.params, out / JOBS_DIR),
                     workers, keep)
    return Results.load(log)


# ---- cells: a policy at a fraction, over its seeds ---------------------------------------------
@dataclass(frozen=True)
class Cell:
    policy: str
    fraction: float
    setting: Setting
    seeds: int
    stats: dict[str, tuple[float, float, float]]  # metric -> (mean, min, max) over seeds
    by_seed: dict[str, dict[int, float]]  # metric -> seed -> value
    files: dict[int, str] = field(default_factory=dict)  # seed -> its per-job file (under jobs/)

    def mean(self, metric: str) -> float:
        return self.stats[metric][0]

    def against(self, other: Cell, metric: str) -> Paired | None:
        """This cell's paired change of `metric` against another's, seed by seed."""
        return paired(self.by_seed[metric], other.by_seed[metric])


def cells(results: Results, trace: str, policies: Iterable[str], fractions: Iterable[float],
          setting: Setting = Setting()) -> Iterator[Cell]:
    for p in policies:
        for f in fractions:
            rows = results.of(trace, p, f, setting)
            if not rows:
                continue
            by_seed = {m: {int(r["seed"]): float(r[m]) for r in rows} for m in METRICS}
            by_seed["resizes_per_job"] = {int(r["seed"]): float(r["shrinks_per_job"]) + float(r["expands_per_job"])
                                          for r in rows}
            stats = {m: (statistics.fmean(v.values()), min(v.values()), max(v.values())) for m, v in by_seed.items()}
            files = {int(r["seed"]): r["file"] for r in rows if r.get("file")}
            yield Cell(p, f, setting, len(rows), stats, by_seed, files)


def rigid_easy(cs: Iterable[Cell]) -> Cell | None:
    return next((c for c in cs if c.policy == "easy" and c.fraction == 0), None)


def best_seed_policy(cs: list[Cell], fraction: float, metric: str = "mean_bounded_slowdown") -> tuple[Cell | None, list[str]]:
    """The seed policy with the lowest mean of `metric` at `fraction`, and the seed policies
    not run there: a best among some of them only is no best (None then)."""
    here = [c for c in cs if c.fraction == fraction and c.policy in SEED_POLICIES]
    missing = [p for p in SEED_POLICIES if p not in {c.policy for c in here}]
    if missing or not here:
        return None, missing
    return min(here, key=lambda c: c.mean(metric)), []


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
