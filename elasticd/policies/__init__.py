"""Scheduling policies: pure functions of a snapshot, returning decisions.

Names are what users type after `--policy`; `render_policies()` lists them with their
parameters, `make_policy(name, params)` builds one, and `config.build_policy` does the
same from a command line's `--policy-config FILE` and `--policy-param KEY=VALUE`.
"""

from __future__ import annotations

from elasticd.policies.base import Policy
from elasticd.policies.params import PolicyParamError
from elasticd.policies.registry import REGISTRY, make_policy, render_policies

# name -> registry entry, in listing order (`easy`, the default, first).
POLICIES = REGISTRY

__all__ = ["POLICIES", "Policy", "PolicyParamError", "make_policy", "render_policies"]
