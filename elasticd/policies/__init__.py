"""Scheduling policies: pure functions of a snapshot, returning decisions.

Names are what users type after `--policy`.
"""

from __future__ import annotations

from elasticd.policies.base import Policy
from elasticd.policies.easy import EasyBackfill
from elasticd.policies.fcfs import Fcfs
from elasticd.policies.malleable import MalleableMinAgree

POLICIES: dict[str, type] = {
    "fcfs": Fcfs,
    "easy": EasyBackfill,
    "malleable": MalleableMinAgree,
}


def make_policy(name: str, min_resize_interval: float | None = None) -> Policy:
    """Build a policy by the name users type; options a policy does not use are ignored."""
    try:
        cls = POLICIES[name.lower()]
    except KeyError:
        known = ", ".join(sorted(POLICIES))
        raise ValueError(f"unknown policy {name!r}; known policies: {known}") from None
    if cls is MalleableMinAgree and min_resize_interval is not None:
        return MalleableMinAgree(min_resize_interval=min_resize_interval)
    return cls()
