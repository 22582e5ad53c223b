"""Speedup and reconfiguration-cost models: protocol-level data, because a job file declares
its model (`model = { speedup = "amdahl:0.05", ... }`), the core scales the job's time limit
with it, the policies predict with it, the simulator runs jobs by it and the synthetic
application follows it in real time: one arithmetic for all of them.

Work is measured in seconds on one node: a job with work W on n nodes runs W / S(n).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache


@dataclass(frozen=True)
class Amdahl:
    """S(n) = 1 / (f + (1 - f) / n) for a serial fraction f."""

    serial_fraction: float

    def __post_init__(self) -> None:
        if not 0.0 <= self.serial_fraction <= 1.0:
            raise ValueError("serial fraction must be in [0, 1]")

    def speedup(self, n: int) -> float:
        f = self.serial_fraction
        return 1.0 / (f + (1.0 - f) / n)

    @property
    def text(self) -> str:
        """As a job file writes it (parse_speedup gives back this very model)."""
        return "linear" if self.serial_fraction == 0 else f"amdahl:{self.serial_fraction!r}"


@dataclass(frozen=True)
class Rho:
    """The rho scalability model of the MEBF paper: rho = 0 is linear, larger rho is
    sub-linear. The paper gives no closed form; elastic uses S(n) = n ** (1 - rho),
    which is linear at rho = 0 and matches the shape of its Figure 3a for rho in [0, 0.3].
    """

    rho: float

    def __post_init__(self) -> None:
        if not 0.0 <= self.rho < 1.0:
            raise ValueError("rho must be in [0, 1)")

    def speedup(self, n: int) -> float:
        return math.pow(n, 1.0 - self.rho)

    @property
    def text(self) -> str:
        return f"rho:{self.rho!r}"


SpeedupModel = Amdahl | Rho


@dataclass(frozen=True)
class ReconfigCost:
    """MEBF's overheads: data redistribution T_dr = alpha*dN + beta/N (N = nodes involved,
    old + new) and process creation T_p = b*dN; the job makes no progress meanwhile."""

    alpha: float = 0.0
    beta: float = 0.0
    b: float = 0.0

    def seconds(self, n_old: int, n_new: int) -> float:
        dn = abs(n_new - n_old)
        if dn == 0:
            return 0.0
        return self.alpha * dn + self.beta / (n_old + n_new) + self.b * dn


@lru_cache(maxsize=4096)
def parse_speedup(text: str) -> SpeedupModel:
    """`amdahl:0.05`, `rho:0.1` or `linear` (cached: specs are parsed per pass)."""
    kind, sep, value = text.partition(":")
    kind = kind.strip().lower()
    try:
        if kind == "linear" and not sep:
            return Amdahl(0.0)
        if kind == "amdahl":
            return Amdahl(float(value))
        if kind == "rho":
            return Rho(float(value))
    except ValueError as exc:
        raise ValueError(f"speedup model {text!r}: {exc}") from None
    raise ValueError(f"unknown speedup model {text!r}: use amdahl:F, rho:R or linear")


class WorkProgress:
    """A job's remaining work under changing sizes; the time is always passed in.

    The synthetic application feeds it the real clock, the simulator the virtual one, so a
    real run and a simulated one advance by the very same arithmetic.
    """

    __slots__ = ("cost", "frozen_until", "last", "model", "remaining", "size")

    def __init__(self, work: float, model: SpeedupModel, cost: ReconfigCost, size: int, now: float) -> None:
        self.remaining = work
        self.model = model
        self.cost = cost
        self.size = size
        self.last = now
        self.frozen_until = now

    def clone(self) -> WorkProgress:
        """An independent copy, for what-if questions (copy.copy is slow on slotted objects)."""
        q = WorkProgress.__new__(WorkProgress)
        q.remaining, q.model, q.cost = self.remaining, self.model, self.cost
        q.size, q.last, q.frozen_until = self.size, self.last, self.frozen_until
        return q

    # max(a, b) is written `b if b > a else a` below (what max returns, without the call):
    # the simulator advances a job's progress several times per resize.
    def advance(self, now: float) -> None:
        last, frozen = self.last, self.frozen_until
        start = frozen if frozen > last else last  # noqa: FURB136
        if now > start:
            self.remaining -= self.model.speedup(self.size) * (now - start)
        if now > last:
            self.last = now

    def resize(self, new_size: int, now: float) -> None:
        """Change size at `now`; progress stops for the reconfiguration cost."""
        self.advance(now)
        frozen = self.frozen_until
        self.frozen_until = (frozen if frozen > now else now) + self.cost.seconds(self.size, new_size)  # noqa: FURB136
        self.size = new_size

    def end_time(self, now: float) -> float:
        """When the work will be done if the size does not change again."""
        self.advance(now)
        if self.remaining <= 0:
            return now
        frozen = self.frozen_until
        return (frozen if frozen > now else now) + self.remaining / self.model.speedup(self.size)  # noqa: FURB136


def predicted_runtime(
    work: float,
    model: SpeedupModel,
    history: list[tuple[float, int]],
    cost: ReconfigCost = ReconfigCost(),
) -> float:
    """Run time of a job with `work` whose size changes as `history` says.

    history: (seconds since start, nodes) pairs, the first at 0; a change that comes after
    the job would have finished is ignored. Each change costs `cost` seconds of no progress.
    """
    if not history or history[0][0] != 0:
        raise ValueError("history must start at time 0")
    p = WorkProgress(work, model, cost, history[0][1], 0.0)
    for when, size in history[1:]:
        end = p.end_time(p.last)
        if end <= when:
            return end
        if size != p.size:
            p.resize(size, when)
    return p.end_time(p.last)
