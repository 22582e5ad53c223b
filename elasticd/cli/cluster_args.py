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

from elasticd.allocation import held_nodes
from elasticd.cli.common import positive_seconds
from elasticd.cluster import Cluster, default_app_host, expand_hostlist
from elasticd.core.allocation_plan import AllocationRules
from elasticd.errors import ElasticError
from elasticd.launch.choose import LAUNCHERS


def add_cluster_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("cluster mode (default inside a Slurm allocation)")
    g.add_argument("--hosts", metavar="LIST", help="manage these nodes, e.g. node[1-4] (outside Slurm)")
    g.add_argument("--hostfile", type=Path, metavar="FILE",
                   help="manage the nodes in FILE, one per line (`host [slots=N]`)")
    g.add_argument("--release-idle", type=positive_seconds, default=None, metavar="S",
                   help="inside a Slurm allocation: give nodes idle S seconds, with nothing pending that "
                   "could use them, back to Slurm (the allocation shrinks; its first node stays)")
    g.add_argument("--release-policy", choices=("idle", "shrink"), default="idle",
                   help="with --release-idle: give back only nodes left idle (default), or also shrink "
                   "malleable jobs held above their preferred size that long, to give their nodes back")
    g.add_argument("--grow-allocation", type=int, default=None, metavar="MAX_NODES",
                   help="inside a Slurm allocation: when pending work waits for nodes, ask Slurm for more "
                   "through companion allocations, up to MAX_NODES held in all; given back when idle "
                   "(--release-idle, else after 60 s)")
    g.add_argument("--sbatch-args", default="", metavar="ARGS",
                   help="options for the companion allocations' sbatch, as one word: "
                   "--sbatch-args='--partition=big --account=p1'")
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
    g.add_argument("--connect-timeout", type=positive_seconds, default=10.0, metavar="S",
                   help="seconds to wait for a node's SSH connection (default 10)")
    g.add_argument("--node-timeout", type=positive_seconds, default=10.0, metavar="S",
                   help="a node silent this long is marked down (default 10)")
    g.add_argument("--node-retry", type=positive_seconds, default=10.0, metavar="S",
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
    release_idle: float | None = None
    release_policy: str = "idle"
    grow_allocation: int | None = None
    sbatch_args: str = ""

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
        if self.release_idle is not None:
            out += ["--release-idle", f"{self.release_idle:g}", "--release-policy", self.release_policy]
        if self.grow_allocation is not None:
            out += ["--grow-allocation", str(self.grow_allocation)]
        if self.sbatch_args:
            out.append(f"--sbatch-args={self.sbatch_args}")  # a value starting with -- needs the =
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
    resizing = args.release_idle is not None or args.grow_allocation is not None
    if resizing and not (cluster.mode == "cluster" and cluster.source.startswith("Slurm job")):
        raise ElasticError("--release-idle and --grow-allocation resize the daemon's own Slurm allocation: "
                           "run `elasticd start` inside salloc or sbatch, without --hosts/--hostfile/--local")
    if args.grow_allocation is not None and args.grow_allocation <= len(cluster.nodes):
        raise ElasticError(f"--grow-allocation {args.grow_allocation}: the allocation already holds "
                           f"{len(cluster.nodes)} nodes; give the most it may hold in all, at least "
                           f"{len(cluster.nodes) + 1}")
    if args.release_policy != "idle" and args.release_idle is None:
        raise ElasticError("--release-policy says how --release-idle gives nodes back: give --release-idle S too")
    if args.sbatch_args and args.grow_allocation is None:
        raise ElasticError("--sbatch-args is for the companion allocations of --grow-allocation: "
                           "add --grow-allocation MAX_NODES")
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
        release_idle=args.release_idle, release_policy=args.release_policy, grow_allocation=args.grow_allocation,
        sbatch_args=args.sbatch_args,
    )


def nodes_held_now(cluster: Cluster, state_dir: Path) -> Cluster:
    """Inside Slurm, the nodes the allocation holds now: its NodeList as scontrol says (the
    daemon may have given nodes back before a restart) and the running companion
    allocations recorded in the state directory (it may have grown)."""
    if cluster.mode != "cluster" or not cluster.source.startswith("Slurm job"):
        return cluster
    from elasticd.daemon.allocation_resize import running_companion_hosts

    job = os.environ.get("SLURM_JOB_ID", "")
    now = held_nodes(job) if job else None
    names = list(cluster.nodes) if now is None else expand_hostlist(now)
    names += [h for h in running_companion_hosts(state_dir) if h not in names]
    if tuple(names) == cluster.nodes:
        return cluster
    return Cluster(cluster.mode, tuple(names), None, f"Slurm job {job} (now {','.join(names)})")


def allocation_rules(settings: ClusterSettings) -> AllocationRules | None:
    if settings.release_idle is None and settings.grow_allocation is None:
        return None
    return AllocationRules(release_idle=settings.release_idle, grow_max=settings.grow_allocation,
                           shrink_malleable=settings.release_policy == "shrink")
