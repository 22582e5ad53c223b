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
from elastic_protocol.timefmt import format_duration

from elasticd.cli.daemonctl import node_names_for, start_detached, tuning_args
from elasticd.client import ControlClient
from elasticd.errors import ElasticError, JobFileError
from elasticd.jobfile import job_files, load_job_file
from elasticd.metrics import JobRecord, job_metrics, summarize


def run_batch(args: argparse.Namespace) -> int:
    nodes = node_names_for(args)
    specs = []
    problems: list[str] = []
    for target in args.targets:
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
            if spec.node_bounds[0] > len(nodes):
                problems.append(f"{f}: nodes: {spec.node_bounds[0]} nodes requested but --local gives {len(nodes)}")
            specs.append(spec)
    if problems:
        raise JobFileError("batch", problems)
    if not specs:
        raise ElasticError("no job files given")
    specs.sort(key=lambda s: 0.0 if args.no_offsets else s.submit_offset)

    state_dir = Path(tempfile.mkdtemp(prefix="elastic-run-"))
    rec = start_detached(state_dir, len(nodes), args.policy, args.kill_wait, extra=tuning_args(args))
    print(f"elasticd run: {len(specs)} jobs on {len(nodes)} local nodes, policy {args.policy} (daemon pid {rec.pid})")
    try:
        with ControlClient(rec, "elasticd-run") as c:
            t0 = time.monotonic()
            ids = []
            for spec in specs:
                delay = (0.0 if args.no_offsets else spec.submit_offset) - (time.monotonic() - t0)
                if delay > 0:
                    time.sleep(delay)
                ids.append(c.request(Submit(spec=spec))["job_id"])
            done = c.request(Wait(job_ids=ids, timeout=args.timeout), timeout=None)["done"]
            doc = QueueDocument.model_validate(c.request(Queue(job_ids=ids)))
            c.request(Stop(), timeout=None)
    except KeyboardInterrupt:
        _stop_quietly(rec)
        raise
    finally:
        shutil.rmtree(state_dir, ignore_errors=True)
    print_report(doc, len(nodes))
    if args.json:
        args.json.write_text(json.dumps(report_json(doc, len(nodes)), indent=2))
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


def report_json(doc: QueueDocument, total_nodes: int) -> dict:
    recs = records(doc)
    return {
        "version": 1,
        "nodes": total_nodes,
        "jobs": [asdict(job_metrics(r)) for r in recs],
        "summary": asdict(summarize(recs, total_nodes)),
    }
