"""eacct: accounting of finished and running jobs from the daemon's event log (like sacct).

Reads STATE_DIR/events.jsonl (the daemon may be running or stopped: the log outlives a clean
stop), replays it through the core (so the figures are the history the daemon acted on), and
prints one line per job, or its size timeline with who decided each change, or JSON.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path

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


FIELDS: dict[str, tuple[str, Callable[[JobAccount], str]]] = {
    "jobid": ("JobID", lambda a: str(a.job_id)),
    "jobname": ("JobName", lambda a: a.name),
    "kind": ("Kind", lambda a: a.kind),
    "state": ("State", lambda a: a.state),
    "exitcode": ("ExitCode", lambda a: a.exit),
    "submit": ("Submit", lambda a: _when(a.submit)),
    "start": ("Start", lambda a: _when(a.start)),
    "end": ("End", lambda a: _when(a.end)),
    "elapsed": ("Elapsed", lambda a: format_duration(int(a.elapsed))),
    "nnodes": ("NNodes", lambda a: str(a.max_nodes)),
    "nodeseconds": ("NodeSeconds", lambda a: f"{a.node_seconds:.0f}"),
    "resizes": ("Resizes", lambda a: str(sum(1 for c in a.timeline if c.event in ("grown", "shrunk", "released")))),
    "nodelist": ("NodeList", lambda a: str(NodeSet.fromlist(list(a.hosts))) if a.hosts else ""),
    "reason": ("Reason", lambda a: a.reason or ""),
}
DEFAULT_FORMAT = "jobid,jobname,kind,state,exitcode,elapsed,nnodes,nodeseconds,resizes,nodelist"


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
    p = argparse.ArgumentParser(prog="eacct", description="Accounting of elastic's jobs from its event log: "
                                "what each job held, when, and who decided each change.")
    p.add_argument("--version", action="version", version=f"eacct {__version__}")
    p.add_argument("log", nargs="?", type=Path, metavar="STATE_DIR_OR_LOG",
                   help=f"a state directory or its {LOG_FILE} (default: the daemon's state directory)")
    p.add_argument("-j", "--jobs", type=_job_ids, default=None, metavar="IDS", help="only these job ids (comma-separated)")
    p.add_argument("-s", "--state", type=_states, default=None, metavar="STATES",
                   help="only jobs in these states (comma-separated, e.g. COMPLETED,TIMEOUT)")
    p.add_argument("-o", "--format", type=_format, default=_format(DEFAULT_FORMAT), metavar="FIELDS",
                   help=f"columns, comma-separated, from: {', '.join(FIELDS)} (default {DEFAULT_FORMAT})")
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
        doc: dict[str, object] = {"version": ACCOUNTING_VERSION, "jobs": [a.as_json() for a in rows]}
        if args.allocation:
            doc["allocation"] = [r.as_json() for r in runs]
        print(json.dumps(doc, indent=2))
        return 0
    header = [FIELDS[k][0] for k in args.format]
    print(render_table(header, [[FIELDS[k][1](a) for k in args.format] for a in rows]))
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


if __name__ == "__main__":
    sys.exit(main())
