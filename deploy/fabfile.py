"""Fabric tasks that check a cluster is ready for elastic: every node reachable over SSH,
answering under its own name, with elastic's Python environment at the same path.

    fab -r deploy --ssh-config "$ELASTIC_SSH_CONFIG" -H node1,node2,node3 check
    python deploy/fabfile.py [--hosts 'node[1-3]'] [--ssh-config FILE] [--python PATH]

Without --hosts the nodes come from SLURM_JOB_NODELIST (inside an allocation). --python
defaults to the Python running this file, i.e. the virtualenv elastic is installed in:
on a cluster it must be on a file system the nodes share (home), which is what this
checks. The exit status is 0 only when every node passes.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from fabric import Config, Connection, task

# What the node must be able to import: the client library jobs use, and the daemon's
# package (whose Python also runs elastic's small process agent on the node).
_PROBE = "import sys, elastic_apps, elasticd; print(sys.version.split()[0], elasticd.__version__)"


@dataclass(frozen=True)
class NodeCheck:
    host: str
    ok: bool
    detail: str


def check_node(conn: Connection, python: str, timeout: float = 20.0) -> NodeCheck:
    """One node: reachable, says its own name, runs `python` with elastic importable."""
    host = conn.original_host  # the node's name, not the address ssh_config maps it to
    try:
        name = conn.run("hostname", hide=True, warn=True, timeout=timeout, in_stream=False)
    except Exception as exc:  # noqa: BLE001 - any failure to run means: not reachable
        return NodeCheck(host, False, f"unreachable: {type(exc).__name__}: {exc}")
    if name.failed:
        return NodeCheck(host, False, f"`hostname` failed: {name.stderr.strip()}")
    got = name.stdout.strip()
    short = got.split(".")[0]
    if host not in (got, short):
        # Allowed (an alias in ssh_config), but worth seeing.
        where = f"answers as {got}"
    else:
        where = f"is {got}"
    probe = conn.run(f"{python} -c '{_PROBE}'", hide=True, warn=True, timeout=timeout, in_stream=False)
    if probe.failed:
        err = (probe.stderr.strip().splitlines() or ["no message"])[-1]
        return NodeCheck(host, False, f"{where}; {python} cannot run elastic: {err}")
    py_version, version = probe.stdout.split()
    return NodeCheck(host, True, f"{where}; Python {py_version}, elastic {version} at {python}")


def check_nodes(hosts: Iterable[str], ssh_config: str | None = None, python: str | None = None,
                connect_timeout: int = 10) -> list[NodeCheck]:
    """Every node at once (one connection each), in the order given."""
    python = python or sys.executable
    config = Config(runtime_ssh_path=ssh_config) if ssh_config else Config()
    hosts = list(hosts)

    def one(h: str) -> NodeCheck:
        conn = Connection(h, config=config, connect_timeout=connect_timeout)
        try:
            return check_node(conn, python)
        finally:
            conn.close()

    with ThreadPoolExecutor(max_workers=min(32, max(1, len(hosts)))) as pool:
        return list(pool.map(one, hosts))


@task
def check(c, python=None):
    """Is this node reachable and does it have elastic's Python environment?"""
    result = check_node(c, python or sys.executable)
    print(f"{result.host:<16} {'ok' if result.ok else 'FAILED':<7} {result.detail}")
    if not result.ok:
        raise SystemExit(1)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--hosts", help="node list, e.g. node[1-3] (default: $SLURM_JOB_NODELIST)")
    ap.add_argument("--ssh-config", default=os.environ.get("ELASTIC_SSH_CONFIG"),
                    help="ssh_config (default: $ELASTIC_SSH_CONFIG, else ~/.ssh/config)")
    ap.add_argument("--python", default=None, help="Python to check on the nodes (default: this one)")
    args = ap.parse_args(argv)
    hostlist = args.hosts or os.environ.get("SLURM_JOB_NODELIST")
    if not hostlist:
        ap.error("give --hosts, or run inside a Slurm allocation")
    from ClusterShell.NodeSet import NodeSet

    results = check_nodes(list(NodeSet(hostlist)), args.ssh_config, args.python)
    for r in results:
        print(f"{r.host:<16} {'ok' if r.ok else 'FAILED':<7} {r.detail}")
    bad = [r.host for r in results if not r.ok]
    print(f"{len(results) - len(bad)} of {len(results)} nodes ready" + (f"; not ready: {','.join(bad)}" if bad else ""))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
