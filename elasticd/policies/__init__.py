"""Scheduling policies: pure functions of a snapshot, returning decisions.

Names are what users type after `--policy`.
"""

from __future__ import annotations

from elasticd.policies.base import Policy
from elasticd.policies.easy import EasyBackfill
from elasticd.policies.fcfs import Fcfs

POLICIES: dict[str, type[Policy]] = {
    "fcfs": Fcfs,
    "easy": EasyBackfill,
}


def make_policy(name: str) -> Policy:
    try:
        return POLICIES[name.lower()]()
    except KeyError:
        known = ", ".join(sorted(POLICIES))
        raise ValueError(f"unknown policy {name!r}; known policies: {known}") from None
