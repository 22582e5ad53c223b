"""Greedy and conservative backfilling, on hand-built snapshots and through the core.

EASY (tested in test_policy_fcfs_easy.py) protects only the head; greedy Backfilling
protects nobody; conservative backfilling protects every queued job's reservation.
"""

from __future__ import annotations

import math

from core_support import submit
from elastic_protocol.jobspec import JobKind, JobSpec
from elasticd.core.actions import ArmLimit, Launch
from elasticd.core.engine import Core
from elasticd.core.events import Exited, PassDue
from elasticd.core.states import JobState
from elasticd.policies import make_policy
from elasticd.policies.base import Grow, PendingView, RunningView, Snapshot, Start

NOW = 0.0


def run(job_id: int, size: int, limit: float | None, kind: JobKind = JobKind.RIGID, requested: int = 0,
        requested_at: float | None = None, hi: int | None = None) -> RunningView:
    return RunningView(
        job_id=job_id, kind=kind, size=size, min_nodes=size if kind is JobKind.RIGID else 1,
        max_nodes=hi or size, preferred=size, start_time=0.0, time_limit=limit,
        malleable_ready=kind is JobKind.EVOLVING, last_resize=None, ending=False,
        requested=requested, requested_at=requested_at,
    )


def wait(job_id: int, nodes: int, limit: float | None, hi: int | None = None, submit: float | None = None) -> PendingView:
    kind = JobKind.RIGID if hi is None else JobKind.MOLDABLE
    return PendingView(job_id, float(job_id) if submit is None else submit, kind, nodes, hi or nodes, hi or nodes, limit)


def starts(policy: str, s: Snapshot) -> list[object]:
    return make_policy(policy).decide(s)


# 6 nodes; R holds 4 until 100. H (head) needs 5 for 100 s: reserved [100, 200), one node
# spare meanwhile. J needs all 6 for 100 s: reserved [200, 300). Y (1 node, 90 s) ends
# before H's reservation; X (1 node, 1000 s) fits H's spare node but would still hold it
# at 200, when J needs every node.
QUEUE = (wait(1, 5, 100), wait(2, 6, 100), wait(3, 1, 90), wait(4, 1, 1000))
SCENE = Snapshot(NOW, 6, 2, QUEUE, (run(9, 4, 100),))


def test_conservative_refuses_a_backfill_that_delays_a_later_jobs_reservation_easy_takes_it() -> None:
    assert starts("easy", SCENE) == [Start(3, 1), Start(4, 1)]
    assert starts("conservative", SCENE) == [Start(3, 1)]


def test_greedy_backfilling_starts_whatever_fits_the_idle_nodes() -> None:
    # Nothing protects H: Y and X take the two idle nodes.
    assert starts("backfill", SCENE) == [Start(3, 1), Start(4, 1)]
    # ... even a job that delays the head: EASY would refuse Z (2 nodes, 1000 s).
    s = Snapshot(NOW, 6, 2, (wait(1, 5, 100), wait(5, 2, 1000)), (run(9, 4, 100),))
    assert starts("easy", s) == []
    assert starts("backfill", s) == [Start(5, 2)]


def test_conservative_starts_a_moldable_job_on_as_many_nodes_as_stay_free_for_its_limit() -> None:
    # 4 idle until R ends at 100, then H takes all 6. M (1..4 nodes) fits before H if it
    # ends by 100: with a 50 s limit it takes all 4; with 200 s it must wait.
    quick = Snapshot(NOW, 6, 4, (wait(1, 6, 100), wait(2, 1, 50, hi=4)), (run(9, 2, 100),))
    assert starts("conservative", quick) == [Start(2, 4)]
    slow = Snapshot(NOW, 6, 4, (wait(1, 6, 100), wait(2, 1, 200, hi=4)), (run(9, 2, 100),))
    assert starts("conservative", slow) == []


def test_conservative_a_job_behind_an_unlimited_one_waits_for_ever_but_does_not_block_others() -> None:
    # U (unlimited) holds 3 of 4 for ever, H needs 4: never. Nothing later may delay "never",
    # so a 1-node job may run, as EASY would let it.
    s = Snapshot(NOW, 4, 1, (wait(1, 4, 100), wait(2, 1, None)), (run(9, 3, None),))
    assert starts("conservative", s) == [Start(2, 1)]


def test_conservative_an_evolving_request_holds_its_place_in_the_queue() -> None:
    # E (evolving, 1 node, limit 500) asked for 3 more at t=-5, before P was submitted at
    # t=0; 2 nodes are idle and R frees 1 more at 100, when the request can be met. The
    # request comes first: P (1 node, 1000 s) would hold a node it needs then, so P waits.
    # EASY serves the queue first and lets P start.
    running = (run(7, 1, 500, kind=JobKind.EVOLVING, requested=3, requested_at=-5.0, hi=4), run(8, 1, 100))
    s = Snapshot(NOW, 4, 2, (wait(1, 1, 1000, submit=0.0),), running)
    assert starts("conservative", s) == []
    assert starts("easy", s) == [Start(1, 1)]
    later = Snapshot(100.0, 4, 3, (wait(1, 1, 1000, submit=0.0),), running[:1])
    assert starts("conservative", later) == [Grow(7, 3)]


def test_conservative_through_the_core_every_job_starts_at_its_first_reservation() -> None:
    """Jobs end at their limits; each starts exactly when conservative first planned it."""
    core = Core([f"n{i}" for i in range(1, 7)], make_policy("conservative"))

    def sub(name: str, nodes: int, minutes: int) -> int:
        return submit(core, JobSpec(name=name, command=["x"], nodes=nodes, time_limit=minutes), 0.0).job_id

    r = sub("r", 4, 10)  # ends at 600
    h = sub("h", 5, 10)  # 600..1200
    j = sub("j", 6, 10)  # 1200..1800
    y = sub("y", 1, 9)  # 0..540, before h
    x = sub("x", 1, 100)  # would sit on a node at 1200: 1800 onwards
    assert [a.job_id for a in core.handle(PassDue(0.0)) if isinstance(a, Launch)] == [r, y]
    ends = {r: 600.0, y: 540.0}
    expected = {h: 600.0, j: 1200.0, x: 1800.0}
    t = 0.0
    while core.pending_ids or core.active_ids:
        t = min(ends.values())
        for jid in [k for k, v in ends.items() if v == t]:
            core.handle(Exited(t, jid, 0, 0))
            del ends[jid]
        for a in core.handle(PassDue(t)):
            if isinstance(a, ArmLimit):
                continue  # each job ends at its limit below
            assert isinstance(a, Launch)
            assert expected.pop(a.job_id) == t
            ends[a.job_id] = t + (core.job(a.job_id).time_limit or math.inf)
    assert expected == {} and core.job(x).state is JobState.COMPLETED
