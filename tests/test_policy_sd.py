"""SD-Policy (whole nodes) on hand-built snapshots.

The common scene, at t=100: mates A and B (malleable, 4 nodes each, min 1, limit 1000 s,
submitted and started at 0, linear) fill 8 nodes and will end at 1000. J (malleable, min 1,
preferred 4, limit 200 s, so 800 node-seconds of work) waits: statically it starts at 1000
and ends at 1200.

- One mate lending floor(0.5 * 4) = 2 nodes: J runs 400 s on 2, ends at 500. The mate
  loses 2 x 400 = 800 node-seconds, 200 s at its 4 nodes: it ends at 1200, penalty
  (0 wait + 200 + 1000) / 1000 = 1.2.
- Both mates lending 2: J runs 200 s on 4, ends at 300; each loses 400, ends at 1100:
  penalties 1.1 + 1.1 = 2.2.
The least total penalty is one mate, A (ties go to the lower job id).
"""

from __future__ import annotations

from dataclasses import replace

from elastic_protocol.jobspec import JobKind, PerfModel
from elastic_protocol.models import ReconfigCost, WorkProgress, parse_speedup
from elasticd.policies import make_policy
from elasticd.policies.base import (
    Grow,
    PendingView,
    RunningView,
    Shrink,
    Snapshot,
    Start,
)
from elasticd.policies.predict import end_at
from elasticd.policies.profile import profile_of
from elasticd.policies.sd import SdPolicy

M = JobKind.MALLEABLE


def mate(job_id: int, size: int, limit: float = 1000.0, pref: int | None = None, kind: JobKind = M,
         start: float = 0.0, submit: float = 0.0) -> RunningView:
    return RunningView(
        job_id=job_id, kind=kind, size=size, min_nodes=1 if kind is M else size, max_nodes=8 if kind is M else size,
        preferred=pref or size, start_time=start, time_limit=limit, malleable_ready=kind is M, last_resize=None,
        ending=False, submit_time=submit,
    )


J = PendingView(3, 100.0, M, 1, 4, 4, 200.0)


def decide(running: tuple[RunningView, ...], pending: tuple[PendingView, ...] = (J,), total: int = 8,
           **params: object) -> list[object]:
    free = total - sum(r.size for r in running)
    policy = make_policy("sd", {"min_resize_interval": 0, **params})
    return policy.decide(Snapshot(100.0, total, free, pending, running))


MATES = (mate(1, 4), mate(2, 4))


def test_one_mate_of_least_penalty_lends_its_nodes_when_the_new_job_ends_earlier() -> None:
    assert decide(MATES) == [Shrink(1, 2)]


def test_a_mate_whose_penalty_reaches_max_slowdown_is_refused() -> None:
    # 1.2 >= 1.15: A alone is refused; the pair's 1.1 + 1.1 passes.
    assert decide(MATES, max_slowdown=1.15) == [Shrink(1, 2), Shrink(2, 2)]
    # 1.1 >= 1.05 too: no mate at all, J waits for its static start.
    assert decide(MATES, max_slowdown=1.05) == []


def test_dynamic_max_slowdown_is_the_running_jobs_average_predicted_slowdown() -> None:
    # C (rigid, 2 nodes, submitted at -500, started at 0, limit 1000) has slowdown
    # 1500/1000 = 1.5; with A and B at 1.0 the average is 1.1667: A alone (1.2) is refused,
    # the pair (1.1 each) is not. A static MAX_SLOWDOWN of 10 takes A alone.
    running = (*MATES, mate(4, 2, kind=JobKind.RIGID, submit=-500.0))
    assert decide(running, total=10, dynamic_max_slowdown=True) == [Shrink(1, 2), Shrink(2, 2)]
    assert decide(running, total=10) == [Shrink(1, 2)]


def test_no_mate_when_the_new_job_would_not_end_before_its_static_start_allows() -> None:
    # A and B end at 150: J starts statically at 150, ends at 350. One mate: J ends at
    # 500, no better. Two: J would end at 300, but A and B finish first (at 200, shrunk):
    # the new job must finish inside its mates' allocation.
    assert decide((mate(1, 4, limit=150.0), mate(2, 4, limit=150.0))) == []


def test_at_most_max_mates_are_shrunk_and_each_lends_at_most_sharing_factor() -> None:
    # Four mates of 2 nodes lend floor(0.5 * 2) = 1 each; K needs at least 2 nodes: two
    # mates (K ends at 500, not 1200). With max_mates 1 no single mate is enough.
    running = tuple(mate(i, 2) for i in (1, 2, 5, 6))
    k = PendingView(3, 100.0, M, 2, 4, 4, 200.0)
    assert decide(running, pending=(k,)) == [Shrink(1, 1), Shrink(2, 1)]
    assert decide(running, pending=(k,), max_mates=1) == []
    assert decide(running, pending=(k,), sharing_factor=0.4) == []  # floor(0.4 * 2) = 0


def test_no_mate_lends_for_a_reduced_start_the_job_would_give_up_once_the_nodes_are_back() -> None:
    # C (rigid, 2 nodes) ends at 150. With A's 2 nodes J could start now on 2 and end at
    # 500 -- but once they are back, J would rather wait for C and start on 4 at 150
    # (ending at 350), leaving A's nodes idle meanwhile. So A alone is not asked; both
    # mates together start J on its preferred 4 at once.
    running = (*MATES, mate(4, 2, limit=50.0, kind=JobKind.RIGID, start=100.0))
    assert decide(running, total=10) == [Shrink(1, 2), Shrink(2, 2)]


def test_a_malleable_job_starts_reduced_on_idle_nodes_when_that_ends_earlier_than_waiting() -> None:
    # 2 idle nodes, J wants 4: on 2 it ends at 500 instead of 1200, no mate needed.
    running = (mate(1, 4), mate(2, 2, kind=JobKind.RIGID))
    assert decide(running) == [Start(3, 2)]


def test_rigid_jobs_never_get_mates() -> None:
    rigid = PendingView(3, 100.0, JobKind.RIGID, 4, 4, 4, 200.0)
    assert decide(MATES, pending=(rigid,)) == []


def test_idle_nodes_go_back_to_the_jobs_that_lent_them_only_where_no_reservation_needs_them() -> None:
    # A ran on 4 and lent 2 at t=50; R (rigid, 4) ends at 300; 2 idle.
    lender = replace(mate(1, 2, pref=4), history=((0.0, 4), (50.0, 2)))
    r = mate(2, 4, limit=300.0, kind=JobKind.RIGID)
    assert decide((lender, r), pending=()) == [Grow(1, 2)]
    # H needs 5 at 300 for 100 s: only 1 node stays free meanwhile, less than A lent, so
    # A gets nothing (nodes go back whole, not one at a time).
    h = PendingView(4, 90.0, JobKind.RIGID, 5, 5, 5, 100.0)
    assert decide((lender, r), pending=(h,)) == []
    # H needs 4 instead: 2 stay free, all A lent.
    h4 = PendingView(4, 90.0, JobKind.RIGID, 4, 4, 4, 100.0)
    assert decide((lender, r), pending=(h4,)) == [Grow(1, 2)]
    # A job that never lent (started on 2 of its preferred 4) is not grown.
    assert decide((mate(1, 2, pref=4), r), pending=()) == []


def test_a_reduced_start_keeps_its_nodes_for_its_limit_scaled_to_that_size() -> None:
    # Found by the stateful test (2 nodes, t=1): R (rigid, 1 node, limit 960 s) runs; H
    # (rigid, 2 nodes, no limit) heads the queue, reserved at 960; five 1-node rigid jobs
    # without a limit wait behind it (they never fit before H). K (malleable 1..2, preferred
    # 2, limit 660 s at 2 nodes, linear) cannot start on 2 before H. On the 1 idle node its
    # limit is 660 x S(2)/S(1) = 1320 s (the core's rule): it would hold that node until
    # 1321 and push H back from 960 -- the map must count that limit, not the 660 s of its
    # preferred size.
    r = RunningView(
        job_id=5, kind=JobKind.RIGID, size=1, min_nodes=1, max_nodes=1, preferred=1, start_time=0.0,
        time_limit=960.0, malleable_ready=False, last_resize=None, ending=False, submit_time=0.0,
        history=((0.0, 1),), limit_end=960.0,
    )
    h = PendingView(4, 0.0, JobKind.RIGID, 2, 2, 2, None)
    behind = tuple(PendingView(i, 0.0 if i == 6 else 1.0, JobKind.RIGID, 1, 1, 1, None) for i in range(6, 11))
    k = PendingView(11, 1.0, M, 1, 2, 2, 660.0, PerfModel(speedup="linear", work=10, alpha=0.5, beta=1.0, b=0.2))
    policy = make_policy("sd", {"min_resize_interval": 0})
    assert policy.decide(Snapshot(1.0, 2, 1, (h, *behind, k), (r,))) == []
    # With R's limit at 1400, H is reserved at 1400 and K's 1320 s on 1 node fit before it.
    later = replace(r, time_limit=1400.0, limit_end=1400.0)
    assert policy.decide(Snapshot(1.0, 2, 1, (h, *behind, k), (later,))) == [Start(11, 1)]


def test_a_mate_set_must_fit_the_map_for_the_new_jobs_limit_on_the_size_it_starts_on() -> None:
    # A (malleable, 4 nodes, limit 400) and R (rigid, 4, limit 300) fill 8 nodes; H (rigid,
    # 8, no limit) heads the queue, reserved at 400. J (preferred 4, limit 200 s at 4,
    # 400 s of work, linear) cannot start statically before H. A lending 2 starts J on 2,
    # predicted to end at 300, but its limit there is 400 s: it may hold the 2 nodes until
    # 500, past A's limit, where the map has none to spare before H. So A is not asked.
    j = PendingView(3, 100.0, M, 1, 4, 4, 200.0, PerfModel(speedup="linear", work=400))
    h = PendingView(4, 50.0, JobKind.RIGID, 8, 8, 8, None)
    r = mate(2, 4, limit=300.0, kind=JobKind.RIGID)
    assert decide((mate(1, 4, limit=400.0), r), pending=(h, j)) == []
    # A's allocation lasting to 600 covers J's 400 s on its 2 nodes: A lends.
    assert decide((mate(1, 4, limit=600.0), r), pending=(h, j)) == [Shrink(1, 2)]


def test_a_moldable_job_started_wider_than_its_minimum_is_held_for_its_limit_on_that_width() -> None:
    # Found by the stateful test (5 idle nodes, t=200). Q: 3 (rigid 1, no limit), 4 (moldable
    # 1..2, limit 300 s at 2, linear model), 5 (rigid 3, no limit), 6 and 7 (rigid 1, no
    # limit), 8 (rigid 1, limit 540 s). 3 starts, 4 starts on 2 nodes, where the core gives
    # it 300 s (600 s only on 1): the head 5 can start at 500. 6 fits beside 5 for ever, 7
    # does not; 8 would hold a node until 740 and push 5 back from 500. With 4 held for
    # 600 s, 5 was reserved at 800 and 8 started.
    def rigid(job_id: int, nodes: int, limit: float | None) -> PendingView:
        return PendingView(job_id, 0.0, JobKind.RIGID, nodes, nodes, nodes, limit)

    moldable = PendingView(4, 0.0, JobKind.MOLDABLE, 1, 2, 2, 300.0, PerfModel(speedup="linear"))
    queue = (rigid(3, 1, None), moldable, rigid(5, 3, None), rigid(6, 1, None), rigid(7, 1, None), rigid(8, 1, 540.0))
    policy = make_policy("sd", {"min_resize_interval": 0})
    assert policy.decide(Snapshot(200.0, 5, 5, queue, ())) == [Start(3, 1), Start(4, 2), Start(6, 1)]


def test_a_running_jobs_predicted_end_ranked_without_a_copy_is_work_progress_end_time_to_the_last_bit() -> None:
    # SD ranks mates by end_at, which must not move a single decision: the same floats as
    # the clone-and-advance it replaces, frozen or not, finished or not, any model.
    seen = 0
    for model in ("linear", "amdahl:0.07", "rho:0.13"):
        for cost in (ReconfigCost(), ReconfigCost(0.3, 7.1, 0.2)):
            for changes in ((), ((33.3, 5),), ((33.3, 5), (101.7, 2), (101.9, 9))):
                p = WorkProgress(1234.567, parse_speedup(model), cost, 3, 10.1)
                for t, n in changes:
                    p.resize(n, t)
                for now in (p.last, p.frozen_until, 150.123456789, 333.3, 1e4, 1e6):
                    seen += 1
                    assert repr(end_at(p, now)) == repr(p.clone().end_time(now))
    assert seen == 3 * 2 * 3 * 6


def test_sd_builds_the_same_map_as_profile_of_from_the_releases_it_keeps_per_view() -> None:
    # SD keeps each running job's release between passes and clamps nothing itself: the map
    # must still be the snapshot's, whatever the jobs' states, also at a later time with the
    # same views (a job past its limit comes back "now", which moved).
    running = (
        mate(1, 4),  # back at 1000
        replace(mate(2, 3, limit=50.0), limit_end=50.0),  # past its limit: back now
        replace(mate(3, 2), ending=True),  # being ended: counted as incoming, not released
        replace(mate(4, 4, limit=700.0), shrinking=1),  # 3 back at 700, 1 incoming
        replace(mate(5, 2), time_limit=None),  # unlimited: never back
        mate(6, 1, limit=700.0),  # merged with job 4's release
    )
    policy = SdPolicy()
    for now, free, incoming in ((100.0, 0, 3), (100.0, 2, 3), (400.0, 1, 3), (1000.0, 1, 0)):
        snap = Snapshot(now, 20, free, (), running, incoming)
        assert policy._map(snap).segments() == profile_of(snap).segments()
