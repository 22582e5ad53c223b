"""Every published policy under the name users type after `--policy`, with its parameters,
their seed defaults and one line of help each.

`make_policy(name, params)` builds one; `render_policies()` is what `elasticd policies`
prints. The names are listed in this order everywhere (the default, `easy`, first).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from elasticd.policies.backfill import GreedyBackfill
from elasticd.policies.base import Policy
from elasticd.policies.conservative import ConservativeBackfill
from elasticd.policies.easy import EasyBackfill
from elasticd.policies.fcfs import Fcfs
from elasticd.policies.fit import EvolvingFit
from elasticd.policies.malleable import MalleableMinAgree
from elasticd.policies.mebf import EXPANDS, VARIANTS, Mebf
from elasticd.policies.min_avg_pref import PriorityMalleable
from elasticd.policies.params import Param, PolicyParamError, normalise_key, resolve
from elasticd.policies.payoff import Payoff
from elasticd.policies.sd import SdPolicy


@dataclass(frozen=True)
class PolicyEntry:
    name: str
    family: str  # a config file's [policy.FAMILY] section applies to every policy in it
    summary: str
    build: Callable[..., Policy]  # called with every parameter's value, by name
    params: tuple[Param, ...] = field(default=())
    # The rigid policy it is with no malleable job at all (tests/test_policy_baselines.py
    # checks it per job on every shared trace): what it is to be compared with.
    base: str = "easy"


RESIZE_INTERVAL = Param(
    "min_resize_interval", float, 10.0,
    "seconds a job is left alone after a resize (elastic's guard against flapping)", low=0.0,
)

MEBF_PARAMS = (
    Param("theta", float, 0.5, "feasibility: reconfigure only jobs with this fraction of their "
          "initially estimated run time left", low=0.0, high=1.0),
    Param("gamma", float, 2.0, "feasibility: predicted run time after the change at most gamma "
          "times the unchanged one", low=1.0),
    Param("share_factor", float, 0.4, "shrink: a job gives at most this fraction of its nodes",
          low=0.0, high=1.0),
    Param("spare_ratio", float, 0.5, "Spare: expand a job by this fraction of its nodes, only if "
          "more than that is idle (Handoff and Intensive ignore it)", low=0.0),
    RESIZE_INTERVAL,
)

SD_PARAMS = (
    Param("max_slowdown", float, 10.0, "MAX_SLOWDOWN: mates whose penalty (Eq. 4) reaches it are "
          "not shrunk; inf for no cut-off", low=1.0, allow_inf=True),
    Param("dynamic_max_slowdown", bool, False, "use the running jobs' average predicted slowdown "
          "as MAX_SLOWDOWN instead (DynAVGSD)"),
    Param("sharing_factor", float, 0.5, "a mate lends at most this fraction of its nodes",
          low=0.0, high=1.0),
    Param("max_mates", int, 2, "most mates shrunk to start one job", low=1, high=4),
    Param("mate_candidates", int, 8, "mates considered per job, lowest slowdown first (nm)",
          low=1, high=64),
    Param("max_job_test", int, 500, "queued jobs examined per pass, as Slurm's bf_max_job_test "
          "(SD-Policy is a sched/backfill plug-in)", low=1),
    RESIZE_INTERVAL,
)

PAYOFF_PARAMS = (
    Param("gain_factor", float, 1.0, "a resize is made only if the time it saves is more than this many "
          "times what it costs (reconfiguration both ways, the order round trip)", low=0.0),
    Param("order_latency", float, 0.0, "seconds an order's round trip costs (the daemon's measured one; 0 "
          "in the simulator, whose application answers at once)", low=0.0),
    Param("start", str, "preferred", "a malleable job starts on up to its preferred size, on its minimum, or "
          "(adaptive) on its minimum while other jobs wait", choices=("preferred", "minimum", "adaptive")),
    Param("max_job_test", int, 500, "queued jobs room is looked for per pass, as Slurm's bf_max_job_test",
          low=1),
    RESIZE_INTERVAL,
)

FIT_PARAMS = (
    Param("expand_limit", float, 1.0, "how many times a step of a declared evolution may be "
          "stretched: 1 = noX (the paper's advice), 2 = 2X, inf = infX", low=1.0, allow_inf=True),
    Param("compact", bool, False, "compacting post-pass (2X+c, infX+c): start as late as the "
          "same completion time allows, wasting fewer nodes"),
)

_MEBF_WORDS = {"basic": "basic", "expandplus": "expand+", "shrinkplus": "shrink+"}
_MEBF_SUMMARY = {
    "handoff": "expands a job only by more than its current size",
    "spare": "expands by spare_ratio of a job's size, keeping idle nodes for arrivals",
    "intensive": "expands jobs to their maximum",
}


def _mebf(variant: str, expand: str) -> Callable[..., Policy]:
    return lambda **kw: Mebf(variant, expand, **kw)


def _priority(strategy: str) -> Callable[..., Policy]:
    return lambda **kw: PriorityMalleable(strategy, **kw)


_ENTRIES: list[PolicyEntry] = [
    PolicyEntry("easy", "easy", "EASY backfilling: later jobs start only if they do not delay the "
                "first waiting job (default)", lambda: EasyBackfill()),
    PolicyEntry("fcfs", "fcfs", "first come, first served: nothing overtakes the first waiting job",
                lambda: Fcfs(), base="fcfs"),
    PolicyEntry("backfill", "backfill", "greedy backfilling: any job that fits the idle nodes starts, "
                "no reservation (unfair)", lambda: GreedyBackfill(), base="backfill"),
    PolicyEntry("conservative", "conservative", "conservative backfilling: a reservation for every "
                "waiting job; nothing delays any of them", lambda: ConservativeBackfill(), base="conservative"),
    PolicyEntry("malleable", "malleable", "the seed's minAgree: EASY with malleable jobs at their "
                "minimum, widest shrunk for waiting jobs, idle nodes to the narrowest",
                lambda **kw: MalleableMinAgree(**kw), (RESIZE_INTERVAL,)),
    PolicyEntry("min", "minavgpref", "Min: start at minimum; shrink/expand by current - min, "
                "fewest jobs", _priority("min"), (RESIZE_INTERVAL,)),
    PolicyEntry("avg", "minavgpref", "Avg: start at minimum; shrink/expand by share of the "
                "min..max range used, balanced", _priority("avg"), (RESIZE_INTERVAL,)),
    PolicyEntry("pref", "minavgpref", "Pref: start at preferred (or fewer); shrink/expand by "
                "current - preferred, fewest jobs", _priority("pref"), (RESIZE_INTERVAL,)),
    PolicyEntry("keeppref", "minavgpref", "KeepPref: start at preferred; never shrink a job below "
                "its preferred size", _priority("keeppref"), (RESIZE_INTERVAL,)),
    *[
        PolicyEntry(f"mebf-{v}-{e}", "mebf", f"MEBF {_MEBF_WORDS[v]}, {e.capitalize()}: "
                    f"{_MEBF_SUMMARY[e]}", _mebf(v, e), MEBF_PARAMS)
        for v in VARIANTS
        for e in EXPANDS
    ],
    PolicyEntry("sd", "sd", "SD-Policy: shrink up to 2 running mates to start a malleable job "
                "when its predicted end improves", lambda **kw: SdPolicy(**kw), SD_PARAMS, base="conservative"),
    PolicyEntry("payoff", "payoff", "elastic's own: EASY starts up to the preferred size, loans of idle "
                "nodes and shrinks for waiting jobs only when the time saved pays for the resize",
                lambda **kw: Payoff(**kw), PAYOFF_PARAMS),
    PolicyEntry("fit", "fit", "evolving-profile list scheduling: declared evolutions fitted "
                "around each other (noX/2X/infX)", lambda **kw: EvolvingFit(**kw), FIT_PARAMS, base="fit"),
]

REGISTRY: dict[str, PolicyEntry] = {e.name: e for e in _ENTRIES}
FAMILIES: dict[str, list[str]] = {}
for _e in _ENTRIES:
    FAMILIES.setdefault(_e.family, []).append(_e.name)


def canonical_name(name: str) -> str:
    """`MEBF-Expand+-Spare` -> `mebf-expandplus-spare`: the paper's spelling works too."""
    return name.strip().lower().replace("+", "plus").replace("_", "-")


def entry(name: str) -> PolicyEntry:
    try:
        return REGISTRY[canonical_name(name)]
    except KeyError:
        known = ", ".join(REGISTRY)
        raise ValueError(f"unknown policy {name!r}; known policies: {known}") from None


def make_policy(
    name: str, params: Mapping[str, object] | None = None, *, min_resize_interval: float | None = None
) -> Policy:
    """Build a policy by the name users type, with parameters validated by name and type.

    `min_resize_interval` is the daemon's older flag; it applies to the policies that have
    that parameter and is overridden by an explicit `params` entry.
    """
    e = entry(name)
    given: dict[str, object] = {}
    declared = {p.name for p in e.params}
    if min_resize_interval is not None and "min_resize_interval" in declared:
        given["min_resize_interval"] = min_resize_interval
    for k, v in (params or {}).items():
        given[normalise_key(k)] = v
    values = resolve(e.name, e.params, given)
    return e.build(**values)


def render_policies() -> str:
    """The `elasticd policies` listing: one line per policy, then its family's parameters."""
    width = max(len(n) for n in REGISTRY) + 2
    lines = [
        ("Policies (--policy NAME); parameters: --policy-param KEY=VALUE, or a [policy.NAME] "
        "(or [policy.FAMILY]) table in --policy-config FILE. [rigid: as X]: with no malleable "
        "job, the policy schedules exactly as X does."),
        "",
    ]
    for family, names in FAMILIES.items():
        for n in names:
            e = REGISTRY[n]
            base = "" if e.base == n else f" [rigid: as {e.base}]"
            lines.append(f"  {n:<{width}}{e.summary}{base}")
        params = REGISTRY[names[0]].params
        if params:
            pwidth = max(len(p.describe()) for p in params) + 2
            scope = f"[policy.{family}]" if len(names) > 1 else ""
            lines.append(f"      parameters {scope}".rstrip() + ":")
            for p in params:
                lines.append(f"        {p.describe():<{pwidth}}{p.help}")
    return "\n".join(lines) + "\n"


__all__ = [
    "FAMILIES",
    "REGISTRY",
    "PolicyEntry",
    "PolicyParamError",
    "canonical_name",
    "entry",
    "make_policy",
    "render_policies",
]
