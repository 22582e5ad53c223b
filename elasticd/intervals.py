"""Paired comparisons over seeds, with a 95 % confidence interval.

Two policies run with the same seed share their workload (the same jobs made malleable, the
same speedups), so they are compared seed by seed: d_s = a_s / b_s - 1, the relative change
of a metric in seed s, and the interval is Student's t on those differences,
mean(d) +/- t(0.975, n - 1) * sd(d) / sqrt(n). A cell whose interval includes 0 is not told
apart from the seeds' noise ("n.d.": not different).

The t quantiles are the two-sided 95 % critical values tabulated in the NIST/SEMATECH
e-Handbook of Statistical Methods, section 1.3.6.7.2 ("Critical values of the Student's t
distribution"), for 1 to 30 degrees of freedom; beyond, the Cornish-Fisher expansion of
Abramowitz and Stegun, Handbook of Mathematical Functions, 26.7.5 (within 0.001 of the table
from 20 degrees of freedom on; a test holds it).
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

# t(0.975, df), df = 1..30 (NIST/SEMATECH e-Handbook, 1.3.6.7.2).
_T975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145,
         2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045,
         2.042)
_Z975 = 1.959964


def t975(df: int) -> float:
    """The 97.5 % quantile of Student's t with `df` degrees of freedom."""
    if df < 1:
        raise ValueError("a t quantile needs at least 1 degree of freedom")
    if df <= len(_T975):
        return _T975[df - 1]
    z = _Z975
    g1 = (z**3 + z) / 4
    g2 = (5 * z**5 + 16 * z**3 + 3 * z) / 96
    g3 = (3 * z**7 + 19 * z**5 + 17 * z**3 - 15 * z) / 384
    return z + g1 / df + g2 / df**2 + g3 / df**3


@dataclass(frozen=True)
class Paired:
    """The mean of n paired differences and its 95 % interval's half-width (nan for n = 1)."""

    mean: float
    half_width: float
    n: int

    @property
    def low(self) -> float:
        return self.mean - self.half_width

    @property
    def high(self) -> float:
        return self.mean + self.half_width

    @property
    def different(self) -> bool:
        """Whether the interval excludes 0 (never, with one seed)."""
        return self.n >= 2 and (self.low > 0 or self.high < 0)

    def text(self, scale: float = 100.0, unit: str = " %") -> str:
        """'-12.3 % [-16.5, -8.1]', with 'n.d.' when the interval includes 0."""
        m = f"{scale * self.mean:+.1f}{unit}"
        if self.n < 2:
            return f"{m} (1 seed)"
        out = f"{m} [{scale * self.low:+.1f}, {scale * self.high:+.1f}]"
        return out if self.different else out + " n.d."


def interval(diffs: list[float]) -> Paired:
    n = len(diffs)
    if n == 0:
        raise ValueError("no paired difference")
    mean = statistics.fmean(diffs)
    if n == 1:
        return Paired(mean, math.nan, 1)
    return Paired(mean, t975(n - 1) * statistics.stdev(diffs) / math.sqrt(n), n)


def paired(a: dict[int, float], b: dict[int, float], relative: bool = True) -> Paired | None:
    """a against b over the seeds both have: relative (a / b - 1) or absolute (a - b)
    differences. None when they share no seed (or, relative, b is 0 in every one)."""
    seeds = sorted(s for s in a.keys() & b.keys() if not relative or b[s] != 0)
    if not seeds:
        return None
    return interval([a[s] / b[s] - 1 if relative else a[s] - b[s] for s in seeds])
