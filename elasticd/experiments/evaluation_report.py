"""What `elasticd evaluate` writes from its runs: REPORT.md, a summary.csv and a plot per trace,
and the README's table. Every figure is a run's summary (runs.jsonl), itself computed from the
run's per-job file as written; every "worse than rigid EASY" line is computed from the per-job
files (elasticd.experiments.evidence).
"""

from __future__ import annotations

import csv
import sys
from pathlib import Path
from typing import Any

from elasticd.errors import MissingExtra
from elasticd.experiments.evaluate import (
    JOBS_DIR,
    SEED_POLICIES,
    Cell,
    Results,
    Setting,
    _base,
    best_seed_policy,
    cells,
    rigid_easy,
)
from elasticd.experiments.evidence import why_worse
from elasticd.intervals import Paired
from elasticd.sim.grid import METRICS

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

HOW_TO_READ = (
    "Each cell: mean over seeds [min..max]. **vs EASY**: the mean of the per-seed changes against rigid EASY "
    "(EASY at 0 % malleable, the same trace, load and seed: the same jobs at the same times), with its 95 % "
    "interval (Student's t over the seeds); **n.d.** marks an interval that includes 0: not different from rigid "
    "EASY beyond the seeds' noise (an interval past -100 % only says the seeds spread widely). **Bounded slowdown** is over each job's *static run* (its logged run at its "
    "logged size: SD-Policy's and MEBF's definition), tau = 10 s, so a job a shrink stretched is slowed down by "
    "it. **Stretch** is a job's run over its static run (mean / 95th percentile / max over the measured jobs); "
    "**> 2x** the share of jobs whose run was over twice their static run; **reconfig** the node-hours jobs spent "
    "reconfiguring (their cost model's seconds, times the nodes they held) and their share of the node-hours the "
    "measured jobs used. Metrics exclude the warm-up and the drain-down. Every run's per-job file is in "
    f"`{JOBS_DIR}/` (columns: docs/per-job-files.md); every table here is computed from them.")


def _pct(p: Paired | None) -> str:
    return "—" if p is None else p.text()


def _range(c: Cell, m: str, fmt: str, scale: float = 1.0) -> str:
    mean, lo, hi = c.stats[m]
    if c.seeds < 2:
        return format(scale * mean, fmt)
    return f"{format(scale * mean, fmt)} [{format(scale * lo, fmt)}..{format(scale * hi, fmt)}]"


def _table(cs: list[Cell], easy: Cell) -> list[str]:
    lines = [("| policy | malleable | turnaround (s) | vs EASY | bounded slowdown | vs EASY | wait (s) | utilization | "
              "stretch mean / p95 / max | > 2x | reconfig node-h (share) | timeouts | resizes/job | seeds |"),
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for c in cs:
        first = c is easy
        lines.append(
            f"| {c.policy} | {100 * c.fraction:.0f} % | {_range(c, 'mean_turnaround', ',.0f')} | "
            f"{'—' if first else _pct(c.against(easy, 'mean_turnaround'))} | "
            f"{_range(c, 'mean_bounded_slowdown', '.2f')} | "
            f"{'—' if first else _pct(c.against(easy, 'mean_bounded_slowdown'))} | {_range(c, 'mean_wait', ',.0f')} | "
            f"{100 * c.mean('utilization'):.1f} % | {c.mean('stretch_mean'):.2f} / {c.mean('stretch_p95'):.2f} / "
            f"{c.mean('stretch_max'):.1f} | {100 * c.mean('stretched'):.1f} % | "
            f"{c.mean('reconfig_node_seconds') / 3600:,.0f} ({100 * c.mean('reconfig_share'):.2f} %) | "
            f"{100 * c.mean('timeouts'):.2f} % | {c.mean('resizes_per_job'):.2f} | {c.seeds} |")
    return lines


def _worse_lines(out: Path, cs: list[Cell], easy: Cell) -> list[str]:
    jobs = out / JOBS_DIR
    lines = []
    easy_files = {s: jobs / f for s, f in easy.files.items()}
    for c in cs:
        if c.fraction == 0 and c.policy == easy.policy:
            continue
        tat, bsld = c.against(easy, "mean_turnaround"), c.against(easy, "mean_bounded_slowdown")
        worse = [(name, p) for name, p in (("turnaround", tat), ("bounded slowdown", bsld)) if p is not None and p.mean > 0]
        if not worse:
            continue
        said = ", ".join(f"{name} {p.text()}" for name, p in worse)
        base = "" if c.fraction or _base(c.policy) == c.policy else f" (its rigid base, {_base(c.policy)})"
        evidence = why_worse({s: jobs / f for s, f in c.files.items()}, easy_files)
        lines.append(f"- **{c.policy} at {100 * c.fraction:.0f} %**{base}: {said}; evidence: {evidence}.")
    return lines


def _scaling_lines(results: Results, trace: str, policies: list[str], fractions: list[float],
                   settings: list[Setting]) -> list[str]:
    """Efficiency rule beside the downward one, per load: what assumed scaling beyond the
    logged sizes gives."""
    out: list[str] = []
    for load in sorted({s.load for s in settings}, key=lambda x: (x != 1.0, -x)):
        eff, down = Setting(load, "efficiency"), Setting(load, "downward")
        if eff not in settings or down not in settings:
            continue
        ce = {(c.policy, c.fraction): c for c in cells(results, trace, policies, fractions, eff)}
        cd = {(c.policy, c.fraction): c for c in cells(results, trace, policies, fractions, down)}
        easy = rigid_easy(ce.values())
        if easy is None:
            continue
        out += ["", f"#### What scaling up gives, load x{load:g}: the efficiency rule against the downward one", "",
                ("The same jobs converted with no job given more nodes than it was logged with (downward) and as the "
                 "seeds convert them (efficiency: up to the size where efficiency falls to 0.5). Changes against "
                 "rigid EASY; the difference between the two columns is what comes from assumed scaling."), "",
                ("| policy | malleable | turnaround vs EASY: efficiency | downward | bounded slowdown vs EASY: "
                 "efficiency | downward | stretch p95: efficiency | downward |"), "|---|---|---|---|---|---|---|---|"]
        for (p, f), c in ce.items():
            d = cd.get((p, f))
            if f == 0 or d is None:
                continue
            out.append(f"| {p} | {100 * f:.0f} % | {_pct(c.against(easy, 'mean_turnaround'))} | "
                       f"{_pct(d.against(easy, 'mean_turnaround'))} | {_pct(c.against(easy, 'mean_bounded_slowdown'))} | "
                       f"{_pct(d.against(easy, 'mean_bounded_slowdown'))} | {c.mean('stretch_p95'):.2f} | "
                       f"{d.mean('stretch_p95'):.2f} |")
    return out


def _definition_lines(cs: list[Cell], easy: Cell, setting: Setting) -> list[str]:
    """Each cell's bounded slowdown against rigid EASY as this project printed it before (over
    the run as it ran: a job a shrink stretched scored about 1) and as the papers define it
    (over the static run), from the same runs."""
    rows = [c for c in cs if c.fraction > 0]
    if not rows:
        return []
    out = ["", f"#### Bounded slowdown by the earlier definition and by the papers', {setting.text()}", "",
           ("The same runs measured both ways: over each job's run as it ran (what this project's tables printed "
            "before, not the literature's) and over its static run (SD-Policy's and MEBF's definition). Changes "
            "against rigid EASY, whose jobs are never resized (both definitions agree there)."), "",
           "| policy | malleable | over the run as it ran | over the static run | stretch p95 |", "|---|---|---|---|---|"]
    for c in rows:
        out.append(f"| {c.policy} | {100 * c.fraction:.0f} % | "
                   f"{_pct(c.against(easy, 'mean_bounded_slowdown_own_run'))} | "
                   f"{_pct(c.against(easy, 'mean_bounded_slowdown'))} | {c.mean('stretch_p95'):.2f} |")
    return out


def write_trace_outputs(out: Path, trace: str, results: Results, policies: list[str],
                        fractions: list[float]) -> dict[Setting, list[Cell]]:
    by_setting = {s: list(cells(results, trace, policies, fractions, s)) for s in results.settings_of(trace)}
    folder = out / trace
    folder.mkdir(parents=True, exist_ok=True)
    with (folder / "summary.csv").open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["load", "rule", "policy", "malleable_pct", "seeds",
                    *[f"{m}_{s}" for m in METRICS for s in ("mean", "min", "max")],
                    *[f"{m}_vs_easy{s}" for m in ("mean_turnaround", "mean_bounded_slowdown") for s in ("", "_ci95")]])
        for s, cs in by_setting.items():
            easy = rigid_easy(cs)
            for c in cs:
                vs: list[float | str] = []
                for m in ("mean_turnaround", "mean_bounded_slowdown"):
                    p = c.against(easy, m) if easy is not None and c is not easy else None
                    vs += ["", ""] if p is None else [p.mean, p.half_width]
                w.writerow([s.load, s.rule if c.fraction else "", c.policy, round(100 * c.fraction), c.seeds,
                            *[v for m in METRICS for v in c.stats[m]], *vs])
    try:
        _plot(folder / "vs-easy.png", trace, by_setting)
    except MissingExtra as exc:
        print(f"elasticd evaluate: no plot for {trace}: {exc}", file=sys.stderr)
    return by_setting


def _plot(path: Path, trace: str, by_setting: dict[Setting, list[Cell]]) -> None:
    from elasticd.sim.plots import plot_paired

    panels: dict[str, dict[str, dict[str, list[tuple[float, Paired]]]]] = {}
    seeds: set[int] = set()
    for s, cs in by_setting.items():
        easy = rigid_easy(cs)
        if easy is None:
            continue
        for metric, label in (("mean_turnaround", "mean turnaround"), ("mean_bounded_slowdown", "mean bounded slowdown")):
            series: dict[str, list[tuple[float, Paired]]] = {}
            for c in cs:
                p = c.against(easy, metric)
                if c is easy or c.fraction == 0 or p is None:
                    continue
                series.setdefault(c.policy, []).append((100 * c.fraction, p))
                seeds.add(c.seeds)
            panels.setdefault(label, {})[s.text()] = series
    if panels:
        n = "/".join(str(k) for k in sorted(seeds))
        plot_paired(panels, path, f"{trace}: change against rigid EASY (same seed), mean of {n} seeds, 95 % t-interval")


def report(out: Path, traces: list[str], results: Results, policies: list[str], fractions: list[float],
           meta: dict[str, Any]) -> str:
    """REPORT.md: per trace and setting, each policy beside rigid EASY, and why, from per-job
    evidence, where it is worse."""
    lines = ["# Policies on real workload logs", "", f"Regenerated by `{meta['command']}`. {meta['description']}", "",
             HOW_TO_READ, "", "## What the seed papers report", ""]
    lines += [f"- **{who}**: {what}" for who, what in SEED_CLAIMS]
    for trace in traces:
        by_setting = write_trace_outputs(out, trace, results, policies, fractions)
        if not any(rigid_easy(cs) for cs in by_setting.values()):
            continue
        lines += ["", f"## {trace}", ""]
        if trace in meta.get("readings", {}):  # what the simulation is made of, as the reader says it
            lines += [f"Read as: {meta['readings'][trace]}", ""]
        offered = meta.get("offered", {}).get(trace)
        if offered:
            lines += ["Offered load (node-hours asked per hour of the submission window, share of the machine): "
                      + ", ".join(f"x{load:g}: {v:.2f}" for load, v in sorted(offered.items(), reverse=True)), ""]
        lines += [f"![{trace}]({trace}/vs-easy.png)"]
        for s, cs in by_setting.items():
            easy = rigid_easy(cs)
            if easy is None:
                continue
            # At 0 % a policy built on EASY is rigid EASY (tests/test_policy_baselines): one row
            # stands for them all; a policy of another rigid base (sd: conservative) has its own.
            cs = [easy, *(c for c in cs if c is not easy and (c.fraction > 0 or _base(c.policy) != "easy"))]
            lines += ["", f"### {trace}, {s.text()}", "", *_table(cs, easy)]
            worse = _worse_lines(out, cs, easy)
            if worse:
                lines += ["", "Worse than rigid EASY (means; from the per-job files):", "", *worse]
            lines += target_lines(cs, easy)
            if s == Setting():
                lines += _definition_lines(cs, easy, s)
        lines += _scaling_lines(results, trace, policies, fractions, list(by_setting))
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
    target that no schedule could meet (bounded slowdown is never below 1) said so. The best
    seed policy is the best of all of them: where some were not run, that check is not made
    and the line says which are missing."""
    mine = sorted((c for c in cs if c.policy == TARGET_POLICY and c.fraction > 0), key=lambda c: c.fraction)
    if not mine:
        return []
    rows = [f"#### {TARGET_POLICY} against its targets", "",
            ("Never worse than rigid EASY (mean turnaround and bounded slowdown), at "
             f"{' and '.join(f'{100 * f:.0f} %' for f in BETTER_AT)} a bounded slowdown at least "
             f"{100 * (1 - BETTER_THAN_BEST_SEED):.0f} % below the best seed policy's (of all "
             f"{len(SEED_POLICIES)}), the worst seed's turnaround within {STABLE:g}x of the mean."), "",
            ("| malleable | turnaround vs EASY | bounded slowdown vs EASY | vs best seed policy (paired) | "
             "worst seed / mean | met |"), "|---|---|---|---|---|---|"]
    missed = met = 0
    notes: list[str] = []
    for c in mine:
        tat, bsld = c.mean("mean_turnaround"), c.mean("mean_bounded_slowdown")
        e_tat, e_bsld = easy.mean("mean_turnaround"), easy.mean("mean_bounded_slowdown")
        ok = [tat <= e_tat * (1 + 1e-9), bsld <= e_bsld * (1 + 1e-9)]
        vs_best = "—"
        if c.fraction in BETTER_AT:
            best, missing = best_seed_policy(cs, c.fraction)
            if best is None:
                vs_best = "not checked"
                notes.append(f"At {100 * c.fraction:.0f} % the best seed policy is not known: "
                             f"{', '.join(missing)} not run.")
            else:
                theirs = best.mean("mean_bounded_slowdown")
                goal = BETTER_THAN_BEST_SEED * theirs
                vs_best = f"{100 * (bsld / theirs - 1):+.1f} % ({best.policy} {theirs:.3f}; {_pct(c.against(best, 'mean_bounded_slowdown'))})"
                if goal < 1.0:
                    vs_best += ": unattainable, below 1"
                ok.append(bsld <= goal)
        worst = c.stats["mean_turnaround"][2] / tat
        ok.append(worst <= STABLE)
        met += sum(ok)
        missed += len(ok) - sum(ok)
        rows.append(f"| {100 * c.fraction:.0f} % | {100 * (tat / e_tat - 1):+.1f} % | {100 * (bsld / e_bsld - 1):+.1f} % | "
                    f"{vs_best} | {worst:.2f} | {'yes' if all(ok) else 'no'} |")
    rows += ["", f"{met} of {met + missed} target checks met here.", *(f"{n}" for n in notes)]
    return ["", *rows]


README_FRACTIONS = (0.2, 0.5, 0.8, 1.0)  # the README's rows; REPORT.md has every fraction run


def readme_table(results: Results, traces: list[str], policies: list[str], fractions: list[float]) -> str:
    """The README's summary: per trace, setting and fraction, the best seed policy by mean
    bounded slowdown (of all nine: none where some were not run) beside elastic's own
    `payoff`, each against rigid EASY with its paired 95 % interval, and its jobs' stretch.

    Only README_FRACTIONS of those run (all of them if none is)."""
    shown = [f for f in fractions if f in README_FRACTIONS] or fractions
    lines = [("| trace | setting | malleable | best seed policy | its turnaround vs EASY | its bounded slowdown vs EASY | "
              "its stretch p95 | payoff turnaround vs EASY | payoff bounded slowdown vs EASY | payoff stretch p95 |"),
             "|---|---|---|---|---|---|---|---|---|---|"]
    for trace in traces:
        for s in results.settings_of(trace):
            cs = list(cells(results, trace, policies, fractions, s))
            easy = rigid_easy(cs)
            if easy is None:
                continue
            for f in shown:
                if f == 0:
                    continue
                best, _ = best_seed_policy(cs, f)
                pay = next((c for c in cs if c.fraction == f and c.policy == "payoff"), None)
                if best is None and pay is None:
                    continue
                mine = "— | — | — | —" if best is None else (
                    f"{best.policy} | {_pct(best.against(easy, 'mean_turnaround'))} | "
                    f"{_pct(best.against(easy, 'mean_bounded_slowdown'))} | {best.mean('stretch_p95'):.2f}")
                theirs = "— | — | —" if pay is None else (
                    f"{_pct(pay.against(easy, 'mean_turnaround'))} | {_pct(pay.against(easy, 'mean_bounded_slowdown'))} "
                    f"| {pay.mean('stretch_p95'):.2f}")
                lines.append(f"| {trace} | {s.text()} | {100 * f:.0f} % | {mine} | {theirs} |")
    return "\n".join(lines) + "\n"
