"""Running a batch of job files on a private local daemon, and its metrics: what
`elasticd run` and `elasticd experiment` are made of.

The daemon gets its own temporary state directory, so a batch never touches (or is
touched by) a daemon the user already runs; a batch that is stopped (Ctrl-C, SIGTERM from
`timeout` or a batch system, SIGHUP from a closed terminal) stops its daemon, which ends
its jobs, before it goes.
"""

from __future__ import annotations

import re
import shutil
import signal
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict
from pathlib import Path
from types import FrameType
from typing import Any

from elastic_protocol.control import JobInfo, Queue, QueueDocument, Stop, Submit, Wait
from elastic_protocol.jobspec import JobSpec
from elastic_protocol.timefmt import format_duration
from elasticd.client import ControlClient
from elasticd.daemonctl import start_detached
from elasticd.errors import ElasticError, JobFileError
from elasticd.jobfile import job_files, load_job_file
from elasticd.metrics import JobRow, job_metrics, recorded_row, summarize
from elasticd.perjob import rounded
from elasticd.statedir import DaemonRecord
from elasticd.table import render_table


class BatchStopped(ElasticError):
    """The batch was stopped by a signal; its daemon and jobs were ended."""

    code = "stopped"

    def __init__(self, signum: int) -> None:
        super().__init__(f"stopped by {signal.Signals(signum).name}; the batch's daemon and its jobs were ended")
        self.signum = signum

    def __reduce__(self) -> tuple[type, tuple[int]]:
        return type(self), (self.signum,)


@contextmanager
def _stopped_by_signals() -> Iterator[None]:
    """SIGTERM and SIGHUP as exceptions while the batch runs (SIGINT already is one)."""

    def raise_it(signum: int, frame: FrameType | None) -> None:
        raise BatchStopped(signum)

    if threading.current_thread() is not threading.main_thread():
        yield  # batches run in threads (`elasticd experiment`): their caller handles signals
        return
    old = {s: signal.signal(s, raise_it) for s in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)


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
) -> tuple[QueueDocument, bool, dict[int, JobSpec]]:
    """Run the jobs on a private local daemon (at their submit offsets) until all end: the
    queue document, whether all ended in time, and each job's file by the id it was given."""
    specs = sorted(specs, key=lambda s: s.submit_offset if offsets else 0.0)
    state_dir = Path(tempfile.mkdtemp(prefix="elastic-run-"))
    rec = start_detached(state_dir, nodes, policy, kill_wait, extra=extra)
    if announce:
        print(f"elasticd run: {len(specs)} jobs on {nodes} local nodes, policy {policy} (daemon pid {rec.pid})", flush=True)
    try:
        with _stopped_by_signals(), ControlClient(rec, "elasticd-run") as c:
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
    except (KeyboardInterrupt, BatchStopped):
        _stop_quietly(rec, kill_wait)
        raise
    finally:
        shutil.rmtree(state_dir, ignore_errors=True)
    return doc, done, dict(zip(ids, specs))


def _stop_quietly(rec: DaemonRecord, kill_wait: float) -> None:
    """Stop the batch's daemon (it ends the jobs) within kill-wait + 5 s, whatever signals
    come meanwhile."""
    with _stopped_by_signals():
        try:
            with ControlClient(rec, "elasticd-run", timeout=5.0) as c:
                c.request(Stop(), timeout=kill_wait + 5.0)
        except (ElasticError, OSError, BatchStopped):
            pass


_HISTORY = ("started", "grown", "shrunk", "released", "requeued")


def queue_rows(doc: QueueDocument, specs: dict[int, JobSpec] | None = None) -> list[JobRow]:
    """The jobs of a queue document as per-job rows (elasticd.metrics.recorded_row), as a
    per-job file holds them (to the millisecond: every figure of the run is computed from
    these); without their job files (`specs`), no model is known: a job's static run is its
    own run if it was never resized."""
    out = []
    for j in doc.jobs:
        spec = (specs or {}).get(j.job_id)
        history: list[tuple[float, int]] = []
        for e in j.events:
            if e.event == "requeued":
                history = []  # never launched: its history begins at its next start
            elif e.event in _HISTORY:
                history.append((e.time, e.nodes))
        out.append(rounded(recorded_row(
            j.job_id, j.kind, j.state, j.submit_time, j.start_time, j.end_time,
            (j.nodes_min, j.nodes_max, j.nodes_preferred), float(j.time_limit) if j.time_limit is not None else None,
            spec.model if spec is not None else None, history, sum(1 for e in j.events if e.event == "shrunk"),
            sum(1 for e in j.events if e.event == "grown"))))
    return out


def rows_of_run_file(doc: dict[str, Any]) -> list[JobRow]:
    """A run file's rows (report_json): as written, or from its queue document if it is older
    than them."""
    if "rows" in doc:
        return [JobRow(**{**r, "size_changes": tuple((t, n) for t, n in r["size_changes"])}) for r in doc["rows"]]
    return queue_rows(QueueDocument.model_validate(doc["queue"]))


def _fmt(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}"


# The launcher's reason when a job's output (or error) file could not be opened.
_UNOPENED = re.compile(r"cannot open output file (?P<path>.+): (?P<why>[^:]+)$")


def _why(j: JobInfo) -> str:
    """Why the job did not complete, and where its output is; a file its launch could not
    create is said so, with why, not given as where its output is."""
    why = j.reason or "exit " + (j.exit or "?")
    unopened = _UNOPENED.search(why)
    if unopened is not None:
        return (why[:unopened.start()] + f"its output file {unopened['path']} could not be created: "
                f"{unopened['why']} (nothing was written)")
    return why + (f"; output in {j.output_path}" if j.output_path else "")


def print_report(doc: QueueDocument, total_nodes: int, recs: list[JobRow] | None = None) -> None:
    """The jobs' table and the batch's figures; bounded slowdown over each job's static run
    (elasticd.metrics: its model's time at its requested size, else its own run if never
    resized; "-" where unknown)."""
    recs = recs if recs is not None else queue_rows(doc)
    head = ("JOBID", "NAME", "STATE", "EXIT", "NODES", "WAIT(s)", "RUN(s)", "STATIC(s)", "TURNAROUND(s)", "BSLD")
    rows: list[tuple[str, ...]] = []
    for j, r in zip(doc.jobs, recs):
        m = job_metrics(r)
        sizes = sorted({e.nodes for e in j.events if e.event in ("started", "shrunk", "grown")})
        rows.append((str(j.job_id), j.name[:24], j.state, j.exit or "", "/".join(map(str, sizes)) or "0",
                     _fmt(m.wait), _fmt(m.run), _fmt(r.static_run), _fmt(m.turnaround), _fmt(m.bounded_slowdown)))
    print()
    print(render_table(head, rows))
    for j in doc.jobs:
        if j.state != "COMPLETED":
            print(f"job {j.job_id} ({j.name}) {j.state}: {_why(j)}")
    s = summarize(recs, total_nodes)
    print()
    completed = sum(1 for j in doc.jobs if j.state == "COMPLETED")
    if doc.jobs and completed == 0:
        # The figures below would read as a schedule; they describe failures.
        print(f"no job COMPLETED ({len(doc.jobs)} ended otherwise): the figures below measure failures, "
              "not a schedule")
    print(f"jobs                    {s.jobs} ({s.started} started, {completed} completed)")
    print(f"makespan                {s.makespan:.2f} s ({format_duration(s.makespan)})")
    print(f"node utilization        {100 * s.utilization:.1f} %")
    print(f"mean wait               {s.mean_wait:.2f} s")
    print(f"mean turnaround         {s.mean_turnaround:.2f} s")
    unknown = f"; {s.static_unknown} resized job(s) without a model's work left out" if s.static_unknown else ""
    print(f"mean bounded slowdown   {s.mean_bounded_slowdown:.3f} (over each job's static run, tau = 10 s{unknown})")


def report_json(doc: QueueDocument, total_nodes: int, policy: str | None = None,
                specs: dict[int, JobSpec] | None = None) -> dict[str, Any]:
    """Metrics, the per-job rows they come from, and the whole queue document (events with
    hosts), so `elasticd report` can draw the run later."""
    recs = queue_rows(doc, specs)
    return {
        "version": 2,
        "kind": "run",
        "nodes": total_nodes,
        "policy": policy,
        "jobs": [{"name": j.name, "state": j.state, "static_run": r.static_run, **asdict(job_metrics(r))}
                 for j, r in zip(doc.jobs, recs)],
        "rows": [asdict(r) for r in recs],
        "summary": asdict(summarize(recs, total_nodes)),
        "queue": doc.model_dump(),
    }
