"""`elasticd evaluate`: the policy comparison behind the README, regenerated in one command."""

from __future__ import annotations

import argparse
import shlex
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from elasticd.cli.sim_cmd import _fractions
from elasticd.errors import ElasticError
from elasticd.policies import POLICIES

if TYPE_CHECKING:
    from elasticd.sim.workload import MalleabilityRule

DEFAULT_TRACES = Path("examples") / "traces"


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    e = sub.add_parser(
        "evaluate", help="every policy on every trace over malleable fractions and seeds: report, plots, README tables",
        description="Simulate each policy on each trace at each malleable percentage with several seeds, and write "
        "a per-job file per run (OUT/jobs/...), OUT/REPORT.md (tables with mean and min..max over seeds, the paired "
        "change against rigid EASY with its 95 % interval, stretch, and why a policy is worse where it is, from the "
        "per-job files), OUT/TRACE/summary.csv and OUT/TRACE/vs-easy.png; with --readme, the README's table too. "
        "Finished runs are kept in OUT/runs.jsonl: run again with --resume to continue; an OUT that holds runs is "
        "replaced only with --fresh.")
    e.add_argument("traces", nargs="*", type=Path, metavar="TRACE",
                   help=f"SWF logs (default: every *.swf.gz in {DEFAULT_TRACES}, run from the repository)")
    e.add_argument("--out", type=Path, default=Path("evaluation"), metavar="DIR",
                   help="where REPORT.md, runs.jsonl and a folder per trace go (default ./evaluation; the "
                   "repository's results are regenerated with --out docs/results/evaluation, as the README says)")
    e.add_argument("--policy", action="append", choices=sorted(POLICIES), metavar="P",
                   help="repeatable (default: easy, every seed policy and payoff)")
    e.add_argument("--malleable", default="0,10,20,30,40,50,60,70,80,90,100", metavar="PCTS",
                   help="percentages (default 0,10,...,100)")
    e.add_argument("--seeds", type=int, default=10, metavar="K", help="seeds per cell (default 10)")
    e.add_argument("--load", default="1", metavar="F[,F...]",
                   help="offered loads, each the log's times F: inter-arrival times divided by F (F > 1: heavier, "
                   "F < 1: lighter; default 1, the log's own)")
    e.add_argument("--rule", default="efficiency", metavar="R[,R...]",
                   help="conversion rules: efficiency (the seeds'), mebf, downward (no job above its logged size); "
                   "default efficiency")
    e.add_argument("--max-jobs", type=int, default=None, metavar="N",
                   help="only each trace's first N jobs (stated in the report)")
    e.add_argument("--nodes", type=int, default=None, metavar="N",
                   help="machine size of every TRACE named (default: from each trace's header)")
    e.add_argument("--cores-per-node", type=int, default=None, metavar="C",
                   help="processors per node of every TRACE named, to turn logged processors into nodes "
                   "(default: from each header's MaxProcs / MaxNodes when both are there, else 1)")
    e.add_argument("--strict", action="store_true", help="a malformed trace line is an error, not a counted drop")
    e.add_argument("--warmup", type=float, default=43200.0, metavar="S", help="seconds excluded at the start (12 h)")
    e.add_argument("--workers", type=int, default=None, help="parallel runs (default: all cores)")
    e.add_argument("--resume", action="store_true",
                   help="keep the runs already in OUT/runs.jsonl (refused if made with another reading of a trace "
                        "or warm-up: OUT/settings.json)")
    e.add_argument("--fresh", action="store_true",
                   help="start afresh: replace the runs already in OUT/runs.jsonl (refused without it or --resume: "
                        "they may have taken hours)")
    e.add_argument("--readme", type=Path, default=None, metavar="README.md",
                   help="also rewrite the README's <!-- BEGIN evaluation --> section")
    e.set_defaults(func=cmd_evaluate)


def cmd_evaluate(args: argparse.Namespace) -> int:
    from elasticd.experiments import evaluate as ev
    from elasticd.experiments import evaluation_report as er
    from elasticd.sim.grid import GridSettings, TraceSource, text_progress, warmup_note
    from elasticd.sim.workload import RULES, MalleabilityRule, at_load, offered_load

    if not args.traces and (args.nodes is not None or args.cores_per_node is not None):
        raise ElasticError("--nodes and --cores-per-node apply to every TRACE named: name the traces they describe")
    if args.max_jobs is not None and args.max_jobs < 1:
        raise ElasticError("--max-jobs must be at least 1")
    if args.resume and args.fresh:
        raise ElasticError("--resume keeps the runs in OUT and --fresh replaces them: give one")
    if not args.resume and not args.fresh:
        ev.refuse_to_replace(args.out)
    if args.readme is not None:
        ev.readme_section(args.readme, "evaluation")
    loads = _loads(args.load)
    rules = [r.strip() for r in args.rule.split(",") if r.strip()]
    unknown = [r for r in rules if r not in RULES]
    if unknown or not rules:
        raise ElasticError(f"--rule {args.rule!r}: use {', '.join(RULES)} (comma-separated)")
    paths = args.traces or sorted(DEFAULT_TRACES.glob("*.swf.gz"))
    if not paths:
        raise ElasticError(f"no traces given and none in {DEFAULT_TRACES} (run from the repository, or name them)")
    sources: dict[str, TraceSource] = {}
    for p in paths:
        name = p.name.split(".swf")[0]
        if name in sources:
            raise ElasticError(f"{sources[name].path} and {p} are both named {name} in the report: rename one")
        sources[name] = TraceSource(p, args.nodes, args.cores_per_node, args.max_jobs, args.strict)
    # Every trace read here first: one that cannot be used is refused before any run (in a
    # worker process, its error was a broken pool and a traceback), and each says what it is.
    readings, offered = {}, {}
    for name, src in sources.items():
        trace = src.load()
        readings[name] = trace.report()
        offered[name] = {load: offered_load(at_load(trace, load)) for load in loads}
        print(readings[name])
        note = warmup_note(trace, args.warmup)
        if note:
            print(note)
    policies = args.policy or list(ev.DEFAULT_POLICIES)
    if "easy" not in policies:
        policies = ["easy", *policies]  # the reference of every comparison
    fractions = _fractions(args.malleable)
    if args.seeds < 1:
        raise ElasticError("--seeds must be at least 1")
    rule = MalleabilityRule()
    settings = {"warmup": args.warmup, "conversion": _conversion(rule),
                "traces": {name: {"reading": readings[name], "max_jobs": args.max_jobs, "nodes": args.nodes,
                                  "cores_per_node": args.cores_per_node, "strict": args.strict} for name in sources}}
    ev.keep_settings(args.out, settings, args.resume)
    runs = ev.plan(list(sources), policies, fractions, args.seeds, loads, rules)
    before = len(ev.Results.load(args.out / "runs.jsonl").rows)  # 0 but with --resume
    t0 = time.perf_counter()
    try:
        results = ev.run(sources, runs, args.out, GridSettings(rule, args.warmup), args.workers, text_progress())
    except KeyboardInterrupt:
        kept = len(ev.Results.load(args.out / "runs.jsonl").rows)
        print(f"\nelasticd evaluate: interrupted; {kept} runs kept in {args.out / 'runs.jsonl'}: "
              "the same command with --resume goes on from them", file=sys.stderr)
        raise
    # What regenerates it, from nothing, wherever it is run: --resume only saves time, --workers
    # only spreads it; --fresh, since its OUT (the repository's, or this one) holds runs.
    shown, skip = [], False
    for a in sys.argv[2:]:
        if skip:
            skip = False
        elif a in ("--resume", "--fresh"):
            continue
        elif a == "--workers":
            skip = True
        elif not a.startswith("--workers="):
            shown.append(a)
    command = "elasticd evaluate " + " ".join(shlex.quote(a) for a in [*shown, "--fresh"])
    desc = (f"{len(sources)} traces, {len(policies)} policies, malleable {args.malleable} %, {args.seeds} seeds, "
             f"load x{', x'.join(f'{x:g}' for x in loads)}, rule {', '.join(rules)}; Amdahl speedups from an "
             "efficiency of 0.6-0.95 at each job's logged size, 0.375 s reconfiguration per node changed"
             + (f"; first {args.max_jobs} jobs of each trace" if args.max_jobs else ""))
    wall = sum(float(r.get("wall", 0.0)) for r in results.rows.values())  # not in REPORT.md: it differs each time
    t1 = time.perf_counter()
    er.report(args.out, list(sources), results, policies, fractions,
              {"command": command, "description": desc, "readings": readings, "offered": offered})
    if args.readme is not None:
        ev.update_readme(args.readme, "evaluation", er.readme_table(results, list(sources), policies, fractions))
    made = len(results.rows) - before
    print(f"{len(results.rows)} runs ({made} made now, {t1 - t0:.0f} s; {wall / 3600:.1f} h of runs in all; report "
          f"{time.perf_counter() - t1:.0f} s); report in {args.out / 'REPORT.md'}")
    return 0


def _loads(text: str) -> list[float]:
    try:
        loads = [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise ElasticError(f"--load {text!r}: give factors like 1,0.5,2") from None
    if not loads or any(not (x > 0 and x < float("inf")) for x in loads):
        raise ElasticError(f"--load {text!r}: each factor must be a positive number (1 = the log's own load)")
    return loads


def _conversion(rule: MalleabilityRule) -> dict[str, object]:
    """The conversion's parameters every rule shares (the rule itself is a grid dimension)."""
    from dataclasses import asdict

    return {k: v for k, v in asdict(rule).items() if k != "rule"}
