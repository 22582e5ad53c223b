"""Which nodes a daemon manages, and at which address the applications on them reach it.

Three sources, in this order: `--local N` (virtual nodes on this machine), `--hosts` or
`--hostfile` (named nodes, outside Slurm), and the Slurm allocation the daemon runs in
(SLURM_JOB_NODELIST, SLURM_JOB_CPUS_PER_NODE). Host lists are expanded by ClusterShell's
NodeSet; syntax it cannot read goes to `scontrol show hostnames`, which knows every form
Slurm itself writes.
"""

from __future__ import annotations

import ipaddress
import logging
import os
import re
import shutil
import socket
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from elasticd.errors import ElasticError

log = logging.getLogger("elasticd.cluster")

@dataclass(frozen=True)
class Cluster:
    mode: str  # "local" | "cluster"
    nodes: tuple[str, ...]
    cpus: tuple[int, ...] | None  # per node, in the order of `nodes`, when known
    source: str  # where the node list came from, for messages

    @property
    def folded(self) -> str:
        """node[1-4] rather than four names."""
        try:
            from ClusterShell.NodeSet import NodeSet, NodeSetException

            return str(NodeSet.fromlist(self.nodes))
        except (ImportError, NodeSetException):
            return ",".join(self.nodes)


def expand_hostlist(expr: str) -> list[str]:
    """`node[1-3],gpu01` -> names, in order, without duplicates."""
    expr = expr.strip()
    if not expr:
        return []
    try:
        from ClusterShell.NodeSet import NodeSet, NodeSetException

        try:
            return list(NodeSet(expr))
        except NodeSetException:
            pass
    except ImportError:
        pass
    return _scontrol_hostnames(expr)


def _scontrol_hostnames(expr: str) -> list[str]:
    scontrol = shutil.which("scontrol")
    if scontrol is None:
        raise ElasticError(f"cannot read the host list {expr!r} (and no scontrol to ask)")
    try:
        out = subprocess.run([scontrol, "show", "hostnames", expr], capture_output=True, text=True,
                             timeout=30, check=True).stdout
    except (subprocess.SubprocessError, OSError) as exc:
        raise ElasticError(f"cannot read the host list {expr!r}: {exc}") from None
    return [line.strip() for line in out.splitlines() if line.strip()]


_CPUS_ITEM = re.compile(r"^(\d+)(?:\(x(\d+)\))?$")


def parse_cpus_per_node(text: str, count: int) -> tuple[int, ...]:
    """Slurm's compressed form: `72(x2),36` -> (72, 72, 36); must cover `count` nodes."""
    out: list[int] = []
    for item in text.split(","):
        m = _CPUS_ITEM.match(item.strip())
        if m is None:
            raise ElasticError(f"SLURM_JOB_CPUS_PER_NODE: cannot read {item!r} in {text!r}")
        out.extend([int(m.group(1))] * int(m.group(2) or 1))
    if len(out) != count:
        raise ElasticError(f"SLURM_JOB_CPUS_PER_NODE={text} describes {len(out)} nodes, the node list {count}")
    return tuple(out)


def read_hostfile(path: Path) -> tuple[list[str], list[int] | None]:
    """One host (or host list) per line, `# comments`, an optional `slots=N` per line."""
    try:
        text = path.read_text()
    except OSError as exc:
        raise ElasticError(f"cannot read hostfile {path}: {exc.strerror}") from None
    names: list[str] = []
    slots: list[int] = []
    for lineno, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        words = line.split()
        n = None
        for w in words[1:]:
            if w.startswith("slots="):
                try:
                    n = int(w[6:])
                except ValueError:
                    raise ElasticError(f"{path}:{lineno}: slots must be a number, not {w[6:]!r}") from None
            else:
                raise ElasticError(f"{path}:{lineno}: unexpected {w!r} (a line is: host [slots=N])")
        hosts = expand_hostlist(words[0])
        names.extend(hosts)
        slots.extend([n or 0] * len(hosts))
    if not names:
        raise ElasticError(f"hostfile {path} names no host")
    return names, (slots if all(slots) else None)


def discover(
    local: int | None = None,
    hosts: str | None = None,
    hostfile: Path | None = None,
    environ: Mapping[str, str] | None = None,
) -> Cluster:
    env = os.environ if environ is None else environ
    if local is not None:
        if local < 1:
            raise ElasticError("--local needs at least 1 node")
        return Cluster("local", tuple(f"node{i}" for i in range(1, local + 1)), None, f"--local {local}")
    if hosts is not None and hostfile is not None:
        raise ElasticError("give either --hosts or --hostfile, not both")
    if hosts is not None:
        names = expand_hostlist(hosts)
        return Cluster("cluster", _unique(names, "--hosts"), None, f"--hosts {hosts}")
    if hostfile is not None:
        names, slots = read_hostfile(hostfile)
        return Cluster("cluster", _unique(names, str(hostfile)), tuple(slots) if slots else None,
                       f"--hostfile {hostfile}")
    nodelist = env.get("SLURM_JOB_NODELIST") or env.get("SLURM_NODELIST")
    if nodelist:
        names = expand_hostlist(nodelist)
        cpus_text = env.get("SLURM_JOB_CPUS_PER_NODE")
        cpus = parse_cpus_per_node(cpus_text, len(names)) if cpus_text else None
        job = env.get("SLURM_JOB_ID", "?")
        return Cluster("cluster", _unique(names, "SLURM_JOB_NODELIST"), cpus,
                       f"Slurm job {job} (SLURM_JOB_NODELIST={nodelist})")
    raise ElasticError(
        "no nodes to manage: run inside a Slurm allocation (salloc/sbatch), or give "
        "--hosts node[1-4], --hostfile FILE, or --local N for virtual nodes on this machine"
    )


def _unique(names: list[str], where: str) -> tuple[str, ...]:
    seen: set[str] = set()
    dup: set[str] = set()
    for n in names:
        if n in seen:
            dup.add(n)
        seen.add(n)
    if dup:
        raise ElasticError(f"{where}: node(s) named twice: {', '.join(sorted(set(dup)))}")
    if not names:
        raise ElasticError(f"{where}: no nodes")
    return tuple(names)


# ---- addresses ---------------------------------------------------------------------------
def node_address(host: str, ssh_config: Path | None = None) -> str | None:
    """The IP address a node name stands for: the ssh config's HostName (what the SSH
    launcher connects to), then the resolver, then Slurm's NodeAddr."""
    candidates: list[str] = []
    for path in [ssh_config] if ssh_config else [Path.home() / ".ssh" / "config", Path("/etc/ssh/ssh_config")]:
        if path is not None and path.is_file():
            name = _ssh_config_hostname(path, host)
            if name and name != host:
                candidates.append(name)
                break
    candidates.append(host)
    for name in candidates:
        try:
            return str(ipaddress.ip_address(name))
        except ValueError:
            pass
        try:
            infos = socket.getaddrinfo(name, None, socket.AF_INET, socket.SOCK_STREAM)
            if infos:
                return str(infos[0][4][0])
        except OSError:
            continue
    return _slurm_node_addr(host)


def _ssh_config_hostname(path: Path, host: str) -> str | None:
    import paramiko

    try:
        name = paramiko.SSHConfig.from_path(str(path)).lookup(host).get("hostname")
        return str(name) if name else None
    except (OSError, paramiko.SSHException, ValueError) as exc:
        log.debug("cannot read %s: %s", path, exc)
        return None


def _slurm_node_addr(host: str) -> str | None:
    scontrol = shutil.which("scontrol")
    if scontrol is None:
        return None
    try:
        out = subprocess.run([scontrol, "show", "node", host], capture_output=True, text=True, timeout=10,
                             check=False).stdout
    except (subprocess.SubprocessError, OSError):
        return None
    m = re.search(r"\bNodeAddr=(\S+)", out)
    if m is None:
        return None
    try:
        return str(ipaddress.ip_address(m.group(1)))
    except ValueError:
        try:
            return socket.gethostbyname(m.group(1))
        except OSError:
            return None


def route_source(address: str) -> str:
    """This machine's address on the interface that routes to `address` (no packet is
    sent: connecting a UDP socket only asks the kernel for a route)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.connect((address, 9))
        return str(s.getsockname()[0])


def default_app_host(cluster: Cluster, ssh_config: Path | None = None) -> str:
    """Where the applications on the nodes can reach the daemon: in cluster mode the
    address of the interface that routes to the first node, in local mode loopback."""
    if cluster.mode == "local":
        return "127.0.0.1"
    first = cluster.nodes[0]
    addr = node_address(first, ssh_config)
    if addr is None:
        raise ElasticError(
            f"cannot tell which address {first} reaches this machine at (its name does not "
            "resolve); give one with --app-listen ADDRESS"
        )
    try:
        return route_source(addr)
    except OSError as exc:
        raise ElasticError(f"no route to {first} ({addr}): {exc.strerror}; give --app-listen ADDRESS") from None
