"""`elasticd start` options for cluster mode, and what they resolve to.

Resolved once, in the command the user ran (so mistakes are reported there, not in a
detached daemon's log), then handed to the daemon process as explicit options.
"""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from elasticd.cluster import Cluster, default_app_host
from elasticd.errors import ElasticError
from elasticd.launch.choose import LAUNCHERS


def add_cluster_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("cluster mode (default inside a Slurm allocation)")
    g.add_argument("--hosts", metavar="LIST", help="manage these nodes, e.g. node[1-4] (outside Slurm)")
    g.add_argument("--hostfile", type=Path, metavar="FILE",
                   help="manage the nodes in FILE, one per line (`host [slots=N]`)")
    g.add_argument("--launcher", choices=LAUNCHERS, default=None,
                   help="how job processes start: ssh (cluster default), srun (job steps of the "
                   "allocation), local (--local default)")
    g.add_argument("--app-listen", metavar="ADDRESS", default=None,
                   help="address the applications on the nodes reach the daemon at (default: in "
                   "cluster mode the address of the interface that routes to the first node)")
    g.add_argument("--ssh-config", type=Path, metavar="FILE",
                   default=Path(os.environ["ELASTIC_SSH_CONFIG"]) if os.environ.get("ELASTIC_SSH_CONFIG") else None,
                   help="ssh_config for reaching the nodes (default: $ELASTIC_SSH_CONFIG, else "
                   "~/.ssh/config and /etc/ssh/ssh_config)")
    g.add_argument("--connect-timeout", type=float, default=10.0, metavar="S",
                   help="seconds to wait for a node's SSH connection (default 10)")
    g.add_argument("--node-timeout", type=float, default=10.0, metavar="S",
                   help="a node silent this long is marked down (default 10)")
    g.add_argument("--node-retry", type=float, default=10.0, metavar="S",
                   help="seconds between attempts to reach a down node again (default 10)")
    g.add_argument("--remote-python", default=None, metavar="PATH",
                   help="Python on the nodes for elastic's small process agent (default: this "
                   "Python's path, as on a shared file system)")


@dataclass(frozen=True)
class ClusterSettings:
    mode: str
    launcher: str
    app_host: str
    ssh_config: Path | None
    connect_timeout: float
    node_timeout: float
    node_retry: float
    remote_python: str | None
    hosts: str | None
    hostfile: Path | None

    def launcher_options(self) -> dict[str, Any]:
        if self.launcher != "ssh":
            return {}
        opts: dict[str, Any] = {
            "ssh_config": self.ssh_config,
            "connect_timeout": self.connect_timeout,
            "node_timeout": self.node_timeout,
            "retry_interval": self.node_retry,
        }
        if self.remote_python:
            opts["remote_python"] = self.remote_python
        return opts

    def passthrough(self) -> list[str]:
        """The same settings as options for the detached daemon process."""
        out = ["--launcher", self.launcher, "--app-listen", self.app_host,
               "--connect-timeout", f"{self.connect_timeout:g}", "--node-timeout", f"{self.node_timeout:g}",
               "--node-retry", f"{self.node_retry:g}"]
        if self.hosts:
            out += ["--hosts", self.hosts]
        if self.hostfile:
            out += ["--hostfile", str(self.hostfile.resolve())]
        if self.ssh_config:
            out += ["--ssh-config", str(self.ssh_config.resolve())]
        if self.remote_python:
            out += ["--remote-python", self.remote_python]
        return out


def cluster_settings(args: argparse.Namespace, cluster: Cluster) -> ClusterSettings:
    launcher = args.launcher or ("local" if cluster.mode == "local" else "ssh")
    if launcher == "srun" and not os.environ.get("SLURM_JOB_ID"):
        raise ElasticError("--launcher srun starts job steps of a Slurm allocation: run it inside salloc or sbatch")
    if cluster.mode == "local" and launcher != "local":
        raise ElasticError(f"--local runs virtual nodes on this machine; --launcher {launcher} needs real nodes "
                           "(--hosts, --hostfile or a Slurm allocation)")
    if cluster.mode == "cluster" and launcher == "local":
        raise ElasticError("--launcher local starts every process on this machine; for that use --local N")
    if args.ssh_config is not None and not args.ssh_config.is_file():
        raise ElasticError(f"--ssh-config {args.ssh_config}: no such file")
    for name in ("connect_timeout", "node_timeout", "node_retry"):
        if getattr(args, name) <= 0:
            raise ElasticError(f"--{name.replace('_', '-')} must be positive")
    if args.app_listen:
        app_host = args.app_listen
    elif cluster.mode == "local":
        app_host = args.listen
    else:
        app_host = default_app_host(cluster, args.ssh_config)
    return ClusterSettings(
        mode=cluster.mode, launcher=launcher, app_host=app_host, ssh_config=args.ssh_config,
        connect_timeout=args.connect_timeout, node_timeout=args.node_timeout, node_retry=args.node_retry,
        remote_python=args.remote_python, hosts=args.hosts, hostfile=args.hostfile,
    )
