"""Turning a rigid trace into a (partly) malleable workload, reproducibly.

Which jobs become malleable is a seeded permutation: for one seed, the jobs malleable at
20 % are also malleable at 40 %, so a grid isolates the effect of the fraction.

Two rules give a malleable job its node range (logged size n0, speedup S, efficiency
E(n) = S(n)/n):
- "efficiency" (real-workloads paper; it cites its thresholds without giving them, so
  these are parameters): preferred = the largest n <= cap with E(n) >= pref_efficiency
  (0.8); max = the largest n <= cap with E(n) >= max_efficiency (0.5), at least n0;
  min = the smallest n with S(n) >= min_speed * S(n0) (0.25: at most 4x slower).
- "mebf" (MEBF paper): preferred = n0, min = ceil(n0 / 2), max = min(5 * n0, cap).
- "downward" (elastic's, a conservative reading): the efficiency rule with no job given more
  nodes than it was logged with: max = n0, preferred = min(its efficiency preferred, n0). Beside
  the seeds' rule it shows how much of a gain comes from scaling jobs up beyond anything their
  log shows them running on (an assumption of the conversion), rather than from scheduling.

Load: `at_load(trace, F)` divides every inter-arrival time by F (F > 1: more load, the jobs
arrive closer together; F < 1: less), a standard way to study one log at other loads (MEBF's
"scaled arrival time" is F = 1.25); the jobs themselves are unchanged, so the offered load
(`offered_load`) is F times the log's.

Each job's speedup parameter is derived from an efficiency at its logged size drawn from
`efficiency` (default 0.6..0.95): users logged sizes at which their codes ran reasonably,
so a job logged on 512 nodes scales to 512 nodes, and one logged on 4 does not to 4,000.
Every job's work is run * S(n0) seconds on one node, so at its logged size it runs exactly
its logged time; resized, it runs what the model says (the same WorkProgress the synthetic
application uses), plus the reconfiguration cost.
"""

from __future__ import annotations

import dataclasses
import gc
import math
import random
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from elastic_protocol.models import Amdahl, ReconfigCost, Rho, SpeedupModel
from elasticd.core.fastinit import fast_init
from elasticd.sim.swf import Trace


@dataclass(frozen=True, slots=True)
class SimJob:
    job_id: int
    submit: float
    run: float  # logged run time at the logged size
    nodes: int  # logged size
    limit: float
    malleable: bool
    min_nodes: int
    max_nodes: int
    preferred: int
    speedup: SpeedupModel
    work: float
    cost: ReconfigCost
    # Seconds from launch until the application makes progress (process start, joining);
    # zero for trace jobs, measured latencies when replaying real batches.
    startup: float = 0.0
    moldable: bool = False  # a range chosen at start, never resized
    startup_per_node: float = 0.0  # launching and joining grows with the processes started
    # A grow takes effect this long after the order (new processes start and join).
    grow_latency: float = 0.0
    grow_latency_per_node: float = 0.0
    # Whether its job file declares its model (trace jobs always do; a replayed real job
    # only if its file did): without one, its limit does not scale with its size.
    has_model: bool = True
    # The `work` its job file's model declares (a replayed real job whose file gives it):
    # the daemon's policies read it (MEBF, SD-Policy and payoff predict with it), so the
    # simulated ones must too. None for a trace job: a scheduler knows its limit, not how
    # long it will really run.
    declared_work: float | None = None

    @property
    def limit_at_preferred(self) -> float:
        """Its limit as a job file states it, at its preferred size: the logged limit (at the
        logged size) scaled by the model, T(preferred) / T(logged) (elasticd.core.limits
        scales it again to whatever size the job runs on)."""
        if not self.has_model or self.preferred == self.nodes:
            return self.limit
        s = self.speedup
        return self.limit * s.speedup(self.nodes) / s.speedup(self.preferred)


# Made for every job of a trace (the simulator's timed runs include it): the quicker
# constructor, as for the core's events.
fast_init(SimJob)


RULES = ("efficiency", "mebf", "downward")


@dataclass(frozen=True)
class MalleabilityRule:
    rule: str = "efficiency"  # or "mebf", "downward"
    model: str = "amdahl"  # or "rho": the model family of every job
    # Parallel efficiency S(n0)/n0 at the logged size n0, drawn uniformly per job.
    eff_low: float = 0.6
    eff_high: float = 0.95
    pref_efficiency: float = 0.8
    max_efficiency: float = 0.5
    min_speed: float = 0.25
    cost: ReconfigCost = ReconfigCost(alpha=0.375)  # noqa: RUF009 - frozen, shared safely

    def __post_init__(self) -> None:
        if self.rule not in RULES:
            raise ValueError(f"unknown malleability rule {self.rule!r}: use {', '.join(RULES)}")
        if self.model not in ("amdahl", "rho"):
            raise ValueError(f"unknown speedup model {self.model!r}: use amdahl or rho")
        if not 0 < self.eff_low <= self.eff_high <= 1:
            raise ValueError("efficiency range must satisfy 0 < low <= high <= 1")


def _largest_with_efficiency(s: SpeedupModel, cap: int, threshold: float) -> int:
    """Efficiency falls with n for both models: binary search the last n meeting it."""
    speedup = s.speedup  # a dozen probes, twice per malleable job of a trace
    lo, hi = 1, cap
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if speedup(mid) / mid >= threshold:
            lo = mid
        else:
            hi = mid - 1
    return lo


def _smallest_with_speed(s: SpeedupModel, target: float, upto: int) -> int:
    lo, hi = 1, upto
    while lo < hi:
        mid = (lo + hi) // 2
        if s.speedup(mid) >= target:
            hi = mid
        else:
            lo = mid + 1
    return lo


def model_for(n0: int, efficiency: float, family: str) -> SpeedupModel:
    """The model whose efficiency at n0 nodes is `efficiency`."""
    n = max(n0, 2)
    if family == "amdahl":
        # E = 1 / (f n + 1 - f)  =>  f = (1/E - 1) / (n - 1)
        return Amdahl(min(1.0, (1.0 / efficiency - 1.0) / (n - 1)))
    # E = n^-rho  =>  rho = -ln E / ln n
    return Rho(min(0.99, -math.log(efficiency) / math.log(n)))


def node_range(n0: int, s: SpeedupModel, cap: int, rule: MalleabilityRule) -> tuple[int, int, int]:
    """(min, max, preferred) for a job logged at n0 nodes."""
    if rule.rule == "mebf":
        return max(1, math.ceil(n0 / 2)), min(cap, 5 * n0), n0
    hi = n0 if rule.rule == "downward" else max(n0, _largest_with_efficiency(s, cap, rule.max_efficiency))
    pref = min(hi, _largest_with_efficiency(s, cap, rule.pref_efficiency))
    lo = min(pref, _smallest_with_speed(s, rule.min_speed * s.speedup(n0), n0))
    return lo, hi, pref


def at_load(trace: Trace, load: float) -> Trace:
    """The trace with every inter-arrival time divided by `load` (see the module's docstring):
    submit times from the first one scaled by 1 / load; runs, sizes and limits unchanged."""
    if not (load > 0 and math.isfinite(load)):
        raise ValueError(f"load {load!r}: must be a positive number (1 = the log's own)")
    if load == 1.0 or not trace.jobs:
        return trace
    t0 = trace.jobs[0].submit
    jobs = [dataclasses.replace(j, submit=t0 + (j.submit - t0) / load) for j in trace.jobs]
    return dataclasses.replace(trace, jobs=jobs)


def offered_load(trace: Trace) -> float:
    """Node-seconds the jobs ask for (logged run x logged size) per second of the submission
    window, as a share of the machine: 1.0 asks for every node all the time."""
    if len(trace.jobs) < 2:
        return 0.0
    span = max(j.submit for j in trace.jobs) - min(j.submit for j in trace.jobs)
    if span <= 0:
        return math.inf
    return sum(j.run * j.nodes for j in trace.jobs) / (span * trace.nodes)


_NO_OLDER_COLLECTIONS = 1_000_000_000  # gc threshold1 and threshold2: see young_collections_only


@contextmanager
def young_collections_only() -> Iterator[None]:
    """Only the youngest generation of CPython's collector of reference cycles is collected
    meanwhile (see Simulation.run, whose runs are the reason): what is made here stays, as a
    workload's jobs, or a run's records, do, and a full collection rescans all of it (and
    everything else the process holds: it was half of building a trace's workload, 25 of
    45 ms for theta-2023)."""
    young, middle, oldest = gc.get_threshold()
    gc.set_threshold(young, max(middle, _NO_OLDER_COLLECTIONS), max(oldest, _NO_OLDER_COLLECTIONS))
    try:
        yield
    finally:
        gc.set_threshold(young, middle, oldest)


def build_workload(trace: Trace, fraction: float, seed: int, rule: MalleabilityRule = MalleabilityRule()) -> list[SimJob]:
    if not 0.0 <= fraction <= 1.0:
        raise ValueError("malleable fraction must be in [0, 1]")
    with young_collections_only():
        return _build(trace, fraction, seed, rule)


def _build(trace: Trace, fraction: float, seed: int, rule: MalleabilityRule) -> list[SimJob]:
    rng = random.Random(seed)
    order = list(range(len(trace.jobs)))
    rng.shuffle(order)
    chosen = set(order[: round(fraction * len(order))])
    # Drawn for every job whatever the fraction, so a job's model does not depend on it.
    effs = [rng.uniform(rule.eff_low, rule.eff_high) for _ in trace.jobs]
    out = []
    for i, j in enumerate(trace.jobs):
        s = model_for(j.nodes, effs[i], rule.model)
        work = j.run * s.speedup(j.nodes)
        if i in chosen:
            lo, hi, pref = node_range(j.nodes, s, trace.nodes, rule)
            out.append(SimJob(j.job_id, j.submit, j.run, j.nodes, j.limit, True, lo, hi, pref, s, work, rule.cost))
        else:
            out.append(SimJob(j.job_id, j.submit, j.run, j.nodes, j.limit, False, j.nodes, j.nodes, j.nodes, s, work, rule.cost))
    return out


def from_specs(
    specs: list[Any],
    startup: float = 0.0,
    startup_per_node: float = 0.0,
    grow_latency: float = 0.0,
    grow_latency_per_node: float = 0.0,
) -> list[SimJob]:
    """Job files as simulator jobs: a real batch, replayed.

    Rigid jobs run at their fixed size; moldable and malleable ones carry their range. The
    speedup, reconfiguration cost and work come from the job's `model` (its work: `work`, else
    its time limit at its preferred size). A job without a model is one nothing is known of
    but its limit: it runs exactly its limit whatever its size (its limit does not scale
    either, elasticd.core.limits), and completes at it."""
    from elastic_protocol.jobspec import JobKind
    from elastic_protocol.models import parse_speedup

    out = []
    for i, spec in enumerate(specs):
        lo, hi, pref = spec.node_bounds
        limit = float(spec.limit_seconds or 86400 * 365)
        model = spec.model
        s = parse_speedup(model.speedup) if model else Amdahl(1.0)  # no model: the same time on any size
        work = model.work if model and model.work else limit * s.speedup(pref)
        cost = ReconfigCost(model.alpha, model.beta, model.b) if model else ReconfigCost()
        kind = spec.resolved_kind
        run = work / s.speedup(pref)
        out.append(SimJob(i + 1, spec.submit_offset, run, pref, limit, kind is JobKind.MALLEABLE, lo, hi, pref, s,
                          work, cost, startup, moldable=kind is JobKind.MOLDABLE, startup_per_node=startup_per_node,
                          grow_latency=grow_latency, grow_latency_per_node=grow_latency_per_node,
                          has_model=model is not None, declared_work=model.work if model else None))
    return out
