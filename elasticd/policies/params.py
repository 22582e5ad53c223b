"""Policy parameters: declared once with their seed default, set from a command line or a
config file, validated with one clear line per problem.

A value arrives either as text (`--policy-param theta=0.6`) or already typed (a TOML
file); both go through the same `Param.convert`, so `theta = "0.6"` in a file and
`theta=0.6` on a command line mean the same thing and fail the same way.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from elasticd.errors import ElasticError

_TRUE = {"true", "yes", "on", "1"}
_FALSE = {"false", "no", "off", "0"}


class PolicyParamError(ElasticError, ValueError):
    """Bad policy parameters; `problems` holds one line per problem, naming the parameter."""

    code = "bad_policy_params"

    def __init__(self, problems: list[str]) -> None:
        super().__init__("; ".join(problems))
        self.problems = problems

    def __reduce__(self) -> tuple[type, tuple[list[str]]]:  # whole across processes (sim workers)
        return type(self), (self.problems,)


@dataclass(frozen=True)
class Param:
    name: str
    type: type  # int, float, bool or str
    default: object
    help: str
    low: float | None = None  # inclusive bounds for numbers
    high: float | None = None
    choices: tuple[str, ...] = ()
    allow_inf: bool = False  # a float that may be `inf` (no limit)

    def convert(self, value: object) -> object:
        """The typed value, or ValueError saying what was expected."""
        v = self._typed(value)
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            if math.isnan(v) or (math.isinf(v) and not self.allow_inf):
                raise ValueError(f"must be a finite number, not {value!r}")
            if self.low is not None and v < self.low:
                raise ValueError(f"must be at least {_num(self.low)}, not {_num(v)}")
            if self.high is not None and v > self.high:
                raise ValueError(f"must be at most {_num(self.high)}, not {_num(v)}")
        if self.choices and v not in self.choices:
            raise ValueError(f"must be one of {', '.join(self.choices)}, not {value!r}")
        return v

    def _typed(self, value: object) -> object:
        if self.type is bool:
            if isinstance(value, bool):
                return value
            if isinstance(value, str) and value.strip().lower() in _TRUE | _FALSE:
                return value.strip().lower() in _TRUE
            raise ValueError(f"must be true or false, not {value!r}")
        if self.type is int:
            if isinstance(value, int) and not isinstance(value, bool):
                return value
            if isinstance(value, str):
                try:
                    return int(value.strip())
                except ValueError:
                    pass
            raise ValueError(f"must be an integer, not {value!r}")
        if self.type is float:
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                return float(value)
            if isinstance(value, str):
                text = value.strip().lower()
                if text in ("inf", "infinity", "unlimited"):
                    return math.inf
                try:
                    return float(text)
                except ValueError:
                    pass
            kind = "a number or inf" if self.allow_inf else "a number"
            raise ValueError(f"must be {kind}, not {value!r}")
        if isinstance(value, str):
            return value.strip().lower() if self.choices else value
        raise ValueError(f"must be text, not {value!r}")

    def describe(self) -> str:
        """`name=default` as a user would type it."""
        d = self.default
        if isinstance(d, bool):
            text = "true" if d else "false"
        elif isinstance(d, float) and math.isinf(d):
            text = "inf"
        else:
            text = _num(d) if isinstance(d, (int, float)) else str(d)
        return f"{self.name}={text}"


def _num(x: object) -> str:
    if isinstance(x, float) and x.is_integer() and not math.isinf(x):
        return f"{x:.1f}"
    return f"{x:g}" if isinstance(x, float) else str(x)


def normalise_key(key: str) -> str:
    """`share-factor` and `Share_Factor` name `share_factor`: users type both."""
    return key.strip().lower().replace("-", "_")


def resolve(
    policy: str, declared: Iterable[Param], given: Mapping[str, object]
) -> dict[str, object]:
    """Every declared parameter's value: the given one, converted, or its default.

    Unknown names and bad values are all reported at once, so a config file with three
    mistakes is fixed in one round.
    """
    params = {p.name: p for p in declared}
    values = {name: p.default for name, p in params.items()}
    problems: list[str] = []
    for raw_key, raw in given.items():
        key = normalise_key(raw_key)
        p = params.get(key)
        if p is None:
            known = ", ".join(params) if params else "none"
            problems.append(f"policy {policy}: unknown parameter {raw_key!r} (its parameters: {known})")
            continue
        try:
            values[key] = p.convert(raw)
        except ValueError as exc:
            problems.append(f"policy {policy}: {key}: {exc}")
    if problems:
        raise PolicyParamError(problems)
    return values


def parse_assignments(items: Iterable[str]) -> dict[str, str]:
    """`KEY=VALUE` strings (as given to `--policy-param`) to a dict; later ones win."""
    out: dict[str, str] = {}
    problems: list[str] = []
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            problems.append(f"--policy-param {item!r}: expected KEY=VALUE")
            continue
        out[normalise_key(key)] = value.strip()
    if problems:
        raise PolicyParamError(problems)
    return out
