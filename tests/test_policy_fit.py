"""Evolving jobs: the list-scheduling fit of declared evolutions (noX, 2X, 2X+c, infX),
requests held in the plan, the deadlock the fit avoids, and the job-file field.

The running example: 4 nodes; R (rigid, 2 nodes) ends at 100. E declares three steps:
50 s on 1 node, 25 s on 2, 50 s on 4. Its last step needs all 4 nodes, so not before 100.
- noX: no step may stretch, so step 2 is [75, 100), step 1 [25, 75): E starts at 25.
- 2X: step 2 may last up to 50 s: [50, 100), and step 1 [0, 50): E starts now.
- 2X+c: same completion (150); compacting re-places the steps right to left, as late as
  they fit: back to [25, 75), [75, 100), [100, 150).
- infX: as 2X here.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from pydantic import ValidationError

from core_support import submit
from elastic_protocol.jobspec import (
    JobKind,
    JobSpec,
    PerfModel,
    format_validation_errors,
)
from elasticd.core.actions import Launch, SendOrder
from elasticd.core.engine import Core
from elasticd.core.events import (
    Exited,
    GrowAnswered,
    HostsGone,
    HostsReleased,
    NodesRequested,
    PassDue,
    Registered,
)
from elasticd.policies import make_policy
from elasticd.policies.base import Grow, PendingView, RunningView, Snapshot, Start
from elasticd.policies.fit import base_fit, compact
from elasticd.policies.profile import FreeProfile
from elasticd.sim.simulator import simulate
from elasticd.sim.swf import read_swf
from elasticd.sim.workload import build_workload

EV = JobKind.EVOLVING
STEPS = ((50.0, 1), (25.0, 2), (50.0, 4))


def rigid_running(job_id: int, size: int, limit: float) -> RunningView:
    return RunningView(job_id, JobKind.RIGID, size, size, size, size, 0.0, limit, False, None, False)


def evolving(job_id: int, steps: tuple[tuple[float, int], ...], submit: float = 0.0) -> PendingView:
    lo, hi = min(n for _, n in steps), max(n for _, n in steps)
    return PendingView(job_id, submit, EV, lo, hi, hi, None, evolution=steps)


SCENE = Snapshot(0.0, 4, 2, (evolving(2, STEPS),), (rigid_running(1, 2, 100.0),))


@pytest.mark.parametrize(
    ("params", "expected"),
    [
        ({}, []),  # noX (the default)
        ({"expand_limit": 2}, [Start(2, 1)]),
        ({"expand_limit": 2, "compact": True}, []),
        ({"expand_limit": "inf"}, [Start(2, 1)]),
    ],
)
def test_expand_limit_decides_whether_a_step_may_stretch_so_the_job_starts_now(
    params: dict[str, object], expected: list[object]
) -> None:
    assert make_policy("fit", params).decide(SCENE) == expected


def test_the_fit_places_each_step_as_the_paper_computes_it() -> None:
    def plan() -> FreeProfile:
        return FreeProfile(0.0, 2, [(100.0, 2)])

    assert base_fit(plan(), STEPS, 1.0, 0.0) == (25.0, [50.0, 25.0, 50.0])
    start, durations = base_fit(plan(), STEPS, 2.0, 0.0)
    assert (start, durations) == (0.0, [50.0, 50.0, 50.0])
    assert compact(plan(), STEPS, 2.0, start, durations) == (25.0, [50.0, 25.0, 50.0])
    assert base_fit(plan(), STEPS, math.inf, 0.0) == (0.0, [50.0, 50.0, 50.0])
    # More nodes than the machine will ever have free: never.
    assert base_fit(plan(), ((10.0, 5),), 1.0, 0.0) == (math.inf, None)


def test_two_jobs_that_would_deadlock_are_fitted_one_after_the_other() -> None:
    """Both declare 100 s on 2 nodes, then 100 s on 4, on 4 nodes. Started together (as
    EASY starts them, each on its first step) each would ask for 2 more at t=100 and wait
    for the other for ever. The fit starts the second only once the first is done."""
    steps = ((100.0, 2), (100.0, 4))
    s = Snapshot(0.0, 4, 4, (evolving(1, steps), evolving(2, steps)), ())
    assert make_policy("easy").decide(s) == [Start(1, 2), Start(2, 2)]
    assert make_policy("fit").decide(s) == [Start(1, 2)]


def test_through_the_core_the_fit_grants_the_declared_growth_and_then_starts_the_second_job() -> None:
    core = Core([f"n{i}" for i in range(1, 5)], make_policy("fit"))
    spec = JobSpec(name="e", command=["x"], nodes={"min": 2, "max": 4}, kind=EV,
                   evolution=[{"duration": "1:40", "nodes": 2}, {"duration": "1:40", "nodes": 4}])
    a = submit(core, spec, 0.0)
    b = submit(core, spec, 0.0)
    assert core.handle(PassDue(0.0)) == [Launch(a.job_id, ("n1", "n2"))]
    core.handle(Registered(1.0, a.job_id))
    core.handle(NodesRequested(100.0, a.job_id, 2))
    (order,) = [x for x in core.handle(PassDue(100.0)) if isinstance(x, SendOrder)]
    assert (order.kind, order.count) == ("grow", 2)
    core.handle(GrowAnswered(100.0, a.job_id, order.order_id, tuple(a.hosts)))
    core.handle(Exited(200.0, a.job_id, 0, 0))
    assert core.handle(PassDue(200.0)) == [Launch(b.job_id, ("n1", "n2"))]


def test_an_open_request_keeps_its_nodes_in_the_plan() -> None:
    # E (1 node, limit 500) asked for 3 more; 2 idle, R frees 1 at 100. P (1 node, 1000 s)
    # would take a node the request needs: it waits. EASY starts P at once.
    e = RunningView(7, EV, 1, 1, 4, 4, 0.0, 500.0, True, None, False, requested=3, requested_at=0.0)
    s = Snapshot(0.0, 4, 2, (PendingView(1, 0.0, JobKind.RIGID, 1, 1, 1, 1000.0),), (e, rigid_running(8, 1, 100.0)))
    assert make_policy("fit").decide(s) == []
    assert make_policy("easy").decide(s) == [Start(1, 1)]
    later = Snapshot(100.0, 4, 3, s.pending, (e,))
    assert make_policy("fit").decide(later) == [Grow(7, 3)]


@pytest.mark.parametrize(("limit", "starts"), [(100.0, False), (50.0, True)])
def test_a_running_jobs_declared_growth_is_kept_free_for_it(limit: float, starts: bool) -> None:
    # E runs 100 s on 1 node then 100 s on 4 (it is at t=50). P (2 nodes) fits the idle
    # nodes only if it is gone by 100.
    e = RunningView(7, EV, 1, 1, 4, 4, 0.0, None, True, None, False, evolution=((100.0, 1), (100.0, 4)))
    s = Snapshot(50.0, 4, 3, (PendingView(1, 0.0, JobKind.RIGID, 2, 2, 2, limit),), (e,))
    assert make_policy("fit").decide(s) == ([Start(1, 2)] if starts else [])


# ---- the job file ------------------------------------------------------------------------


def spec(**kw: object) -> JobSpec:
    return JobSpec(name="e", command=["x"], nodes={"min": 1, "max": 4}, **kw)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("fields", "problem"),
    [
        ({"kind": "malleable", "evolution": [{"duration": 5, "nodes": 2}]},
         'evolution: only evolving jobs (kind = "evolving") declare an evolution'),
        ({"kind": "evolving", "evolution": [{"duration": 5, "nodes": 2}, {"duration": 5, "nodes": 6}]},
         "evolution: step 2 uses 6 nodes, outside nodes min..max (1..4)"),
        ({"kind": "evolving", "time_limit": 5, "evolution": [{"duration": 5, "nodes": 2}, {"duration": "0:01", "nodes": 2}]},
         "evolution: the steps last 301 s in all, longer than time_limit (300 s)"),
        ({"kind": "evolving", "evolution": [{"duration": "UNLIMITED", "nodes": 2}]},
         "evolution.0.duration: a step cannot last UNLIMITED"),
        ({"kind": "evolving", "evolution": [{"duration": 5, "nodes": 2, "cores": 4}]},
         "evolution.0.cores: unknown field"),
    ],
)
def test_a_bad_evolution_is_named_in_one_line(fields: dict[str, object], problem: str) -> None:
    with pytest.raises(ValidationError) as exc:
        spec(**fields)
    assert format_validation_errors(exc.value.errors()) == [problem]


def test_the_snapshot_carries_model_evolution_submit_time_and_size_history() -> None:
    core = Core([f"n{i}" for i in range(1, 5)], make_policy("fcfs"))
    model = PerfModel(speedup="amdahl:0.1", work=100.0)
    e = submit(core, spec(kind="evolving", model=model, evolution=[{"duration": 1, "nodes": 2}]), 5.0)
    (view,) = core.snapshot(5.0).pending
    assert (view.model, view.evolution, view.start_nodes) == (model, ((60.0, 2),), 2)
    assert core.handle(PassDue(6.0)) == [Launch(e.job_id, ("n1", "n2"))]
    core.handle(Registered(6.0, e.job_id))
    core.handle(NodesRequested(7.0, e.job_id, 1))
    (order,) = [x for x in core.handle(PassDue(7.0)) if isinstance(x, SendOrder)]
    core.handle(GrowAnswered(8.0, e.job_id, order.order_id, tuple(e.hosts)))
    (run,) = core.snapshot(9.0).running
    assert (run.submit_time, run.model, run.history) == (5.0, model, ((6.0, 2), (8.0, 3)))


# ---- requests under every policy: oldest first, whole, never holding nodes ------------------


@pytest.mark.parametrize("policy", ["easy", "conservative", "malleable", "sd", "fit"])
def test_two_waiting_requests_are_served_oldest_first_as_nodes_come_back(policy: str) -> None:
    """E1 and E2 (2 nodes each) both ask for 2 more on a full machine. Neither holds a node
    while it waits; when R ends, E1 (who asked first) gets its 2; E2, asking for 2, is not
    overtaken by anyone and gets them when E1 gives 2 back."""
    core = Core([f"n{i}" for i in range(1, 7)], make_policy(policy))
    spec = JobSpec(name="e", command=["x"], nodes={"min": 2, "max": 4}, kind=EV)
    e1, e2 = submit(core, spec, 0.0), submit(core, spec, 0.0)
    r = submit(core, JobSpec(name="r", command=["x"], nodes=2), 0.0)
    assert [a.job_id for a in core.handle(PassDue(0.0))] == [e1.job_id, e2.job_id, r.job_id]
    for e in (e1, e2):
        core.handle(Registered(0.5, e.job_id))
    core.handle(NodesRequested(1.0, e1.job_id, 2))
    core.handle(NodesRequested(2.0, e2.job_id, 2))
    assert core.handle(PassDue(2.0)) == []
    core.handle(Exited(10.0, r.job_id, 0, 0))
    (order,) = [a for a in core.handle(PassDue(10.0)) if isinstance(a, SendOrder)]
    assert (order.job_id, order.kind, order.count) == (e1.job_id, "grow", 2)
    core.handle(GrowAnswered(10.0, e1.job_id, order.order_id, tuple(e1.hosts)))
    assert core.handle(PassDue(11.0)) == []
    core.handle(HostsReleased(20.0, e1.job_id, tuple(e1.hosts[-2:])))
    core.handle(HostsGone(20.0, e1.job_id, tuple(e1.hosts[-2:])))
    (order,) = [a for a in core.handle(PassDue(20.0)) if isinstance(a, SendOrder)]
    assert (order.job_id, order.kind, order.count) == (e2.job_id, "grow", 2)


def test_fit_plans_a_job_that_starts_below_its_preferred_size_for_its_limit_there() -> None:
    """A moldable job with a model runs longer on fewer nodes: fit reserves what the core
    will enforce (limit at preferred x S(pref)/S(n)), not the limit at its preferred size
    (found by the stateful test: a start moved the head job's reservation)."""
    from elastic_protocol.jobspec import PerfModel
    from elasticd.policies.base import PendingView
    from elasticd.policies.fit import EvolvingFit

    job = PendingView(7, 0.0, JobKind.MOLDABLE, 1, 2, 2, 120.0, model=PerfModel(speedup="linear"))
    assert EvolvingFit.steps_of(job) == [(240.0, 1)]


def test_a_moldable_job_started_wider_is_planned_until_its_limit_on_that_size() -> None:
    """4 nodes; R (1 node) ends at 150. M (moldable 1..2, 100 s at its preferred 2, linear
    model: 200 s on 1) starts on 2 and the core ends it at 100. H (3 nodes) can start
    then; X (1 node, no limit) would keep one of H's nodes and push H to 150. Planned until
    M's limit on 1 node (200), H looked placed at 200 with a node to spare for X (found
    by the stateful test: starting X moved the head's earliest start 1557 -> 1722 s)."""
    m = PendingView(2, 0.0, JobKind.MOLDABLE, 1, 2, 2, 100.0, model=PerfModel(speedup="linear"))
    h = PendingView(3, 0.0, JobKind.RIGID, 3, 3, 3, 50.0)
    x = PendingView(4, 0.0, JobKind.RIGID, 1, 1, 1, None)
    snap = Snapshot(0.0, 4, 3, (m, h, x), (rigid_running(1, 1, 150.0),))
    for params in ({}, {"expand_limit": 2}, {"expand_limit": 2, "compact": True}, {"expand_limit": "inf"}):
        assert make_policy("fit", params).decide(snap) == [Start(2, 2)]


def test_without_declared_evolutions_fit_is_conservative_backfilling_job_for_job() -> None:
    """The module's promise for jobs that declare no evolution, on a shared trace with none
    (0 %) and half (50 %) of its jobs malleable, each with a model: before fit planned a
    wider start until its limit on its fewest nodes, 85 of these 600 jobs started or ended
    otherwise than under conservative backfilling at 50 %."""
    trace = read_swf(Path(__file__).resolve().parent.parent / "examples" / "traces" / "sdsc-sp2-1998.swf.gz")
    trace.jobs = trace.jobs[:600]
    for fraction in (0.0, 0.5):
        workload = build_workload(trace, fraction, 1)
        fit, conservative = (
            [(o.job_id, o.start, o.end, o.state) for o in simulate(workload, trace.nodes, make_policy(p))]
            for p in ("fit", "conservative")
        )
        diff = [(a, b) for a, b in zip(fit, conservative) if a != b]
        assert len(fit) == len(conservative) == 600
        assert not diff, f"at {fraction:.0%} fit differs from conservative on {len(diff)} jobs, first {diff[0]}"
