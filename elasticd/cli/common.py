"""What every command-line tool shares: the --state-dir option and error reporting."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

from elasticd.errors import DaemonError, ElasticError

# A year: a duration option past it is a typo, and one near float's range overflows
# the clock arithmetic it goes into (`--kill-wait 1e308` made `elasticd stop` crash).
MAX_SECONDS = 366 * 86400.0


def seconds(text: str) -> float:
    """A duration option: a number of seconds, 0 or more, at most a year."""
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not 0 <= v <= MAX_SECONDS:
        raise argparse.ArgumentTypeError(f"{text} must be a number of seconds from 0 to {MAX_SECONDS:.0f} (a year)")
    return v


def positive_seconds(text: str) -> float:
    v = seconds(text)
    if v == 0:
        raise argparse.ArgumentTypeError("must be more than 0 seconds")
    return v


# What argparse names the type in its messages ("invalid seconds value").
seconds.__name__ = positive_seconds.__name__ = "seconds"


def add_state_dir(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--state-dir",
        type=Path,
        default=None,
        help="daemon state directory (default: $ELASTIC_STATE_DIR, else ~/.elastic/local "
        "or ~/.elastic/slurm-$SLURM_JOB_ID inside an allocation)",
    )


def fail(prog: str, message: str, details: list[str] | None = None, code: int = 1) -> int:
    print(f"{prog}: error: {message}", file=sys.stderr)
    for d in details or []:
        if d not in message:  # a single problem is often the message itself: said once
            print(f"  {d}", file=sys.stderr)
    return code


def run_tool(prog: str, body: Callable[[], int]) -> int:
    """Turn the package's errors into one clear message and an exit code, never a traceback."""
    try:
        return body()
    except DaemonError as exc:
        return fail(prog, f"{exc} [{exc.code}]", exc.details)
    except ElasticError as exc:
        return fail(prog, str(exc), getattr(exc, "problems", None))
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 0


def add_policy_params(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--policy-param", action="append", default=[], metavar="KEY=VALUE",
                        help="set a policy parameter (repeatable); `elasticd policies` lists them")
    parser.add_argument("--policy-config", type=Path, default=None, metavar="FILE",
                        help="TOML file with [policy.NAME] (or [policy.FAMILY]) tables of parameters")


def policy_settings(name: str, config: Path | None, assignments: list[str],
                    min_resize_interval: float | None = None) -> dict[str, object]:
    """Every parameter's effective value, or an ElasticError naming each bad one."""
    from elasticd.policies import PolicyParamError
    from elasticd.policies.config import policy_params

    try:
        return dict(policy_params(name, config, assignments, min_resize_interval))
    except PolicyParamError as exc:
        raise PolicyArgumentError(exc.problems) from None


class PolicyArgumentError(ElasticError):
    code = "bad_policy_params"

    def __init__(self, problems: list[str]) -> None:
        super().__init__("invalid policy parameters")
        self.problems = problems
