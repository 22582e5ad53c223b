"""`elasticd batch`, `elasticd experiment` and `elasticd report`: the seed experiment."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from elasticd.cli.sim_cmd import _fractions
from elasticd.errors import ElasticError, MissingExtra
from elasticd.policies import POLICIES

if TYPE_CHECKING:
    from elasticd.experiments.runner import CellRow


def add_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    b = sub.add_parser("batch", help="write a seeded job batch (synthetic jobs) as job files")
    b.add_argument("seed", type=int, metavar="SEED", help="the batch's seed: the same seed writes the same batch")
    b.add_argument("--out", type=Path, required=True, metavar="DIR", help="where the batch's job files are written")
    b.add_argument("--jobs", type=int, default=25, help="jobs in the batch (default 25)")
    b.add_argument("--malleable", type=float, default=0.0, metavar="PCT", help="percentage of malleable jobs (default 0)")
    b.add_argument("--time-scale", type=float, default=1 / 15, metavar="X",
                   help="multiply every duration (default 1/15: a 15-minute batch in about a minute)")
    b.set_defaults(func=cmd_batch)

    e = sub.add_parser("experiment", help="run a grid of seeded batches for real, replay each in the simulator")
    e.add_argument("--policy", action="append", choices=sorted(POLICIES), metavar="P",
                   help="repeatable (default: fcfs, easy, malleable)")
    e.add_argument("--malleable", default="0,50,100", metavar="PCTS", help="percentages (default 0,50,100)")
    e.add_argument("--batches", type=int, default=3, help="batch seeds 1..K per cell (default 3)")
    e.add_argument("--nodes", type=int, default=16, help="local virtual nodes (default 16)")
    e.add_argument("--time-scale", type=float, default=1 / 15, metavar="X",
                   help="run times of the generated jobs multiplied by X (default 1/15)")
    e.add_argument("--jobs", type=int, default=25, help="jobs per batch (default 25)")
    e.add_argument("--parallel", type=int, default=2, help="batches run at once (default 2)")
    e.add_argument("--min-resize-interval", type=float, default=2.0, metavar="S",
                   help="least seconds between two resizes of one job (default 2: runs are short)")
    e.add_argument("--out", type=Path, required=True, metavar="DIR",
                   help="where results.json, the runs, the plots and README.md's table go")
    only = e.add_mutually_exclusive_group()
    only.add_argument("--replay", action="store_true",
                      help="run nothing: re-simulate the real runs already in --out and rewrite its results")
    only.add_argument("--report-only", action="store_true",
                      help="run nothing: rewrite the table in DIR/README.md from DIR/results.json")
    e.add_argument("--readme", type=Path, default=None, metavar="README.md",
                   help="also rewrite this README's <!-- BEGIN NAME --> section with the table, NAME being DIR's "
                   "folder name")
    e.set_defaults(func=cmd_experiment)

    r = sub.add_parser("report", help="metrics and PNG plots of a finished run, experiment or simulation")
    r.add_argument("target", type=Path, metavar="RUN.json|DIR",
                   help="a run file (elasticd run --json), an experiment folder (elasticd experiment --out) or a "
                   "simulation folder (elasticd sim --out), whose figures are drawn again from its files")
    r.set_defaults(func=cmd_report)


def cmd_batch(args: argparse.Namespace) -> int:
    from elasticd.experiments.batches import generate_batch, malleable_set, node_hours, write_batch

    if not 0 <= args.malleable <= 100:
        raise ElasticError("--malleable must be within 0..100")
    batch = generate_batch(args.seed, jobs=args.jobs)
    paths = write_batch(args.out, batch, malleable_set(batch, args.malleable / 100, args.seed), args.time_scale,
                        python="python3")
    print(f"wrote {len(paths)} job files to {args.out} ({node_hours(batch):.2f} node-hours at full scale, "
          f"{args.malleable:.0f}% malleable); run them with: elasticd run {args.out} --local 32")
    return 0


def cmd_experiment(args: argparse.Namespace) -> int:
    from elasticd.experiments.report import print_experiment
    from elasticd.experiments.runner import Settings, replay_experiment, run_experiment

    if args.replay or args.report_only:
        if not (args.out / "results.json").exists():
            raise ElasticError(f"{args.out}: no results.json (not an experiment folder)")
        if args.replay:
            replay_experiment(args.out, Settings(min_resize_interval=args.min_resize_interval))
        print_experiment(_write_table(args))
        return 0
    policies = args.policy or ["fcfs", "easy", "malleable"]
    fractions = _fractions(args.malleable)
    if args.readme is not None:
        from elasticd.experiments.report import check_readme

        check_readme(args.out, args.readme)  # now, not after the runs
    s = Settings(nodes=args.nodes, time_scale=args.time_scale, jobs=args.jobs, min_resize_interval=args.min_resize_interval)
    start = time.monotonic()

    def progress(done: int, total: int, row: CellRow) -> None:
        print(f"[{done}/{total}] {time.monotonic() - start:6.0f} s  {row.policy} {100 * row.fraction:.0f}% batch {row.batch}: "
              f"makespan {row.makespan:.1f} s (sim {row.sim_makespan:.1f}), {row.completed}/{row.jobs} completed",
              file=sys.stderr, flush=True)

    args.out.mkdir(parents=True, exist_ok=True)
    run_experiment(args.out, policies, fractions, list(range(1, args.batches + 1)), s, args.parallel, progress)
    rows = _write_table(args)
    print_experiment(rows)
    print(f"results in {args.out}, table in {args.out / 'README.md'}; plots with: elasticd report {args.out}")
    return 0 if all(r["completed"] == r["jobs"] for r in rows) else 2


def _write_table(args: argparse.Namespace) -> list[dict[str, Any]]:
    """The rows of DIR/results.json (every cell the folder holds), after writing their table
    into DIR/README.md and --readme, with the command that writes it again from them."""
    import json
    import shlex

    from elasticd.experiments.report import write_experiment_table

    rows: list[dict[str, Any]] = json.loads((args.out / "results.json").read_text())["rows"]
    command = f"elasticd experiment --out {shlex.quote(str(args.out))} --report-only"
    if args.readme is not None:
        command += f" --readme {shlex.quote(str(args.readme))}"
    write_experiment_table(args.out, rows, command, args.readme)
    return rows


def cmd_report(args: argparse.Namespace) -> int:
    from elasticd.experiments.report import report

    try:
        report(args.target)
    except MissingExtra as exc:
        # The tables are printed already; the plots need the extra.
        print(f"elasticd report: no plots: {exc}", file=sys.stderr)
    return 0
