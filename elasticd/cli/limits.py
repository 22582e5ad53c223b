"""`elasticd start` options for the daemon's resource limits.

One table drives the options, their pass-through to the detached daemon and the
DaemonConfig fields they set, so a new limit is one line here; the defaults are
DaemonConfig's own, so the command line and a daemon built in code agree.
"""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Limit:
    field: str  # DaemonConfig field; the option is --field-with-dashes
    kind: Callable[[str], Any]
    least: float
    help: str

    @property
    def flag(self) -> str:
        return "--" + self.field.replace("_", "-")


LIMITS = (
    Limit("max_connections", int, 1, "connections each channel (control, applications) holds at once"),
    Limit("max_unauthenticated", int, 1,
          "connections per channel that have not said hello yet; past it the oldest is dropped"),
    Limit("hello_timeout", float, 0.1, "seconds a new connection has to say hello"),
    Limit("max_line_bytes", int, 1024, "longest control-channel request line"),
    Limit("max_app_line_bytes", int, 256, "longest application-channel line"),
    Limit("max_queued_jobs", int, 1, "pending jobs the queue holds; a submit past it is refused (queue_full)"),
)


def _defaults() -> dict[str, Any]:
    from elasticd.daemon.config import DaemonConfig

    return {f.name: f.default for f in dataclasses.fields(DaemonConfig) if f.name in {x.field for x in LIMITS}}


def _checked(limit: Limit) -> Callable[[str], Any]:
    def parse(text: str) -> Any:
        try:
            value = limit.kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a {limit.kind.__name__}") from None
        if value < limit.least:
            raise argparse.ArgumentTypeError(f"must be at least {limit.least:g}")
        return value

    return parse


def add_limit_args(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("limits", "bounds that keep misbehaving clients from exhausting the daemon")
    defaults = _defaults()
    for limit in LIMITS:
        group.add_argument(limit.flag, dest=limit.field, type=_checked(limit), default=defaults[limit.field],
                           metavar="N" if limit.kind is int else "S",
                           help=f"{limit.help} (default {defaults[limit.field]:g})")


def limit_passthrough(args: argparse.Namespace) -> list[str]:
    """The options again, for the detached `start --foreground` process."""
    out: list[str] = []
    for limit in LIMITS:
        out += [limit.flag, str(getattr(args, limit.field))]
    return out


def limit_settings(args: argparse.Namespace) -> dict[str, Any]:
    """DaemonConfig keyword arguments."""
    return {limit.field: getattr(args, limit.field) for limit in LIMITS}


# Descriptors besides connections: listening sockets, the log, job output files and
# process handles, launcher connections.
FD_MARGIN = 256


def ensure_fd_room(max_connections: int) -> str | None:
    """Raise the soft descriptor limit so both channels can be full at once; a warning if
    the hard limit does not allow it (then accept() fails before max_connections does)."""
    import resource

    need = 2 * max_connections + FD_MARGIN
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < need:
        target = need if hard == resource.RLIM_INFINITY else min(need, hard)
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        soft = target
    if soft != resource.RLIM_INFINITY and soft < need:
        return (f"the descriptor limit ({soft}) is below what --max-connections {max_connections} needs "
                f"({need}); raise `ulimit -n` or lower --max-connections")
    return None
