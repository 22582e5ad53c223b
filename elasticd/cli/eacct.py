"""eacct: accounting of finished and running jobs from the daemon's event log (like sacct).

Reads STATE_DIR/events.jsonl (the daemon may be running or stopped: the log outlives a clean
stop), replays it through the core (so the figures are the history the daemon acted on), and
prints one line per job, or its size timeline with who decided each change, or JSON.
"""

from __future__ import annotations

import argparse
import json
import sys
import textwrap
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ClusterShell.NodeSet import NodeSet

from elastic_protocol.timefmt import format_duration
from elasticd import __version__
from elasticd.accounting import ACCOUNTING_VERSION, JobAccount, accounts, allocation_accounts
from elasticd.cli.common import add_state_dir, run_tool
from elasticd.core.states import JobState
from elasticd.errors import ElasticError
from elasticd.eventlog import LOG_FILE, read_log
from elasticd.statedir import default_state_dir
from elasticd.table import render_table


def _when(t: float | None) -> str:
    return "Unknown" if t is None else time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(t))


def _resizes(a: JobAccount) -> int:
    return sum(1 for c in a.timeline if c.event in ("grown", "shrunk", "released"))


# -o's fields: the column's header, its text, and the keys it selects in --json's job objects.
FIELDS: dict[str, tuple[str, Callable[[JobAccount], str], Callable[[JobAccount], dict[str, Any]]]] = {
    "jobid": ("JobID", lambda a: str(a.job_id), lambda a: {"job_id": a.job_id}),
    "jobname": ("JobName", lambda a: a.name, lambda a: {"name": a.name}),
    "kind": ("Kind", lambda a: a.kind, lambda a: {"kind": a.kind}),
    "state": ("State", lambda a: a.state, lambda a: {"state": a.state}),
    "exitcode": ("ExitCode", lambda a: a.exit, lambda a: {"exit_code": a.exit_code, "exit_signal": a.exit_signal}),
    "submit": ("Submit", lambda a: _when(a.submit), lambda a: {"submit": a.submit}),
    "start": ("Start", lambda a: _when(a.start), lambda a: {"start": a.start}),
    "end": ("End", lambda a: _when(a.end), lambda a: {"end": a.end}),
    "elapsed": ("Elapsed", lambda a: format_duration(int(a.elapsed)), lambda a: {"elapsed": a.elapsed}),
    "nnodes": ("NNodes", lambda a: str(a.max_nodes), lambda a: {"max_nodes": a.max_nodes}),
    "nodeseconds": ("NodeSeconds", lambda a: f"{a.node_seconds:.0f}", lambda a: {"node_seconds": a.node_seconds}),
    "resizes": ("Resizes", lambda a: str(_resizes(a)), lambda a: {"resizes": _resizes(a)}),
    "nodelist": ("NodeList", lambda a: str(NodeSet.fromlist(list(a.hosts))) if a.hosts else "",
                 lambda a: {"hosts": list(a.hosts)}),
    "reason": ("Reason", lambda a: a.reason or "", lambda a: {"reason": a.reason}),
}
DEFAULT_FORMAT = "jobid,jobname,kind,state,exitcode,elapsed,nnodes,nodeseconds,resizes,nodelist"

LEGEND = """\
fields (-o):
  jobid, jobname, kind, state  the job's id, name, kind and final (or current) state
  exitcode     Slurm's code:signal (0:0 ok, 1:0 exit code 1, 0:15 ended by SIGTERM)
  submit, start, end           local times, ISO 8601; Unknown when it has not happened
  elapsed      from start to end (or to now), M:SS, H:MM:SS, D-HH:MM:SS
  nnodes       the most nodes it held at once
  nodeseconds  nodes held x seconds, summed over its size timeline
  resizes      how many times its size changed (grown, shrunk, released)
  nodelist     every host it ran on (node[1-3])
  reason       why it ended as it did, when not COMPLETED
With --json and -o, each job's object holds only those fields' keys (exitcode: exit_code and
exit_signal, nnodes: max_nodes, nodelist: hosts, jobname: name, jobid: job_id), and its
timeline with -l; without -o, every key and the timeline.
"""


def _job_ids(text: str) -> list[int]:
    try:
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: give job ids like 3 or 3,7,12") from None
_job_ids.__name__ = "job id list"


def _states(text: str) -> set[str]:
    names = {s.strip().upper() for s in text.split(",") if s.strip()}
    known = {s.value for s in JobState}
    bad = sorted(names - known)
    if bad:
        raise argparse.ArgumentTypeError(f"unknown state(s) {', '.join(bad)}; one of {', '.join(sorted(known))}")
    return names
_states.__name__ = "state list"


def _format(text: str) -> list[str]:
    keys = [k.strip().lower() for k in text.split(",") if k.strip()]
    bad = [k for k in keys if k not in FIELDS]
    if bad or not keys:
        raise argparse.ArgumentTypeError(f"unknown field(s) {', '.join(bad) or '(none)'}; "
                                         f"fields: {', '.join(FIELDS)}")
    return keys
_format.__name__ = "field list"


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="eacct", description=textwrap.fill("Accounting of elastic's jobs from its event log: "
                                "what each job held, when, and who decided each change (like sacct)."),
                                epilog=LEGEND, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--version", action="version", version=f"eacct {__version__}")
    p.add_argument("log", nargs="?", type=Path, metavar="STATE_DIR_OR_LOG",
                   help=f"a state directory or its {LOG_FILE} (default: the daemon's state directory)")
    p.add_argument("-j", "--jobs", type=_job_ids, default=None, metavar="IDS", help="only these job ids (comma-separated)")
    p.add_argument("-s", "--state", type=_states, default=None, metavar="STATES",
                   help="only jobs in these states (comma-separated, e.g. COMPLETED,TIMEOUT)")
    p.add_argument("-o", "--format", type=_format, default=None, metavar="FIELDS",
                   help=f"columns (or, with --json, keys), comma-separated, from: {', '.join(FIELDS)} "
                   f"(default {DEFAULT_FORMAT})")
    p.add_argument("-l", "--timeline", action="store_true",
                   help="also print each job's size timeline: time, nodes, hosts, event and who decided it")
    p.add_argument("--allocation", action="store_true",
                   help="also print, per daemon run, the node-seconds its allocation held, used and gave back")
    p.add_argument("--json", action="store_true", help="print the versioned JSON document (see README: eacct)")
    add_state_dir(p)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return run_tool("eacct", lambda: _run(args))


def _run(args: argparse.Namespace) -> int:
    from elasticd.replay import replay

    source = args.log or args.state_dir or default_state_dir()
    path = source / LOG_FILE if source.is_dir() else source
    if not path.exists():
        raise ElasticError(f"{path}: no event log (a daemon writes one in its state directory unless --no-journal)")
    result = replay(path)
    rows = accounts(list(result.jobs.values()), time.time())
    if args.jobs is not None:
        rows = [a for a in rows if a.job_id in set(args.jobs)]
    if args.state is not None:
        rows = [a for a in rows if a.state in args.state]
    runs = allocation_accounts(read_log(path), list(result.jobs.values())) if args.allocation else []
    if args.json:
        doc: dict[str, object] = {"version": ACCOUNTING_VERSION, "jobs": [_job_json(a, args.format, args.timeline) for a in rows]}
        if args.allocation:
            doc["allocation"] = [r.as_json() for r in runs]
        print(json.dumps(doc, indent=2))
        return 0
    fields = args.format or _format(DEFAULT_FORMAT)
    header = [FIELDS[k][0] for k in fields]
    print(render_table(header, [[FIELDS[k][1](a) for k in fields] for a in rows]))
    if args.timeline:
        for a in rows:
            print(f"\njob {a.job_id} ({a.name}):")
            print(render_table(
                ["TIME", "EVENT", "NODES", "HOSTS", "CAUSE", "DETAIL"],
                [[_when(c.time), c.event, str(c.nodes), str(NodeSet.fromlist(list(c.hosts))) if c.hosts else "",
                  c.cause or "", c.detail or ""] for c in a.timeline]))
    if args.allocation:
        print("\nallocation, per daemon run:")
        print(render_table(
            ["START", "END", "NODES", "HELD_NODE_S", "USED_NODE_S", "GIVEN_BACK_NODE_S", "RELEASED", "ADDED"],
            [[_when(r.start), _when(r.end), str(r.nodes_at_start), f"{r.held:.0f}", f"{r.used:.0f}",
              f"{r.given_back:.0f}", str(r.released), str(r.added)] for r in runs]))
    return 0


def _job_json(a: JobAccount, fields: list[str] | None, timeline: bool) -> dict[str, Any]:
    """The whole account, or, with -o, the keys of the fields asked for, and the timeline
    when -l asks for it (a whole account always has it)."""
    whole = a.as_json()
    if fields is None:
        return whole
    out: dict[str, Any] = {}
    for k in fields:
        out.update(FIELDS[k][2](a))
    if timeline:
        out["timeline"] = whole["timeline"]
    return out


if __name__ == "__main__":
    sys.exit(main())
