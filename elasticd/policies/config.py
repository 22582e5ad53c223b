"""Policy parameters from a TOML file and from `--policy-param KEY=VALUE`, merged and
validated in one place so the daemon, `elasticd run` and the simulator agree.

    # elastic.toml
    [policy.mebf]                 # every mebf-* policy
    theta = 0.6
    [policy.mebf-basic-spare]     # this one only (wins over the family table)
    spare_ratio = 0.25
    [policy.sd]
    max_slowdown = inf

Precedence: family table < policy table < command line. Tables for other policies are
checked (an unknown policy name or parameter is an error, so a typo never silently does
nothing) but not applied.
"""

from __future__ import annotations

import tomllib
from collections.abc import Iterable, Mapping
from pathlib import Path

from elasticd.policies.base import Policy
from elasticd.policies.params import PolicyParamError, parse_assignments, resolve
from elasticd.policies.registry import (
    FAMILIES,
    REGISTRY,
    canonical_name,
    entry,
    make_policy,
)


def read_policy_config(path: str | Path, policy: str) -> dict[str, object]:
    """The parameters a config file sets for `policy` (family table, then its own)."""
    tables = _policy_tables(path)
    e = entry(policy)
    out: dict[str, object] = {}
    if e.family != e.name and e.family in tables:
        out.update(tables[e.family])
    out.update(tables.get(e.name, {}))
    return out


def _policy_tables(path: str | Path) -> dict[str, dict[str, object]]:
    p = Path(path)
    try:
        with p.open("rb") as f:
            doc = tomllib.load(f)
    except OSError as exc:
        raise PolicyParamError([f"{p}: cannot read policy config: {exc.strerror or exc}"]) from None
    except tomllib.TOMLDecodeError as exc:
        raise PolicyParamError([f"{p}: not valid TOML: {exc}"]) from None
    problems: list[str] = []
    unknown_top = [k for k in doc if k != "policy"]
    if unknown_top:
        problems.append(f"{p}: unknown table(s) {', '.join(unknown_top)}; policy settings go in [policy.NAME]")
    section = doc.get("policy", {})
    if not isinstance(section, dict):
        raise PolicyParamError(problems + [f"{p}: 'policy' must be a table of [policy.NAME] tables"])
    tables: dict[str, dict[str, object]] = {}
    for key, table in section.items():
        where = f"{p}: [policy.{key}]"
        if not isinstance(table, dict):
            problems.append(f"{where}: must be a table of parameters")
            continue
        name = canonical_name(key)
        if name in FAMILIES:
            declared = REGISTRY[FAMILIES[name][0]].params
        elif name in REGISTRY:
            declared = REGISTRY[name].params
        else:
            known = ", ".join(dict.fromkeys([*FAMILIES, *REGISTRY]))
            problems.append(f"{where}: no such policy or family (known: {known})")
            continue
        try:
            resolve(key, declared, table)  # report bad values even for other policies
        except PolicyParamError as exc:
            problems.extend(f"{p}: {line}" for line in exc.problems)
            continue
        tables[name] = {**tables.get(name, {}), **table}
    if problems:
        raise PolicyParamError(problems)
    return tables


def build_policy(
    name: str,
    config_file: str | Path | None = None,
    assignments: Iterable[str] = (),
    min_resize_interval: float | None = None,
) -> Policy:
    """The policy a command line asks for: `--policy NAME`, `--policy-config FILE`,
    `--policy-param KEY=VALUE` (repeatable) and the older `--min-resize-interval`."""
    params: dict[str, object] = {}
    if config_file is not None:
        params.update(read_policy_config(config_file, name))
    params.update(parse_assignments(assignments))
    return make_policy(name, params, min_resize_interval=min_resize_interval)


def policy_params(
    name: str,
    config_file: str | Path | None = None,
    assignments: Iterable[str] = (),
    min_resize_interval: float | None = None,
) -> Mapping[str, object]:
    """Every parameter's effective value for a policy (for `elasticd status` and logs)."""
    e = entry(name)
    params: dict[str, object] = {}
    if min_resize_interval is not None and any(p.name == "min_resize_interval" for p in e.params):
        params["min_resize_interval"] = min_resize_interval
    if config_file is not None:
        params.update(read_policy_config(config_file, name))
    params.update(parse_assignments(assignments))
    return resolve(e.name, e.params, params)
