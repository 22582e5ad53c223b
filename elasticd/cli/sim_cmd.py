"""`elasticd sim`: replay an SWF trace through the daemon's core and policies, in virtual
time, over a grid of policies x malleable fractions x seeds."""

from __future__ import annotations

import argparse
import csv
import json
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from elasticd.cli.common import PolicyArgumentError, add_policy_params, policy_settings
from elasticd.errors import ElasticError, MissingExtra
from elasticd.metrics import WindowSummary
from elasticd.policies import POLICIES

if TYPE_CHECKING:
    from elasticd.sim.fromlog import LoggedRun, SkippedRun
    from elasticd.sim.grid import RunResult
    from elasticd.sim.swf import Trace

DEFAULT_FRACTIONS = "0,20,40,60,80,100"
# A trace's simulation only: given with --from-log (which replays the logged jobs, on the
# logged nodes), each is refused by name rather than ignored. Defaults are set at the run
# (parsed as None, so that one given is told from one left out).
TRACE_ONLY: dict[str, tuple[str, object]] = {
    "malleable": ("--malleable", DEFAULT_FRACTIONS), "seeds": ("--seeds", 3), "nodes": ("--nodes", None),
    "cores_per_node": ("--cores-per-node", None), "rule": ("--rule", "efficiency"), "model": ("--model", "amdahl"),
    "efficiency": ("--efficiency", "0.6,0.95"), "alpha": ("--alpha", 0.375), "beta": ("--beta", 0.0),
    "b": ("--b", 0.0), "warmup": ("--warmup", 43200.0), "workers": ("--workers", None), "strict": ("--strict", False),
    "load": ("--load", 1.0), "gantt_window": ("--gantt-window", None),
}


# What `elasticd sim` prints, for its --help (the table is elasticd.sim.grid.print_summary's).
SIM_LEGEND = """\
the table, one line per policy and malleable percentage, over the jobs submitted after the
warm-up and up to the last submission (means over seeds; [min..max] over the seeds):
  TURNAROUND(s), WAIT(s)  end - submit, start - submit
  UTIL%            busy nodes over the same window, percent of the machine
  BSLD             bounded slowdown: max(1, turnaround / max(static run, 10 s)), the static
                   run being a job's logged run at its logged size (a shrink stretches a job)
  STRETCH p95/max  a job's run / its static run: 95th percentile and largest
  >2x%             jobs whose run was over twice their static run
  TIMEOUT%, SHRINK/J, EXPAND/J   jobs ended by their limit; resizes per job
  vs EASY 0%       mean of the per-seed changes against rigid EASY (easy at 0 %, same seed)
                   with its 95 % interval; n.d.: the interval includes 0
With --out, every run's per-job file is in DIR/jobs (columns: docs/per-job-files.md), and the
plots are drawn from those files.
"""


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    s = sub.add_parser("sim", help="simulate an SWF trace under one or more policies (virtual time)",
                       description="Replay an SWF trace in virtual time through the daemon's core and policies, "
                       "over policies x malleable percentages x seeds.", epilog=SIM_LEGEND,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    s.add_argument("trace", type=Path, metavar="TRACE.swf", nargs="?",
                   help="an SWF log (.swf or .swf.gz); or use --from-log")
    s.add_argument("--from-log", type=Path, metavar="STATE_DIR",
                   help="what-if: the jobs of each daemon run in a state directory's event log, simulated under "
                   "each --policy beside what really happened")
    s.add_argument("--policy", action="append", choices=sorted(POLICIES), metavar="P",
                   help=f"policy to simulate, repeatable (default: easy and malleable); one of {', '.join(sorted(POLICIES))}")
    s.add_argument("--malleable", metavar="PCTS",
                   help=f"malleable job percentages, comma-separated (default {DEFAULT_FRACTIONS})")
    s.add_argument("--seeds", type=int, metavar="K", help="seeds per cell (default 3)")
    s.add_argument("--nodes", type=int, help="machine size (default: from the trace header)")
    s.add_argument("--cores-per-node", type=int, default=None, metavar="C",
                   help="processors per node, to turn logged processors into nodes (default: from the "
                   "header's MaxProcs / MaxNodes when both are there, else 1)")
    s.add_argument("--rule", choices=["efficiency", "mebf", "downward"],
                   help="how a malleable job's min/preferred/max are set (default efficiency; downward: the "
                   "efficiency rule with no job above its logged size)")
    s.add_argument("--load", type=float, metavar="F",
                   help="offered load as the log's times F: inter-arrival times divided by F (F > 1 heavier, "
                   "F < 1 lighter; default 1)")
    s.add_argument("--model", choices=["amdahl", "rho"], help="speedup model family (default amdahl)")
    s.add_argument("--efficiency", metavar="LO,HI",
                   help="range of each job's parallel efficiency at its logged size; its serial "
                   "fraction (or rho) follows from it (default 0.6,0.95)")
    s.add_argument("--alpha", type=float, help="reconfiguration: seconds per node changed (default 0.375)")
    s.add_argument("--beta", type=float, help="reconfiguration: beta / (nodes involved) seconds (default 0)")
    s.add_argument("--b", type=float, help="reconfiguration: process creation seconds per node (default 0)")
    s.add_argument("--warmup", type=float, metavar="S",
                   help="seconds excluded at the start (default 12 h); drain-down is always excluded")
    s.add_argument("--workers", type=int, default=None, help="parallel runs (default: all cores)")
    s.add_argument("--out", type=Path, default=None, metavar="DIR",
                   help="write a per-job file per run (DIR/jobs), CSV, JSON and PNG plots (drawn from those files) "
                   "here (with --from-log: the what-if table as CSV and JSON)")
    s.add_argument("--no-plots", action="store_true", help="no PNG plots (faster)")
    s.add_argument("--gantt-window", metavar="H0,H1",
                   help="the Gantt charts' window, hours from the first submission (default: a typical busy "
                   "stretch after the warm-up); the same for every policy")
    s.add_argument("--strict", action="store_true", help="a malformed trace line is an error, not a counted drop")
    add_policy_params(s)
    s.set_defaults(func=run_sim)


def _fractions(text: str) -> list[float]:
    try:
        vals = [float(x) / 100 for x in text.split(",") if x.strip()]
    except ValueError:
        raise ElasticError(f"--malleable {text!r}: give percentages like 0,20,100") from None
    if not vals or any(not 0 <= v <= 1 for v in vals):
        raise ElasticError(f"--malleable {text!r}: percentages must be within 0..100")
    return vals


def _range(text: str) -> tuple[float, float]:
    try:
        lo, hi = (float(x) for x in text.split(","))
    except ValueError:
        raise ElasticError(f"--efficiency {text!r}: give LO,HI") from None
    return lo, hi


def run_sim(args: argparse.Namespace) -> int:
    if args.from_log is not None:
        given = [opt for dest, (opt, _) in TRACE_ONLY.items() if getattr(args, dest) not in (None, False)]
        if args.trace is not None:
            given.insert(0, f"TRACE ({args.trace})")
        if given:
            raise ElasticError(f"{', '.join(given)} {'does' if len(given) == 1 else 'do'} not apply to --from-log: "
                               "it simulates the jobs the log recorded, on the nodes it recorded, once per --policy")
        return run_from_log(args)
    if args.trace is None:
        raise ElasticError("give a trace (TRACE.swf) or --from-log STATE_DIR")
    for dest, (_, default) in TRACE_ONLY.items():
        if getattr(args, dest) is None:
            setattr(args, dest, default)
    from elastic_protocol.models import ReconfigCost
    from elasticd.sim.grid import GridSettings, RunKey, TraceSource, aggregate, run_grid, text_progress, warmup_note
    from elasticd.sim.workload import MalleabilityRule, at_load, offered_load

    source = TraceSource(args.trace, args.nodes, args.cores_per_node, strict=args.strict)
    trace = source.load()
    print(trace.report())
    if not (args.load > 0 and args.load < float("inf")):
        raise ElasticError(f"--load {args.load}: must be a positive number (1 = the log's own load)")
    gantt = _hours(args.gantt_window) if args.gantt_window else None
    scaled = at_load(trace, args.load)
    print(f"offered load: {offered_load(scaled):.3f} of the machine" + (
        f" (the log's {offered_load(trace):.3f} x {args.load:g})" if args.load != 1 else ""))
    note = warmup_note(scaled, args.warmup)
    if note:
        print(note)
    lo, hi = _range(args.efficiency)
    try:
        rule = MalleabilityRule(args.rule, args.model, lo, hi, cost=ReconfigCost(args.alpha, args.beta, args.b))
    except ValueError as exc:
        raise ElasticError(str(exc)) from None
    policies = args.policy or ["easy", "malleable"]
    fractions = _fractions(args.malleable)
    if args.seeds < 1:
        raise ElasticError("--seeds must be at least 1")
    params = per_policy_params(policies, args.policy_config, args.policy_param)
    name = args.trace.name.split(".swf")[0]
    keys = [RunKey(name, p, f, s, args.load, args.rule) for p in policies for f in fractions
            for s in range(1, args.seeds + 1)]
    if args.out and not args.no_plots and ("easy", 0.0) not in {(k.policy, k.fraction) for k in keys}:
        # The utilization plot is set against rigid EASY's: its run is made with the others.
        keys.append(RunKey(name, "easy", 0.0, 1, args.load, args.rule))
        print("rigid EASY (easy at 0 %, seed 1) is run too: the plots compare every policy with it")
    t = time.perf_counter()
    jobs_dir = args.out / "jobs" if args.out else None
    results = run_grid({name: source}, keys, GridSettings(rule, args.warmup, params, jobs_dir), args.workers,
                       text_progress())
    wall = time.perf_counter() - t
    summary = list(aggregate(results))
    from elasticd.sim.grid import print_summary

    print_summary(summary)
    print(f"{len(results)} runs in {wall:.1f} s")
    if args.out:
        write_outputs(args.out, trace, results, summary, vars_for_json(args))
        if not args.no_plots:
            from elasticd.sim.figures import plot_simulation

            t = time.perf_counter()
            try:
                plot_simulation(args.out, [r.record() for r in results], summary, name, args.warmup, args.seeds, gantt)
                print(f"plots in {time.perf_counter() - t:.1f} s, from the per-job files")
            except MissingExtra as exc:
                print(f"elasticd sim: no plots: {exc} (or pass --no-plots)", file=sys.stderr)
        print(f"results in {args.out} (per-job files in {args.out / 'jobs'})")
    return 0


def _hours(text: str) -> tuple[float, float]:
    try:
        h0, h1 = (float(x) for x in text.split(","))
    except ValueError:
        raise ElasticError(f"--gantt-window {text!r}: give H0,H1 (hours from the first submission)") from None
    if not 0 <= h0 < h1:
        raise ElasticError(f"--gantt-window {text!r}: needs 0 <= H0 < H1")
    return h0, h1


def per_policy_params(policies: list[str], config: Path | None, assignments: list[str]) -> dict[str, dict[str, Any]]:
    """Each policy's parameters: `--policy-param KEY=VALUE` applies to every simulated policy
    that has KEY (a key none has is an error), config-file tables to the policy they name."""
    from elasticd.policies.params import normalise_key
    from elasticd.policies.registry import entry

    declared = {p: {q.name for q in entry(p).params} for p in policies}
    unused = [a for a in assignments if not any(normalise_key(a.partition("=")[0]) in d for d in declared.values())]
    if unused:
        raise PolicyArgumentError([f"--policy-param {a!r}: no simulated policy has that parameter" for a in unused])
    out = {}
    for p in policies:
        mine = [a for a in assignments if normalise_key(a.partition("=")[0]) in declared[p]]
        out[p] = policy_settings(p, config, mine)
    return out


def vars_for_json(args: argparse.Namespace) -> dict[str, Any]:
    return {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items() if k != "func"}


def write_outputs(out: Path, trace: Trace, results: list[RunResult], summary: list[dict[str, Any]],
                  params: dict[str, Any]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    run_dicts = [r.record() for r in results]
    with open(out / "runs.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(run_dicts[0]))
        w.writeheader()
        w.writerows(run_dicts)
    fields = list(dict.fromkeys(k for r in summary for k in r))
    with open(out / "summary.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields)
        w.writeheader()
        w.writerows(summary)
    doc = {
        "version": 2,
        "trace": {"name": trace.name, "nodes": trace.nodes, "jobs": len(trace.jobs),
                  "dropped": dict(trace.dropped), "adjusted": dict(trace.adjusted), "units": trace.units,
                  "notes": trace.notes, "report": trace.report()},
        "parameters": params,
        "runs": run_dicts,
        "summary": summary,
    }
    (out / "results.json").write_text(json.dumps(doc, indent=1))


def run_from_log(args: argparse.Namespace) -> int:
    """Per daemon run of the log: the recorded run, then the same jobs simulated under its own
    policy and each --policy. A log of one run prints as it always did; with several, each
    gets its heading, and one that cannot be simulated says why. --out: the tables as CSV
    and JSON."""
    from elasticd.sim.fromlog import SkippedRun, load

    runs = load(args.from_log)
    tables: list[tuple[LoggedRun | SkippedRun, list[WhatIfRow]]] = []
    if len(runs) == 1:
        [run] = runs
        if isinstance(run, SkippedRun):
            raise ElasticError(f"{args.from_log}: {run.why}")
        print(f"{args.from_log}: {_run_heading(run)}")
        tables.append((run, _what_if_table(args, run)))
    else:
        print(f"{args.from_log}: {len(runs)} daemon runs (a run: a daemon start and the restarts that recovered its "
              "jobs), each simulated on its own nodes under its own policy")
        for run in runs:
            where = f"run {run.number} (log line {run.line}, {run.starts} daemon start{'s' if run.starts > 1 else ''})"
            if isinstance(run, SkippedRun):
                print(f"\n{where}: not simulated: {run.why}")
                tables.append((run, []))
            else:
                print(f"\n{where}: {_run_heading(run)}")
                tables.append((run, _what_if_table(args, run)))
        if all(isinstance(run, SkippedRun) for run in runs):
            raise ElasticError(f"{args.from_log}: no run of the log could be simulated")
    if args.out is not None:
        _write_what_if(args.out, args, tables)
        print(f"results in {args.out}")
    return 0


# One line of a what-if table: real or sim, the policy, its figures.
WhatIfRow = tuple[str, str, WindowSummary]


def _run_heading(run: LoggedRun) -> str:
    return (f"{len(run.jobs)} jobs on {run.nodes} nodes, recorded under {run.policy}"
            + (f" ({run.left_out} cancelled before they started, left out)" if run.left_out else ""))


def _what_if_table(args: argparse.Namespace, run: LoggedRun) -> list[WhatIfRow]:
    from elasticd.sim.fromlog import what_if
    from elasticd.table import render_table

    policies = args.policy or [run.policy]
    params = per_policy_params(policies, args.policy_config, args.policy_param)
    rows: list[WhatIfRow] = [("real", run.policy, run.real)]
    rows.append(("sim", run.policy, what_if(run, run.policy, run.params)))
    rows += [("sim", p, what_if(run, p, params[p])) for p in policies if p != run.policy]
    print(render_table(
        ["RUN", "POLICY", "MAKESPAN(s)", "UTIL%", "WAIT(s)", "TURNAROUND(s)", "BSLD", "TIMEOUT%", "SHRINK/J",
         "EXPAND/J"],
        [[what, p, f"{s.makespan:.1f}", f"{100 * s.utilization:.1f}", f"{s.mean_wait:.1f}",
          f"{s.mean_turnaround:.1f}", f"{s.mean_bounded_slowdown:.2f}", f"{100 * s.timeouts:.1f}",
          f"{s.shrinks_per_job:.2f}", f"{s.expands_per_job:.2f}"] for what, p, s in rows]))
    return rows


def _write_what_if(out: Path, args: argparse.Namespace,
                   tables: list[tuple[LoggedRun | SkippedRun, list[WhatIfRow]]]) -> None:
    """OUT/what-if.csv: a line per table row, each daemon run's number first; OUT/what-if.json:
    the same per run, with what each run was (or why it was not simulated) and the settings."""
    import dataclasses

    from elasticd.sim.fromlog import SkippedRun

    out.mkdir(parents=True, exist_ok=True)
    lines = [{"run": run.number, "what": what, "policy": p, **dataclasses.asdict(s)}
             for run, rows in tables for what, p, s in rows]
    with open(out / "what-if.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=["run", "what", "policy", *(x.name for x in dataclasses.fields(WindowSummary))])
        w.writeheader()
        w.writerows(lines)
    doc = {
        "version": 1,
        "log": str(args.from_log),
        "parameters": vars_for_json(args),
        "runs": [{"number": run.number, "line": run.line, "starts": run.starts, "simulated": False, "why": run.why}
                 if isinstance(run, SkippedRun) else
                 {"number": run.number, "line": run.line, "starts": run.starts, "simulated": True, "nodes": run.nodes,
                  "policy": run.policy, "params": run.params, "jobs": len(run.jobs), "left_out": run.left_out,
                  "rows": [{"what": what, "policy": p, **dataclasses.asdict(s)} for what, p, s in rows]}
                 for run, rows in tables],
    }
    (out / "what-if.json").write_text(json.dumps(doc, indent=1) + "\n")
