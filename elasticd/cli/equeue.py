"""equeue: the queue as a table (like squeue) or as a versioned JSON document."""

from __future__ import annotations

import argparse
import json
import sys
import textwrap

from ClusterShell.NodeSet import NodeSet

from elastic_protocol.control import JobInfo, Queue, QueueDocument
from elastic_protocol.timefmt import format_duration
from elasticd import __version__
from elasticd.cli.common import add_state_dir, run_tool
from elasticd.client import ControlClient
from elasticd.table import render_table

COLUMNS = ("JOBID", "NAME", "KIND", "STATE", "NODES", "MIN-MAX", "TIME", "LIMIT", "EXIT", "HOSTS/REASON")

# What each column holds, for --help (README: Submit, watch, cancel, says the same).
LEGEND = """\
columns:
  JOBID         the job's id (esubmit printed it)
  NAME          the job file's name (20 characters at most here)
  KIND          rigid, moldable, malleable or evolving (job file's kind)
  STATE         Slurm's: PENDING, CONFIGURING, RUNNING, RESIZING, COMPLETED, FAILED,
                CANCELLED, TIMEOUT, NODE_FAIL
  NODES         nodes the job holds now (0 while pending and once ended)
  MIN-MAX       the node counts it may run on (nodes = {min, max} in its job file)
  TIME          time used since its start, as squeue writes it: M:SS, H:MM:SS, D-HH:MM:SS
  LIMIT         the time limit it is ended at, from its start (scaled to its size when it
                has a model); UNLIMITED without one
  EXIT          once ended, Slurm's code:signal (0:0 ok, 1:0 exit code 1, 0:15 SIGTERM)
  HOSTS/REASON  its hosts (node[1-4]) and, in parentheses, why it is as it is: Resources,
                Priority, ResizeBy:user|policy|app, NotRegistered, Disconnected, Held, ...
                (README: Submit, watch, cancel; `equeue --json` has every field)
"""


def row(j: JobInfo) -> tuple[str, ...]:
    if j.hosts:
        where = str(NodeSet.fromlist(j.hosts)) + (f" ({j.note})" if j.note else "")
    else:
        where = f"({j.reason})" if j.reason else (f"({j.note})" if j.note else "")
    return (
        str(j.job_id),
        j.name[:20],
        j.kind,
        j.state,
        str(j.nodes),
        f"{j.nodes_min}-{j.nodes_max}",
        format_duration(j.time_used),
        # The limit it is ended at (scaled by its model to its size), once it has started.
        format_duration(j.limit_now if j.limit_now is not None else j.time_limit),
        j.exit or "",
        where,
    )


def render(doc: QueueDocument) -> str:
    return render_table(COLUMNS, [row(j) for j in doc.jobs])


def _job_ids(text: str) -> list[int]:
    """`-j 3,5,8`: argparse names this function's type ("job ids") when a value is wrong."""
    try:
        ids = [int(x) for x in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a comma-separated list of job ids (e.g. 3,5,8)") from None
    if any(i < 1 for i in ids):
        raise argparse.ArgumentTypeError(f"{text!r}: job ids are positive")
    return ids


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="equeue", description=textwrap.fill("Show elastic's queue: pending and running jobs, one "
                                "line each (like squeue)."), epilog=LEGEND,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--version", action="version", version=f"equeue {__version__}")
    p.add_argument("-a", "--all", action="store_true", help="include finished jobs")
    p.add_argument("-j", "--jobs", type=_job_ids, default=None, metavar="IDS",
                   help="only these jobs: comma-separated job ids (e.g. 3,5,8)")
    p.add_argument("--json", action="store_true", help="print the versioned JSON document (every field of every job)")
    add_state_dir(p)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)

    def body() -> int:
        with ControlClient.connect(args.state_dir, "equeue") as client:
            data = client.request(Queue(job_ids=args.jobs, all=args.all))
        doc = QueueDocument.model_validate(data)
        if args.json:
            print(json.dumps(doc.model_dump(), indent=2))
        else:
            print(render(doc))
        return 0

    return run_tool("equeue", body)


if __name__ == "__main__":
    sys.exit(main())
