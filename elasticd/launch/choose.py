"""Which launcher a daemon uses (`--launcher local|ssh|srun`), built from its options.

Imported lazily by kind, so a local daemon never loads fabric and paramiko.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

from elasticd.errors import ElasticError
from elasticd.launch.base import ExitCallback, HostsGoneCallback, Launcher

LAUNCHERS = ("local", "ssh", "srun")


def make_launcher(
    kind: str,
    *,
    on_exit: ExitCallback,
    on_hosts_gone: HostsGoneCallback,
    on_host_down: Callable[[str, str], None],
    on_host_up: Callable[[str], None],
    kill_wait: float,
    options: dict[str, Any] | None = None,
    tag: str = "",
) -> Launcher:
    """`tag`: what this daemon's job processes carry to be found again (elasticd.launch.contain)."""
    options = options or {}
    if kind not in LAUNCHERS:
        raise ElasticError(f"unknown launcher {kind!r}; choose one of {', '.join(LAUNCHERS)}")
    from elasticd.launch.mpi import MpiLauncher

    # MPI jobs run one mpirun each, started through the host launcher; the rest pass through.
    def make_base(base_exit: ExitCallback, base_gone: HostsGoneCallback) -> Launcher:
        return _host_launcher(kind, base_exit, base_gone, on_host_down, on_host_up, kill_wait, options, tag)

    return MpiLauncher(make_base, on_exit, on_hosts_gone, kill_wait, cluster=kind != "local",
                       ssh_config=options.get("ssh_config"),
                       remote_python=options.get("remote_python") or sys.executable)


def _host_launcher(
    kind: str,
    on_exit: ExitCallback,
    on_hosts_gone: HostsGoneCallback,
    on_host_down: Callable[[str, str], None],
    on_host_up: Callable[[str], None],
    kill_wait: float,
    options: dict[str, Any],
    tag: str,
) -> Launcher:
    if kind == "local":
        from elasticd.launch.local import LocalLauncher

        return LocalLauncher(on_exit, on_hosts_gone, kill_wait=kill_wait, tag=tag)
    if kind == "ssh":
        from elasticd.launch.ssh import SSHLauncher, SSHOptions

        return SSHLauncher(on_exit, on_hosts_gone, on_host_down, on_host_up, kill_wait=kill_wait,
                           options=SSHOptions(**options), tag=tag)
    from elasticd.launch.srun import SrunLauncher  # make_launcher checked the kind

    return SrunLauncher(on_exit, on_hosts_gone, kill_wait=kill_wait, tag=tag, **options)
