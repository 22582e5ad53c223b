"""Starting a detached daemon: shared by `elasticd start`, `elasticd run` and the tests."""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import time
from pathlib import Path

from elasticd.cluster import Cluster, discover
from elasticd.errors import ElasticError
from elasticd.statedir import LOG_FILE, DaemonRecord, prepare, read_record


def cluster_for(args: argparse.Namespace) -> Cluster:
    """The nodes a daemon started with these options manages (see elasticd.cluster)."""
    if getattr(args, "local", None) is None and not hasattr(args, "hosts"):
        # `elasticd run` works on virtual nodes only.
        raise ElasticError(
            "say how many virtual nodes to manage with --local N "
            "(inside a Slurm allocation, use `elasticd start`: see deploy/sbatch-elastic.sh)"
        )
    if args.local is not None and (getattr(args, "hosts", None) or getattr(args, "hostfile", None)):
        raise ElasticError("--local manages virtual nodes; it does not go with --hosts or --hostfile")
    return discover(args.local, getattr(args, "hosts", None), getattr(args, "hostfile", None))


def node_names_for(args: argparse.Namespace) -> list[str]:
    return list(cluster_for(args).nodes)


def tuning_args(args: argparse.Namespace) -> list[str]:
    out = ["--order-deadline", str(args.order_deadline), "--min-resize-interval", str(args.min_resize_interval),
           "--schedule-interval", str(args.schedule_interval), "--min-free-space", str(args.min_free_space),
           "--output-cap", str(args.output_cap)]
    for item in getattr(args, "policy_param", []) or []:
        out += ["--policy-param", item]
    if getattr(args, "policy_config", None):
        out += ["--policy-config", str(Path(args.policy_config).resolve())]
    return out


LOGS_KEPT = 5


def _rotate(log_path: Path) -> None:
    """One log per daemon start: daemon.log is this one, daemon.log.1 the one before, ...
    (the oldest beyond LOGS_KEPT go)."""
    for i in range(LOGS_KEPT - 1, 0, -1):
        older = log_path.with_name(f"{log_path.name}.{i}")
        if older.exists():
            older.replace(log_path.with_name(f"{log_path.name}.{i + 1}"))
    if log_path.exists() and log_path.stat().st_size > 0:
        log_path.replace(log_path.with_name(f"{log_path.name}.1"))


def _start_failure(state_dir: Path, log_path: Path, code: int) -> str:
    """Why a daemon exited at start, never an empty line: its log's last lines, or, when it
    left none (its log could not be written: a full disk), what can be seen from here."""
    from elasticd.daemon.room import START_NEEDS, free_bytes, full_message

    try:
        tail = [t for t in log_path.read_text(errors="replace").strip().splitlines() if t.strip()][-5:]
    except OSError as exc:
        tail = [f"(its log {log_path} cannot be read: {exc.strerror or exc})"]
    how = f"signal {-code}" if code < 0 else f"status {code}"
    cause = _cause(tail)
    if cause is not None:
        # The cause, on one line, before where to read more: the log lines before it (what
        # the start had done, at INFO) are the detail, and stay in the log.
        return f"{cause} (the daemon exited at start, {how}; its log is {log_path})"
    if tail:
        return f"the daemon exited at start ({how}):\n  " + "\n  ".join(tail)
    free = free_bytes(state_dir)
    if free is not None and free < START_NEEDS:
        return f"the daemon exited at start ({how}) and could not write its log: {full_message(state_dir, free)}"
    return (f"the daemon exited at start ({how}) and left nothing in its log {log_path}; run "
            "`elasticd start --foreground` with the same options to see why")


# What a daemon that refuses to start says last: `elasticd: error: ...` (the CLI's own
# error line, from the foreground start), or a log record at ERROR or CRITICAL.
_ERROR_LINE = re.compile(r"^elasticd: error: (?P<cause>.+)$|^\S+ \S+ \S+ (?:ERROR|CRITICAL) (?P<logged>.+)$")


def _cause(tail: list[str]) -> str | None:
    """The last error line of a daemon's log tail, without its prefix; None if none is."""
    for line in reversed(tail):
        m = _ERROR_LINE.match(line.strip())
        if m is not None:
            return m["cause"] or m["logged"]
    return None


def start_detached(state_dir: Path, local: int | None, policy: str, kill_wait: float, listen: str = "127.0.0.1",
                   log_level: str = "INFO", timeout: float = 20.0, extra: list[str] | None = None) -> DaemonRecord:
    """Start `elasticd start --foreground` in its own session and wait for its address."""
    state_dir = prepare(state_dir)
    log_path = state_dir / LOG_FILE
    # local=None: cluster mode, the nodes given in `extra` or found in the Slurm environment.
    nodes = ["--local", str(local)] if local is not None else []
    cmd = [sys.executable, "-m", "elasticd.cli.elasticd_main", "start", "--foreground",
           *nodes, "--policy", policy, "--kill-wait", str(kill_wait),
           "--listen", listen, "--log-level", log_level, "--state-dir", str(state_dir), *(extra or [])]
    _rotate(log_path)
    fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)  # it names jobs, hosts, clients
    with os.fdopen(fd, "wb") as logf:
        child = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=logf, stderr=logf,
                                 start_new_session=True, close_fds=True)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        rec = read_record(state_dir)
        if rec is not None and rec.pid == child.pid:
            return rec
        if child.poll() is not None:
            raise ElasticError(_start_failure(state_dir, log_path, child.returncode))
        time.sleep(0.02)
    child.terminate()
    raise ElasticError(f"the daemon did not come up within {timeout:.0f} s; see {log_path}")
