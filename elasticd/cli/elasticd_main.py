"""elasticd: start, stop and inspect the daemon; run a whole batch with one command."""

from __future__ import annotations

import argparse
import json
import logging
import os
import shlex
import sys
import textwrap
import time
from pathlib import Path

from elastic_protocol.control import (
    JobEventInfo,
    JobInfo,
    Queue,
    QueueDocument,
    ReleaseHold,
    Resize,
    Status,
    StatusInfo,
    Stop,
)
from elasticd import __version__, defaults
from elasticd.allocation import bind as bind_allocation
from elasticd.allocation import current_allocation
from elasticd.cli import evaluate_cmd, experiment_cmd, replay_cmd, sim_cmd
from elasticd.cli.batch import run_batch
from elasticd.cli.cluster_args import (
    ClusterSettings,
    add_cluster_args,
    allocation_rules,
    cluster_settings,
    nodes_held_now,
)
from elasticd.cli.common import (
    add_policy_params,
    add_state_dir,
    fail,
    policy_settings,
    positive_seconds,
    run_tool,
    seconds,
)
from elasticd.cli.limits import add_limit_args, ensure_fd_room, limit_passthrough, limit_settings
from elasticd.client import ControlClient
from elasticd.daemonctl import cluster_for, start_detached, tuning_args
from elasticd.errors import DaemonNotRunning, ElasticError
from elasticd.policies import POLICIES
from elasticd.statedir import LOG_FILE, DaemonRecord, default_state_dir, hold, pid_alive, prepare, running_daemon
from elasticd.table import count, named


def _count(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if v < 1:
        raise argparse.ArgumentTypeError(f"{text} must be 1 or more")
    return v


_count.__name__ = "count"


def _port(text: str) -> int:
    n = _count(text) if text != "0" else 0
    if n > 65535:
        raise argparse.ArgumentTypeError(f"{n} is not a TCP port (0-65535)")
    return n


_port.__name__ = "port"


def _common_start_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--local", type=_count, metavar="N", help="manage N virtual nodes on this machine")
    p.add_argument("--policy", default=defaults.POLICY, choices=sorted(POLICIES),
                   help=f"scheduling policy (default: {defaults.POLICY})")
    p.add_argument("--kill-wait", type=seconds, default=defaults.KILL_WAIT, metavar="S",
                   help=f"seconds between SIGTERM and SIGKILL when a job is ended (default {defaults.KILL_WAIT:g})")
    p.add_argument("--order-deadline", type=positive_seconds, default=defaults.ORDER_DEADLINE, metavar="S",
                   help="seconds an application has to answer a shrink or grow order "
                   f"(default {defaults.ORDER_DEADLINE:g})")
    p.add_argument("--min-resize-interval", type=seconds, default=defaults.MIN_RESIZE_INTERVAL, metavar="S",
                   help="malleable policy: least seconds between two resizes of one job "
                   f"(default {defaults.MIN_RESIZE_INTERVAL:g})")
    p.add_argument("--schedule-interval", type=positive_seconds, default=defaults.SCHEDULE_INTERVAL, metavar="S",
                   help=f"also run the policy this often while jobs exist (default {defaults.SCHEDULE_INTERVAL:g})")
    p.add_argument("--min-free-space", type=_count, default=defaults.MIN_FREE_SPACE_MIB, metavar="MIB",
                   help="start no job while the state directory's file system has less free "
                   f"(default {defaults.MIN_FREE_SPACE_MIB} MiB)")
    p.add_argument("--output-cap", type=_count, default=defaults.OUTPUT_CAP_MIB, metavar="MIB",
                   help="a job whose output files pass this size in all is ended, FAILED, with a reason naming "
                   f"the cap (default {defaults.OUTPUT_CAP_MIB} MiB; a job file's output_cap overrides it)")
    add_policy_params(p)


# What `elasticd run` prints, for its --help (the table is elasticd.experiments.batchrun's).
RUN_LEGEND = """\
the table, one line per job:
  JOBID, NAME, STATE, EXIT   as equeue shows them (EXIT: Slurm's code:signal)
  NODES          every size the job ran at, smallest first: 2/6/8 = it started, shrank or
                 grew to 2, 6 and 8 nodes; 4 = it ran on 4 throughout
  WAIT(s)        seconds from its submission to its start
  RUN(s)         seconds from its start to its end
  STATIC(s)      its static run: its model's time (work) at its requested size, else its own
                 run if it was never resized, else "-" (unknown)
  TURNAROUND(s)  wait + run
  BSLD           bounded slowdown: max(1, turnaround / max(static run, 10 s)); above 1, it
                 waited or ran longer than unresized (a shrink stretches a job)
then a line for each job that did not complete (why, and where its output is), and the
batch's makespan, node utilization and means.

Where things go: each job's output goes to its `output` file (default elastic-JOBID.out) in
its working_dir (relative to its job file; without one, the directory elasticd run was
started in). The private daemon's state and log are in a temporary directory, removed at
the end; --json FILE keeps the figures and every job's history.
"""


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="elasticd", description="elastic: a malleable job scheduler for HPC allocations.")
    p.add_argument("--version", action="version", version=f"elasticd {__version__}")
    sub = p.add_subparsers(dest="cmd", required=True)

    s = sub.add_parser("start", help="start a daemon (detaches unless --foreground)",
                       description="Start a daemon on --local N virtual nodes, or inside a Slurm allocation on its "
                       "nodes, and return once it answers (it runs on, detached, until `elasticd stop`). "
                       "Started again on a state directory after a crash, it takes its jobs back.")
    _common_start_args(s)
    s.add_argument("--foreground", action="store_true", help="stay in the foreground, log to stderr")
    s.add_argument("--listen", default="127.0.0.1", help="address for the control channel (default 127.0.0.1)")
    s.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"],
                   help="what the daemon's log records (default INFO)")
    s.add_argument("--metrics-port", type=_port, default=None, metavar="PORT",
                   help="serve Prometheus metrics at http://LISTEN:PORT/metrics (README: Metrics)")
    s.add_argument("--no-journal", action="store_true",
                   help="do not save jobs in the state directory (nothing survives a crash; for measurements)")
    s.add_argument("--salvage", action="store_true",
                   help="start on a state directory whose journal is missing, empty or damaged: recover every "
                   "record that can be read (the damaged journal is kept beside) and report what was lost")
    s.add_argument("--drop-missing-nodes", action="store_true",
                   help="start although running jobs of the journal hold nodes this start leaves out: those jobs "
                   "end NODE_FAIL and their processes are ended (without it such a start is refused, naming them)")
    add_cluster_args(s)
    add_limit_args(s)
    add_state_dir(s)

    st = sub.add_parser("stop", help="end running jobs cleanly, cancel pending ones, stop the daemon",
                        description="End the daemon's running jobs (SIGTERM, SIGKILL after its kill-wait), cancel "
                        "its pending ones, and stop it; says which jobs it ended and cancelled.")
    add_state_dir(st)

    ss = sub.add_parser("status", help="is a daemon running; its nodes and policy",
                        description="Whether a daemon runs on the state directory, and its addresses, policy, "
                        "nodes (idle, allocated, down) and jobs by state. Exit 1 when none runs.")
    ss.add_argument("--json", action="store_true", help="the status as a JSON document (nodes, jobs by state)")
    add_state_dir(ss)

    pl = sub.add_parser("policies", help="list the scheduling policies and their parameters",
                        description="List the scheduling policies (--policy) and their parameters "
                        "(--policy-param KEY=VALUE) with their defaults.")
    pl.add_argument("--readme", type=Path, default=None, metavar="README.md",
                    help="also rewrite the README's <!-- BEGIN policies --> section with this listing")
    pl.set_defaults(func=cmd_policies)

    rz = sub.add_parser("resize", help="order a running malleable job to N nodes now",
                        description="Order a running malleable or evolving job to N nodes now, whatever the "
                        "policy, and wait for the outcome: `job 3: shrunk to 2 nodes (node1, node2)`, or exit 1 "
                        "saying why not (the application refused, a deadline passed, ...).")
    rz.add_argument("job_id", type=int, help="the job")
    rz.add_argument("nodes", type=_count, help="the node count to resize to (at least 1)")
    rz.add_argument("--no-wait", action="store_true", help="return once the order is given, not its outcome")
    rz.add_argument("--hold", action="store_true",
                    help="keep the job at this size: the policy does not resize it until `elasticd release J`")
    rz.add_argument("--timeout", type=positive_seconds, default=120.0, metavar="S",
                    help="how long to wait for the outcome (default 120)")
    add_state_dir(rz)

    rl = sub.add_parser("release", help="let the policy resize a job held by `resize --hold` again",
                        description="Let the policy resize a job held at its size by `elasticd resize --hold` "
                        "again.")
    rl.add_argument("job_id", type=int, help="the held job")
    add_state_dir(rl)

    sim_cmd.add_parser(sub)
    replay_cmd.add_parser(sub)
    evaluate_cmd.add_parser(sub)
    experiment_cmd.add_parsers(sub)
    for cmd in sub.choices.values():
        if cmd.description is None:
            # `elasticd CMD --help` says what CMD does, as the list of commands does.
            cmd.description = _help_of(sub, cmd)

    r = sub.add_parser("run", help="run a batch of job files on a private local daemon and print metrics",
                       description=textwrap.fill("Start a private daemon on --local N nodes, submit the job files (at their "
                       "submit_offset), wait for every job to end, stop the daemon, and print a line per job and "
                       "the batch's metrics. Exit 0 when every job COMPLETED, 2 otherwise."),
                       epilog=RUN_LEGEND, formatter_class=argparse.RawDescriptionHelpFormatter)
    r.add_argument("targets", nargs="+", type=Path, metavar="FILES_OR_DIR",
                   help="job files (TOML), or folders whose *.toml files are the batch")
    _common_start_args(r)
    r.add_argument("--no-offsets", action="store_true", help="submit everything at once, ignoring submit_offset")
    r.add_argument("--json", type=Path, metavar="FILE", help="also write per-job and overall metrics as JSON")
    r.add_argument("--timeout", type=positive_seconds, default=None, metavar="S",
                   help="give up (and cancel) after S seconds")
    return p


def _help_of(sub: argparse._SubParsersAction, cmd: argparse.ArgumentParser) -> str | None:  # type: ignore[type-arg]
    for action in sub._choices_actions:
        if sub.choices.get(action.dest) is cmd and action.help:
            return action.help[0].upper() + action.help[1:] + "."
    return None


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if hasattr(args, "func"):
        return run_tool("elasticd", lambda: args.func(args))
    return run_tool("elasticd", lambda: _COMMANDS[args.cmd](args))


# ---- start ---------------------------------------------------------------------------
def cmd_policies(args: argparse.Namespace) -> int:
    from elasticd.policies import render_policies

    listing = render_policies()
    print(listing)
    if args.readme is not None:
        from elasticd.experiments.evaluate import update_readme

        update_readme(args.readme, "policies", f"```text\n{listing}```\n")
    return 0


def cmd_start(args: argparse.Namespace) -> int:
    state_dir = prepare(args.state_dir or default_state_dir())
    aside = bind_allocation(state_dir, current_allocation(),
                            movable=args.state_dir is None and "ELASTIC_STATE_DIR" not in os.environ)
    if aside is not None:
        print(f"elasticd: {state_dir} belonged to another Slurm allocation; kept as {aside}, "
              "starting afresh", file=sys.stderr)
    policy_settings(args.policy, args.policy_config, args.policy_param, args.min_resize_interval)
    cluster = nodes_held_now(cluster_for(args), state_dir)
    settings = cluster_settings(args, cluster)
    try:
        rec = running_daemon(state_dir)
    except DaemonNotRunning:
        pass
    else:
        return fail("elasticd", f"a daemon is already running for {state_dir} (pid {rec.pid}); "
                    "stop it with `elasticd stop` or use another --state-dir")
    # Its daemon.json may be gone while it runs: the lock on the directory says so all the same.
    held = hold(state_dir)
    if not args.foreground:
        os.close(held)  # the daemon started below takes it (and refuses if another came between)
    from elasticd.daemon.room import room_to_start
    from elasticd.daemon.statecheck import check

    # A full disk is named as such, before anything reads it as damage; a daemon's restart on
    # one starts on the state directory's reserve (its jobs would otherwise run unwatched).
    on_reserve = room_to_start(state_dir, use_reserve=not args.salvage and not args.no_journal)
    if on_reserve is not None:
        print(f"elasticd: {on_reserve}", file=sys.stderr)
    if not args.no_journal and not args.salvage:
        check(state_dir)  # refuse a state directory that held jobs but lost its journal
    if args.foreground:
        return _serve_foreground(args, state_dir, cluster.nodes, settings)
    extra = tuning_args(args) + settings.passthrough() + (["--no-journal"] if args.no_journal else []) + \
        (["--salvage"] if args.salvage else []) + \
        (["--drop-missing-nodes"] if args.drop_missing_nodes else []) + \
        (["--metrics-port", str(args.metrics_port)] if args.metrics_port is not None else [])
    rec = start_detached(state_dir, args.local, args.policy, args.kill_wait, listen=args.listen,
                         log_level=args.log_level, extra=extra + limit_passthrough(args),
                         timeout=20.0 + settings.connect_timeout)
    noun = "node" if len(cluster.nodes) == 1 else "nodes"
    kind = f"local {noun}" if cluster.mode == "local" else f"{noun} from {cluster.source}"
    print(f"elasticd started (pid {rec.pid}): {len(cluster.nodes)} {kind}: {cluster.folded}, "
          f"policy {args.policy}, launcher {settings.launcher}")
    print(f"  control channel {rec.control_address}, applications {rec.app_address}")
    if cluster.cpus:
        print(f"  cores per node: {', '.join(f'{n}={c}' for n, c in zip(cluster.nodes, cluster.cpus))}")
    with ControlClient(rec, "elasticd-start") as c:
        info = StatusInfo.model_validate(c.request(Status()))
    down = [n.name for n in info.nodes if n.state == "down"]
    if down:
        print(f"  unreachable, marked down (retried every {settings.node_retry:g} s): {', '.join(down)}")
    if info.salvaged:
        # What a salvage recovered and lost is said where it is asked for, not only logged.
        print(f"  {info.salvaged}")
    if info.recovered_jobs:
        dropped = _dropped_at_start(rec) if args.drop_missing_nodes else []
        source = "the salvaged journal" if info.salvaged else "the journal"
        print(f"  {count(info.recovered_jobs, 'job')} recovered from {source} (running ones taken over"
              f"{', but for the ones ended below' if dropped else ''}; `elasticd status`, `equeue`)")
        if dropped:
            print(f"  ended NODE_FAIL, their processes ended: {named('job', dropped)}: they held "
                  f"nodes this start leaves out (--drop-missing-nodes; the nodes are named in {state_dir / LOG_FILE})")
    if info.metrics is not None:
        print(f"  metrics at {info.metrics}")
    if info.storage is not None:
        print(f"  STATE DIRECTORY: {info.storage}")
    if info.applications is not None:
        print(f"  APPLICATIONS: {info.applications}")
    print(f"  state and log in {state_dir}")
    return 0


def _dropped_at_start(rec: DaemonRecord) -> list[int]:
    """The running jobs this start ended for want of their nodes (--drop-missing-nodes)."""
    with ControlClient(rec, "elasticd-start") as c:
        doc = QueueDocument.model_validate(c.request(Queue(all=True)))
    return [j.job_id for j in doc.jobs if j.state == "NODE_FAIL" and j.end_time is not None
            and j.end_time >= rec.started_at - 1.0 and "not part of the restarted daemon's cluster" in (j.reason or "")]


def _serve_foreground(args: argparse.Namespace, state_dir: Path, nodes: tuple[str, ...],
                      settings: ClusterSettings) -> int:
    import uvloop

    from elasticd.daemon.config import DaemonConfig
    from elasticd.daemon.service import Daemon

    logging.basicConfig(level=args.log_level, stream=sys.stderr,
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
    logging.getLogger("paramiko").setLevel(logging.WARNING)
    fd_warning = ensure_fd_room(args.max_connections)
    if fd_warning:
        logging.getLogger("elasticd").warning(fd_warning)
    cfg = DaemonConfig(state_dir=state_dir, node_names=list(nodes), policy=args.policy,
                       listen_host=args.listen, app_host=settings.app_host, kill_wait=args.kill_wait,
                       order_deadline=args.order_deadline, min_resize_interval=args.min_resize_interval,
                       schedule_interval=args.schedule_interval, mode=settings.mode,
                       launcher=settings.launcher, launcher_options=settings.launcher_options(),
                       policy_params=list(args.policy_param), journal=not args.no_journal,
                       policy_config=str(args.policy_config) if args.policy_config else None,
                       min_free_space=args.min_free_space << 20, output_cap=args.output_cap << 20,
                       salvage=args.salvage, drop_missing_nodes=args.drop_missing_nodes,
                       metrics_port=args.metrics_port, **limit_settings(args),
                       allocation_rules=allocation_rules(settings), slurm_job=os.environ.get("SLURM_JOB_ID"),
                       sbatch_args=shlex.split(settings.sbatch_args))

    async def serve() -> None:
        await Daemon(cfg).serve()

    uvloop.run(serve())
    _exit_past_blocked_threads()
    return 0


def _exit_past_blocked_threads(wait: float = 3.0) -> None:
    """Everything is saved and daemon.json removed by now. A worker thread still blocked on
    a node that vanished (an SSH read or connect, which cannot be interrupted) would hold the
    process at the interpreter's exit, which joins it, until TCP gives up minutes later,
    while `elasticd stop` waits on the pid: if the exit has not happened WAIT seconds from
    now, the process exits without those threads."""
    import threading

    def watchdog() -> None:
        time.sleep(wait)
        stuck = [t.name for t in threading.enumerate() if not t.daemon and t is not threading.main_thread()]
        logging.getLogger("elasticd").warning("exiting %g s after the stop with thread(s) still blocked (%s), on a "
                                              "node that does not answer", wait, ", ".join(stuck) or "none")
        logging.shutdown()
        os._exit(0)

    threading.Thread(target=watchdog, name="exit-watchdog", daemon=True).start()


# ---- stop / status ---------------------------------------------------------------------
def cmd_stop(args: argparse.Namespace) -> int:
    state_dir = args.state_dir or default_state_dir()
    rec = running_daemon(state_dir)
    # The daemon answers once its jobs ended, within kill-wait + 3 s for what does not answer
    # and 2 s more to try nodes lost meanwhile; then it closes its connections, its launcher
    # and its tasks (2 s each at most) and exits. Its answer is said whatever that takes.
    answer_by = time.monotonic() + rec.kill_wait + 8.0
    try:
        with ControlClient(rec, "elasticd-stop", timeout=5.0) as c:
            answer = c.request(Stop(), timeout=max(1.0, answer_by - time.monotonic()))
    except (ElasticError, OSError) as exc:
        if not pid_alive(rec.pid):
            print(f"elasticd stopped (pid {rec.pid})")
            return 0
        return fail("elasticd", f"the daemon (pid {rec.pid}) did not confirm the stop: {exc}; "
                    f"see {state_dir / LOG_FILE}")
    ended: list[int] = answer["ended_jobs"]
    problems = [p for p in (answer.get("not_ended"), answer.get("not_reached"), answer.get("not_saved")) if p]
    if ended:
        print(f"ended running {named('job', ended)} (CANCELLED)")
    cancelled: list[int] = answer.get("cancelled_pending") or []
    if cancelled:
        print(f"cancelled pending {named('job', cancelled)}")
    for p in problems:
        fail("elasticd", p)
    exit_by = time.monotonic() + 10.0
    while pid_alive(rec.pid) and time.monotonic() < exit_by:
        time.sleep(0.05)
    if pid_alive(rec.pid):
        return fail("elasticd", f"the daemon (pid {rec.pid}) answered the stop but has not exited 10 s later; see "
                    f"{state_dir / LOG_FILE} (`kill -9 {rec.pid}` ends it; its next start recovers or ends what it "
                    "leaves)")
    print(f"elasticd stopped (pid {rec.pid})")
    return 1 if problems else 0


def cmd_status(args: argparse.Namespace) -> int:
    state_dir = args.state_dir or default_state_dir()
    try:
        rec = running_daemon(state_dir)
    except DaemonNotRunning as exc:
        if args.json:
            print(json.dumps({"running": False, "state_dir": str(state_dir)}))
        else:
            print(f"elasticd is not running: {exc}")
        return 1
    with ControlClient(rec, "elasticd-status") as c:
        info = StatusInfo.model_validate(c.request(Status()))
    if args.json:
        print(json.dumps({"running": True, **info.model_dump()}, indent=2))
        return 0
    up = time.time() - info.started_at
    print(f"elasticd {info.version} running (pid {info.pid}, up {up:.0f} s), mode {info.mode}, policy {info.policy}")
    print(f"  control {info.control_address}, applications {info.app_address}, state {state_dir}")
    if info.metrics is not None:
        print(f"  metrics at {info.metrics}")
    if info.policy_params:
        print("  policy parameters: " + ", ".join(f"{k}={v}" for k, v in info.policy_params.items()))
    counts: dict[str, int] = {}
    for n in info.nodes:
        counts[n.state] = counts.get(n.state, 0) + 1
    print(f"  nodes: {len(info.nodes)} ({', '.join(f'{v} {k}' for k, v in sorted(counts.items()))})")
    for n in info.nodes:
        print(f"    {n.name:<12} {n.state:<10} {'' if n.job_id is None else 'job ' + str(n.job_id)}")
    jobs = ", ".join(f"{v} {k}" for k, v in sorted(info.jobs_by_state.items())) or "none"
    print(f"  jobs: {jobs}")
    if info.allocation is not None:
        a = info.allocation
        ns = a["node_seconds"]
        shrink = " (and shrink malleable jobs to give back)" if a.get("release_policy") == "shrink" else ""
        rules = [f"release idle after {a['release_idle']:g} s{shrink}" if a["release_idle"] is not None else "",
                 f"grow to {a['grow_max']} nodes" if a["grow_max"] is not None else ""]
        print(f"  allocation: Slurm job {a['slurm_job']}; {', '.join(r for r in rules if r)}")
        print(f"    node-seconds held {ns['held']:.0f}, used {ns['used']:.0f}, given back {ns['given_back']:.0f} "
              f"({count(ns['released_nodes'], 'node')} given back)")
        for c in a["companions"]:
            print(f"    companion {c['slurm_id']}: {c['state']}, {count(c['count'], 'node')} for job {c['for_job']}"
                  + (f" on {','.join(c['hosts'])}" if c["hosts"] else ""))
        if a["error"]:
            print(f"    last error: {a['error']}")
    if info.storage is not None:
        print(f"  STATE DIRECTORY: {info.storage}")
    if info.applications is not None:
        print(f"  APPLICATIONS: {info.applications}")
    if info.journal is None:
        print("  journal: none (jobs do not survive a crash of the daemon)")
    else:
        recovered = f"; {count(info.recovered_jobs, 'job')} recovered at start" if info.recovered_jobs else ""
        print(f"  journal: {info.journal}{recovered}")
    return 0


# How an order ends, in a job's history; the first after the order is its outcome.
_SETTLED = {"shrunk": True, "grown": True, "refused": False, "deferred": False, "deadline_missed": False,
            "order_failed": False, "order_dropped": False, "ended": False, "cancelled": False}


def _settles(e: JobEventInfo, since: list[JobEventInfo]) -> bool:
    """Whether the entry settles the order whose history is `since`. A shrink's missed
    deadline does not: the daemon then ends the job on hosts of its choosing, and `shrunk`
    follows once they are free (or the job's end, if it comes first)."""
    if e.event == "deadline_missed" and any(x.event == "shrink_ordered" for x in since):
        return False
    return e.event in _SETTLED


def _daemon_chose(since: list[JobEventInfo]) -> str:
    """What a shrink settled at its deadline adds to its outcome: whose choice the hosts were."""
    ordered = next((e for e in since if e.event == "shrink_ordered"), None)
    shrunk = next((e for e in since if e.event == "shrunk"), None)
    if ordered is None or shrunk is None or not any(e.event == "deadline_missed" for e in since):
        return ""
    gone = " ".join(h for h in ordered.hosts if h not in shrunk.hosts)
    return f"; the application did not answer in time, so the daemon chose the hosts to give back: {gone}"


def cmd_resize(args: argparse.Namespace) -> int:
    """Order the resize and, unless --no-wait, wait for its outcome: the application's
    answer is what decides it, and a refusal is an error (exit 1), not a success. A grow is
    not done at `grown`: the application may answer before the new processes are started,
    and their start may still fail (`grow_failed`: the hosts go back). So a grow's outcome
    is read once its start is over (the job's note is no longer Joining)."""
    with ControlClient.connect(args.state_dir, "elasticd-resize") as c:
        before = _history(c, args.job_id)
        c.request(Resize(job_id=args.job_id, nodes=args.nodes, hold=args.hold))
        ordered = any(e.event in ("shrink_ordered", "grow_ordered") and e.cause == "user"
                      for e in _history(c, args.job_id)[len(before):])
        if not ordered:
            # Already that size: no order was sent, so there is no outcome to wait for.
            held = "; held at that size" if args.hold else ""
            print(f"job {args.job_id}: already runs on {count(args.nodes, 'node')}{held}")
            return 0
        if args.no_wait:
            print(f"job {args.job_id}: ordered to {count(args.nodes, 'node')} (not waiting for the outcome)")
            return 0
        deadline = time.monotonic() + args.timeout
        info: JobInfo | None = None
        at: int | None = None  # where the outcome is in the job's history
        while time.monotonic() < deadline:
            info = _job(c, args.job_id)
            events = info.events if info is not None else []
            at = next((i for i in range(len(before), len(events)) if _settles(events[i], events[len(before):])),
                      None)
            if at is not None and not (events[at].event == "grown" and info is not None and info.note == "Joining"):
                break
            time.sleep(0.1)
        else:
            late = " (the grow's new processes were still being started)" if at is not None else ""
            return fail("elasticd", f"job {args.job_id}: ordered to {count(args.nodes, 'node')}, no outcome within "
                        f"{args.timeout:g} s{late} (`equeue -j {args.job_id} --json` shows what follows)")
    assert info is not None and at is not None
    outcome = info.events[at]
    what = f"{outcome.event.replace('_', ' ')}" + (f": {outcome.detail}" if outcome.detail else "")
    if outcome.event == "grown":
        undone = next((e for e in info.events[at + 1:] if e.event == "grow_failed"), None)
        if undone is not None:
            # Its detail names the hosts given back and the launcher's reason.
            return fail("elasticd", f"job {args.job_id}: grown to {count(outcome.nodes, 'node')}, then undone: "
                        f"{undone.detail}")
    if _SETTLED[outcome.event]:
        print(f"job {args.job_id}: {outcome.event} to {count(outcome.nodes, 'node')} ({', '.join(outcome.hosts)})"
              + _daemon_chose(events[len(before):]))
        return 0
    return fail("elasticd", f"job {args.job_id}: the resize to {count(args.nodes, 'node')} did not happen: {what}")


def _history(c: ControlClient, job_id: int) -> list[JobEventInfo]:
    info = _job(c, job_id)
    return info.events if info is not None else []


def _job(c: ControlClient, job_id: int) -> JobInfo | None:
    doc = QueueDocument.model_validate(c.request(Queue(job_ids=[job_id], all=True)))
    return doc.jobs[0] if doc.jobs else None


def cmd_release(args: argparse.Namespace) -> int:
    with ControlClient.connect(args.state_dir, "elasticd-release") as c:
        c.request(ReleaseHold(job_id=args.job_id))
    print(f"job {args.job_id}: released; the policy may resize it again")
    return 0


_COMMANDS = {"start": cmd_start, "stop": cmd_stop, "status": cmd_status, "run": run_batch, "resize": cmd_resize,
             "release": cmd_release}

if __name__ == "__main__":
    sys.exit(main())
