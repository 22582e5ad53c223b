"""MEBF (basic, expand+, shrink+ with Handoff, Spare, Intensive) on hand-built snapshots.

Jobs are linear unless said otherwise; with no `work` in their model a job's work is its
time limit times its speedup on its preferred size, so a linear job with limit 1000 s on
its preferred 2 nodes has 2000 node-seconds of work: started at 0 on 2 nodes, at t=100 it
has 900 s left, out of an initial estimate of 1000 s.
"""

from __future__ import annotations

import pytest

from elastic_protocol.jobspec import JobKind, PerfModel
from elasticd.policies import make_policy
from elasticd.policies.base import (
    Grow,
    PendingView,
    RunningView,
    Shrink,
    Snapshot,
    Start,
)

M = JobKind.MALLEABLE


def job(job_id: int, size: int, hi: int = 8, lo: int = 1, pref: int | None = None, limit: float = 1000.0,
        model: PerfModel | None = None, kind: JobKind = M) -> RunningView:
    return RunningView(
        job_id=job_id, kind=kind, size=size, min_nodes=lo if kind is M else size, max_nodes=hi if kind is M else size,
        preferred=pref or size, start_time=0.0, time_limit=limit, malleable_ready=kind is M, last_resize=None,
        ending=False, model=model,
    )


def rigid(job_id: int, nodes: int, limit: float | None = 100.0) -> PendingView:
    return PendingView(job_id, 50.0, JobKind.RIGID, nodes, nodes, nodes, limit)


def decide(name: str, now: float, total: int, running: tuple[RunningView, ...], pending: tuple[PendingView, ...] = (),
           **params: object) -> list[object]:
    free = total - sum(r.size for r in running)
    return make_policy(name, {"min_resize_interval": 0, **params}).decide(Snapshot(now, total, free, pending, running))


# ---- expand policies and the feasibility test ---------------------------------------------


@pytest.mark.parametrize(
    ("expand", "expected"),
    [
        ("intensive", [Grow(1, 6)]),  # to its maximum, 8
        ("handoff", [Grow(1, 6)]),  # 6 available > 2 held: worth it, all of it
        ("spare", [Grow(1, 1)]),  # floor(0.5 * 2) = 1, the rest stays idle for arrivals
    ],
)
def test_an_idle_machine_expands_a_job_by_its_expand_policy(expand: str, expected: list[object]) -> None:
    assert decide(f"mebf-basic-{expand}", 100.0, 8, (job(1, 2),)) == expected


@pytest.mark.parametrize("expand", ["intensive", "handoff", "spare"])
def test_no_expand_when_less_than_theta_of_the_initial_estimate_is_left(expand: str) -> None:
    # At t=600 400 s are left, less than 0.5 x 1000: the feasibility test fails.
    assert decide(f"mebf-basic-{expand}", 600.0, 8, (job(1, 2),)) == []
    # With theta 0.3, 400 >= 300 passes.
    assert decide(f"mebf-basic-{expand}", 600.0, 8, (job(1, 2),), theta=0.3) != []


def test_handoff_expands_only_by_more_than_the_job_holds_spare_by_half_intensive_always() -> None:
    # J holds 4 (max 8); 3 nodes are idle.
    running = (job(1, 4), job(2, 1, kind=JobKind.RIGID))
    assert decide("mebf-basic-handoff", 100.0, 8, running) == []  # 3 > 4? no
    assert decide("mebf-basic-spare", 100.0, 8, running) == [Grow(1, 2)]  # 3 > 2: floor(0.5 * 4)
    assert decide("mebf-basic-intensive", 100.0, 8, running) == [Grow(1, 3)]


def test_the_most_scalable_job_is_expanded_first() -> None:
    # Both on 2 nodes, 2 idle: the linear job (efficiency 1) before Amdahl 0.5 (0.67).
    running = (job(1, 2, hi=4, model=PerfModel(speedup="amdahl:0.5")), job(2, 2, hi=4))
    assert decide("mebf-basic-intensive", 100.0, 6, running) == [Grow(2, 2)]


# ---- shrink -------------------------------------------------------------------------------


def test_a_full_machine_shrinks_for_the_first_waiting_job_when_feasible() -> None:
    # J (8 of 8): share_factor 0.4 -> at most 3 nodes; the rigid job needs 3.
    # Predicted: 7200 node-s left, on 5 nodes 1440 s: ends at 1540 <= 2 x 1000 -> feasible.
    assert decide("mebf-basic-handoff", 100.0, 8, (job(1, 8),), (rigid(2, 3),)) == [Shrink(1, 3)]


def test_no_shrink_when_the_reconfiguration_would_more_than_double_the_run_time() -> None:
    # alpha = 200 s per node moved: 600 s of no progress, ends at 2140 > 2 x 1000.
    slow = job(1, 8, model=PerfModel(speedup="linear", alpha=200.0))
    assert decide("mebf-basic-handoff", 100.0, 8, (slow,), (rigid(2, 3),)) == []
    assert decide("mebf-basic-handoff", 100.0, 8, (slow,), (rigid(2, 3),), gamma=2.5) == [Shrink(1, 3)]


def test_shrinks_least_scalable_first_each_by_at_most_share_factor_of_its_nodes() -> None:
    # Two jobs on 5 nodes give at most floor(0.4 * 5) = 2 each; 3 are needed: the Amdahl
    # job (less scalable) gives 2, the linear one the last node.
    running = (job(1, 5), job(2, 5, model=PerfModel(speedup="amdahl:0.5")))
    assert decide("mebf-basic-intensive", 100.0, 10, running, (rigid(3, 3),)) == [Shrink(1, 1), Shrink(2, 2)]


def test_no_job_is_shrunk_for_a_waiting_job_the_shrinks_cannot_serve() -> None:
    # One job on 5 may give 2; 3 are needed: nobody is shrunk for nothing.
    assert decide("mebf-basic-intensive", 100.0, 5, (job(1, 5),), (rigid(2, 3),)) == []


# ---- basic, expand+, shrink+: idle nodes that no queued job can use -------------------------


@pytest.mark.parametrize(
    ("variant", "expected"),
    [
        ("basic", []),  # leaves the gap
        ("expandplus", [Grow(1, 2)]),  # expands even though a job waits
        ("shrinkplus", [Shrink(1, 2)]),  # shrinks so the waiting job fits: 2 idle + 2
    ],
)
def test_basic_leaves_a_gap_no_job_fits_expand_plus_fills_it_shrink_plus_widens_it(
    variant: str, expected: list[object]
) -> None:
    # J on 5 (max 8) and a rigid 1-node job: 2 of 8 idle; the waiting job needs 4.
    running = (job(1, 5), job(2, 1, kind=JobKind.RIGID, limit=10_000.0))
    assert decide(f"mebf-{variant}-intensive", 100.0, 8, running, (rigid(3, 4),)) == expected


def test_a_backfilled_job_leaves_nothing_for_expand_plus() -> None:
    # A 1-node job ending before anything else backfills; expand+ then does not expand.
    running = (job(1, 5), job(2, 1, kind=JobKind.RIGID, limit=10_000.0))
    pending = (rigid(3, 4), PendingView(4, 60.0, JobKind.RIGID, 1, 1, 1, 50.0))
    assert decide("mebf-expandplus-intensive", 100.0, 8, running, pending) == [Start(4, 1)]


def test_malleable_jobs_start_on_their_preferred_size_or_fewer() -> None:
    waiting = PendingView(2, 50.0, M, 2, 8, 4, 100.0)
    assert decide("mebf-basic-handoff", 100.0, 8, (), (waiting,)) == [Start(2, 4)]
    assert decide("mebf-basic-handoff", 100.0, 8, (job(1, 5, kind=JobKind.RIGID),), (waiting,)) == [Start(2, 3)]


def test_the_paper_spelling_of_a_variant_name_is_accepted() -> None:
    assert make_policy("MEBF-Expand+-Spare").name == "mebf-expandplus-spare"  # type: ignore[attr-defined]
