"""Slurm's time-limit formats, so job files read like the #SBATCH lines users already know."""

from __future__ import annotations

import re
from functools import lru_cache

_UNLIMITED = {"unlimited", "infinite"}

# Slurm accepts: M, M:S, H:M:S, D-H, D-H:M, D-H:M:S. The leading field is unbounded (except
# hours after days); the ones after it are clock fields (minutes and seconds < 60, hours
# after days < 24).
MAX_TIME_LIMIT = 365 * 86400  # a year: longer is a typo, and no allocation lasts that long
_PLAIN = re.compile(r"^(\d+)(?::(\d+))?(?::(\d+))?$")
_DAYS = re.compile(r"^(\d+)-(\d+)(?::(\d+))?(?::(\d+))?$")


@lru_cache(maxsize=4096, typed=True)
def parse_time_limit(text: str | int) -> int | None:
    """Return seconds, or None for UNLIMITED. A bare integer is minutes, as in Slurm.

    Raises ValueError naming the accepted formats. Memoized: a replayed trace has
    thousands of jobs and a few hundred distinct limits.
    """
    # pydantic reports a ValueError as the field's error; a TypeError would escape it.
    if isinstance(text, bool):
        raise ValueError("time limit must be a string like '30', '1:30:00' or '2-12:00'")  # noqa: TRY004
    if isinstance(text, int):
        if text <= 0:
            raise ValueError("time limit must be positive")
        if text * 60 > MAX_TIME_LIMIT:
            raise ValueError(f"time limit {text} minutes is longer than the longest allowed, 365 days")
        return text * 60
    s = text.strip()
    if s.lower() in _UNLIMITED:
        return None
    m = _DAYS.match(s)
    if m:
        d, h = int(m.group(1)), int(m.group(2))
        mi = int(m.group(3) or 0)
        se = int(m.group(4) or 0)
        _clock(text, ("hours", h, 24), ("minutes", mi, 60), ("seconds", se, 60))
        total = ((d * 24 + h) * 60 + mi) * 60 + se
    else:
        m = _PLAIN.match(s)
        if not m:
            raise ValueError(
                f"unparsable time limit {text!r}: use MM, MM:SS, HH:MM:SS, D-HH, D-HH:MM "
                "or D-HH:MM:SS (or UNLIMITED)"
            )
        parts = [int(g) for g in m.groups() if g is not None]
        if len(parts) == 1:
            total = parts[0] * 60
        elif len(parts) == 2:
            _clock(text, ("seconds", parts[1], 60))
            total = parts[0] * 60 + parts[1]
        else:
            _clock(text, ("minutes", parts[1], 60), ("seconds", parts[2], 60))
            total = (parts[0] * 60 + parts[1]) * 60 + parts[2]
    if total <= 0:
        raise ValueError(f"time limit {text!r} is zero")
    if total > MAX_TIME_LIMIT:
        raise ValueError(f"time limit {text!r} is longer than the longest allowed, 365 days")
    return total


def _clock(text: str, *fields: tuple[str, int, int]) -> None:
    for name, value, bound in fields:
        if value >= bound:
            raise ValueError(f"time limit {text!r}: {value} {name} (must be below {bound}; "
                             "formats MM, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS)")


def format_duration(seconds: float | None) -> str:
    """Slurm's squeue style: M:SS, H:MM:SS, D-HH:MM:SS; UNLIMITED for None."""
    if seconds is None:
        return "UNLIMITED"
    s = round(max(0.0, seconds))
    d, s = divmod(s, 86400)
    h, s = divmod(s, 3600)
    m, s = divmod(s, 60)
    if d:
        return f"{d}-{h:02d}:{m:02d}:{s:02d}"
    if h:
        return f"{h}:{m:02d}:{s:02d}"
    return f"{m}:{s:02d}"
