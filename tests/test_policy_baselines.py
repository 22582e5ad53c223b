"""Coherent baselines: with no malleable job, every policy schedules each job exactly as the
rigid policy it is built on (`elasticd policies` names it: EASY for most), on every shared
trace. A difference here would make its malleable gains a comparison with the wrong base."""

from __future__ import annotations

from pathlib import Path

import pytest

from elasticd.policies import make_policy
from elasticd.policies.registry import REGISTRY
from elasticd.sim.simulator import simulate
from elasticd.sim.swf import read_swf
from elasticd.sim.workload import build_workload

pytestmark = pytest.mark.timeout(300)

TRACES = sorted((Path(__file__).resolve().parent.parent / "examples" / "traces").glob("*.swf.gz"))
PREFIX = 1200  # jobs per trace: long enough for deep queues on each, short enough for CI


def schedule(trace_path: Path, policy: str) -> list[tuple[int, float | None, float | None, str]]:
    trace = _trace(trace_path)
    outcomes = simulate(build_workload(trace, 0.0, 1), trace.nodes, make_policy(policy))
    return [(o.job_id, o.start, o.end, o.state) for o in outcomes]


_TRACES: dict[Path, object] = {}


def _trace(path: Path):  # type: ignore[no-untyped-def]
    if path not in _TRACES:
        t = read_swf(path)
        t.jobs = t.jobs[:PREFIX]
        _TRACES[path] = t
    return _TRACES[path]


def test_every_shared_trace_is_here() -> None:
    assert len(TRACES) == 6


@pytest.mark.parametrize("trace_path", TRACES, ids=lambda p: p.name.split(".")[0])
def test_at_zero_percent_every_policy_is_its_rigid_base_job_for_job(trace_path: Path) -> None:
    bases: dict[str, list[tuple[int, float | None, float | None, str]]] = {}
    for name, e in REGISTRY.items():
        if e.base == name or e.base == "fit":
            continue
        if e.base not in bases:
            bases[e.base] = schedule(trace_path, e.base)
        got = schedule(trace_path, name)
        diff = [(a, b) for a, b in zip(got, bases[e.base]) if a != b]
        assert not diff, f"{name} at 0 % differs from {e.base} on {len(diff)} jobs, first {diff[0]}"
