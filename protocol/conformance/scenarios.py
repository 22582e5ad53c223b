"""Reading and matching the conformance exchanges of app_channel.txt (standard library only,
so that a client written in any language can be checked with `run_client.py`)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
SCENARIOS = HERE / "app_channel.txt"
LONG = "x" * 9000


@dataclass
class Step:
    kind: str  # "send", "expect", "action"
    conn: str
    text: str
    lineno: int


@dataclass
class Scenario:
    role: str  # "daemon": the daemon is checked; "client": a client library is
    name: str
    orders: int = 0
    job: str = "{min=1,max=4} malleable"
    steps: list[Step] = field(default_factory=list)


class ScenarioError(Exception):
    """A line of the file, or an exchange, that does not match."""


def load(path: Path = SCENARIOS) -> list[Scenario]:
    out: list[Scenario] = []
    for n, raw in enumerate(path.read_text().splitlines(), 1):
        line = raw.rstrip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("== "):
            role, _, rest = line[3:].partition(" ")
            orders = re.search(r"\borders=(\d+)$", rest)
            name = rest[: orders.start()].strip() if orders else rest.strip()
            if role not in ("daemon", "client"):
                raise ScenarioError(f"{path.name}:{n}: a scenario is `== daemon NAME` or `== client NAME`")
            out.append(Scenario(role, name, int(orders.group(1)) if orders else 0))
            continue
        if not out:
            raise ScenarioError(f"{path.name}:{n}: a line before the first scenario")
        sc = out[-1]
        if line.startswith("job: "):
            sc.job = line[5:].strip()
        elif line.startswith("! "):
            sc.steps.append(Step("action", "", line[2:].strip(), n))
        elif len(line) > 2 and line[0].isupper() and line[1] in "<>" and line[2] == " ":
            sc.steps.append(Step("send" if line[1] == ">" else "expect", line[0], line[3:], n))
        else:
            raise ScenarioError(f"{path.name}:{n}: cannot read {line!r}")
    for sc in out:
        if sc.role == "client" and not sc.orders:
            sc.orders = sum(1 for s in sc.steps if s.kind == "expect" and s.text.split()[0] in ("shrink", "grow"))
    return out


def fill(text: str, values: dict[str, str]) -> str:
    """A line to send: every {NAME} replaced by its value."""
    def one(m: re.Match[str]) -> str:
        name = m.group(1)
        if name == "long":
            return LONG
        if name not in values:
            raise ScenarioError(f"{{{name}}} is not known yet where it is sent")
        return values[name]

    return re.sub(r"\{([a-z0-9]+)\}", one, text)


def match(pattern: str, line: str, values: dict[str, str]) -> None:
    """Check a received line against a pattern, binding new {NAME}s in `values`."""
    want, got = pattern.split(), line.split()
    bound: dict[str, str] = {}
    for i, w in enumerate(want):
        if w == "{...}":
            values.update(bound)
            return
        if i >= len(got):
            raise ScenarioError(f"expected {pattern!r}, got {line!r} (too short)")
        m = re.fullmatch(r"([^{]*)\{([a-z0-9*]+)\}", w)
        if m is None:
            if w != got[i]:
                raise ScenarioError(f"expected {pattern!r}, got {line!r} (word {i + 1})")
            continue
        prefix, name = m.groups()
        if not got[i].startswith(prefix):
            raise ScenarioError(f"expected {pattern!r}, got {line!r} (word {i + 1})")
        value = got[i][len(prefix):]
        if name == "*":
            continue
        known = values.get(name, bound.get(name))
        if known is not None and known != value:
            raise ScenarioError(f"expected {pattern!r} with {{{name}}} = {known}, got {line!r}")
        bound[name] = value
    if len(got) != len(want):
        raise ScenarioError(f"expected {pattern!r}, got {line!r} (too long)")
    values.update(bound)
