"""`elasticd run`: one command from job files to a metrics table, on a private daemon.

The daemon gets its own temporary state directory, so a batch never touches (or is
touched by) a daemon the user already runs.
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import time
from dataclasses import asdict
from pathlib import Path

from elastic_protocol.control import Queue, QueueDocument, Stop, Submit, Wait
from elastic_protocol.jobspec import JobSpec
from elastic_protocol.timefmt import format_duration

from elasticd.cli.daemonctl import node_names_for, start_detached, tuning_args
from elasticd.client import ControlClient
from elasticd.errors import ElasticError, JobFileError
from elasticd.jobfile import job_files, load_job_file
from elasticd.metrics import JobRecord, job_metrics, summarize


def load_batch(targets: list[Path], nodes: int) -> list[JobSpec]:
    """Every job file of the targets, validated, or one JobFileError listing all problems."""
    specs = []
    problems: list[str] = []
    for target in targets:
        try:
            files = job_files(target)
        except JobFileError as exc:
            problems.extend(f"{exc.path}: {p}" for p in exc.problems)
            continue
        for f in files:
            try:
                spec = load_job_file(f)
            except JobFileError as exc:
                problems.extend(f"{exc.path}: {p}" for p in exc.problems)
                continue
            if spec.node_bounds[0] > nodes:
                problems.append(f"{f}: nodes: {spec.node_bounds[0]} nodes requested but --local gives {nodes}")
            specs.append(spec)
    if problems:
        raise JobFileError("batch", problems)
    if not specs:
        raise ElasticError("no job files given")
    return specs


def execute_batch(
    specs: list[JobSpec],
    nodes: int,
    policy: str,
    kill_wait: float,
    extra: list[str],
    offsets: bool = True,
    timeout: float | None = None,
    announce: bool = True,
) -> tuple[QueueDocument, bool]:
    """Run the jobs on a private local daemon (at their submit offsets) until all end."""
    specs = sorted(specs, key=lambda s: s.submit_offset if offsets else 0.0)
    state_dir = Path(tempfile.mkdtemp(prefix="elastic-run-"))
    rec = start_detached(state_dir, nodes, policy, kill_wait, extra=extra)
    if announce:
        print(f"elasticd run: {len(specs)} jobs on {nodes} local nodes, policy {policy} (daemon pid {rec.pid})")
    try:
        with ControlClient(rec, "elasticd-run") as c:
            t0 = time.monotonic()
            ids = []
            for spec in specs:
                delay = (spec.submit_offset if offsets else 0.0) - (time.monotonic() - t0)
                if delay > 0:
                    time.sleep(delay)
                ids.append(c.request(Submit(spec=spec))["job_id"])
            done = c.request(Wait(job_ids=ids, timeout=timeout), timeout=None)["done"]
            doc = QueueDocument.model_validate(c.request(Queue(job_ids=ids)))
            c.request(Stop(), timeout=None)
    except KeyboardInterrupt:
        _stop_quietly(rec)
        raise
    finally:
        shutil.rmtree(state_dir, ignore_errors=True)
    return doc, done


def run_batch(args: argparse.Namespace) -> int:
    from elasticd.cli.common import policy_settings

    nodes = len(node_names_for(args))
    policy_settings(args.policy, args.policy_config, args.policy_param, args.min_resize_interval)
    specs = load_batch(args.targets, nodes)
    doc, done = execute_batch(specs, nodes, args.policy, args.kill_wait, tuning_args(args),
                              offsets=not args.no_offsets, timeout=args.timeout)
    print_report(doc, nodes)
    if args.json:
        args.json.write_text(json.dumps(report_json(doc, nodes, args.policy), indent=2))
    if not done:
        raise ElasticError(f"the batch did not finish within {args.timeout} s; the rest was cancelled")
    return 0 if all(j.state == "COMPLETED" for j in doc.jobs) else 2


def _stop_quietly(rec) -> None:
    try:
        with ControlClient(rec, "elasticd-run") as c:
            c.request(Stop(), timeout=None)
    except ElasticError:
        pass


def records(doc: QueueDocument) -> list[JobRecord]:
    return [JobRecord(j.job_id, j.name, j.state, j.submit_time, j.start_time, j.end_time, j.node_seconds)
            for j in doc.jobs]


def _fmt(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}"


def print_report(doc: QueueDocument, total_nodes: int) -> None:
    recs = records(doc)
    head = ("JOBID", "NAME", "STATE", "EXIT", "NODES", "WAIT(s)", "RUN(s)", "TURNAROUND(s)", "BSLD")
    rows = [head]
    for j, r in zip(doc.jobs, recs):
        m = job_metrics(r)
        sizes = sorted({e.nodes for e in j.events if e.event in ("started", "shrunk", "grown")})
        rows.append((str(j.job_id), j.name[:24], j.state, j.exit or "", "/".join(map(str, sizes)) or "0",
                     _fmt(m.wait), _fmt(m.run), _fmt(m.turnaround), _fmt(m.bounded_slowdown)))
    widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
    print()
    for r in rows:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip())
    for j in doc.jobs:
        if j.state != "COMPLETED":
            print(f"job {j.job_id} ({j.name}) {j.state}: {j.reason or 'exit ' + (j.exit or '?')}"
                  f"{'; output in ' + j.output_path if j.output_path else ''}")
    s = summarize(recs, total_nodes)
    print()
    print(f"jobs                    {s.jobs} ({s.started} started)")
    print(f"makespan                {s.makespan:.2f} s ({format_duration(s.makespan)})")
    print(f"node utilization        {100 * s.utilization:.1f} %")
    print(f"mean wait               {s.mean_wait:.2f} s")
    print(f"mean turnaround         {s.mean_turnaround:.2f} s")
    print(f"mean bounded slowdown   {s.mean_bounded_slowdown:.3f} (tau = 10 s)")


def report_json(doc: QueueDocument, total_nodes: int, policy: str | None = None) -> dict:
    """Metrics plus the whole queue document (events with hosts), so `elasticd report`
    can draw the run later."""
    recs = records(doc)
    return {
        "version": 1,
        "kind": "run",
        "nodes": total_nodes,
        "policy": policy,
        "jobs": [asdict(job_metrics(r)) for r in recs],
        "summary": asdict(summarize(recs, total_nodes)),
        "queue": doc.model_dump(),
    }
