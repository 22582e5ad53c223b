"""Hand-computed FCFS and EASY-backfilling schedules, driven through the real core.

Time moves forward only by explicit `now` values: a job "runs" from the `Launch` the core
returns until the test calls `core.exited(job_id, now, 0, 0)` and then `core.schedule(now)`.
Time limits are in Slurm form (a bare int is minutes, "M:SS" is minutes and seconds).
"""

from __future__ import annotations

import pytest

from core_support import submit as submit_spec
from elastic_protocol.jobspec import JobKind, JobSpec
from elasticd.core.actions import Action, ArmLimit, Launch, Terminate
from elasticd.core.engine import Core
from elasticd.core.events import CancelRequested, Exited, LimitReached, PassDue
from elasticd.core.states import JobState
from elasticd.policies import make_policy

BOTH = pytest.mark.parametrize("policy", ["fcfs", "easy"])


def spec(
    name: str,
    nodes: int | dict[str, int],
    limit: int | str | None = None,
    kind: JobKind | None = None,
) -> JobSpec:
    return JobSpec(name=name, command=["true"], nodes=nodes, time_limit=limit, kind=kind)


def cluster(policy: str, n: int = 4) -> Core:
    return Core([f"n{i}" for i in range(1, n + 1)], make_policy(policy))


def submit(core: Core, now: float, name: str, nodes: int | dict[str, int], limit: int | str | None = None,
           kind: JobKind | None = None) -> int:
    return submit_spec(core, spec(name, nodes, limit, kind), now).job_id


def starts(actions: list[Action]) -> list[tuple[int, tuple[str, ...]]]:
    """(job id, hosts) of every Launch, in the order the core issued them."""
    assert all(isinstance(a, (Launch, ArmLimit)) for a in actions), actions
    return [(a.job_id, a.hosts) for a in actions if isinstance(a, Launch)]


def end(core: Core, job_id: int, now: float) -> list[tuple[int, tuple[str, ...]]]:
    """The job exits cleanly at `now`; return what the following scheduling pass starts."""
    core.handle(Exited(now, job_id, 0, 0))
    return starts(core.handle(PassDue(now)))


# ---- the 4-node example: A 3 nodes 10 min, B 2 nodes, C 1 node 5 min -------------------


def test_fcfs_blocks_every_job_behind_a_head_that_does_not_fit() -> None:
    core = cluster("fcfs")
    a = submit(core, 0, "A", 3, limit=10)
    b = submit(core, 0, "B", 2, limit=10)
    c = submit(core, 0, "C", 1, limit=5)
    # C would fit on the idle node, but FCFS keeps it behind B.
    assert starts(core.handle(PassDue(0))) == [(a, ("n1", "n2", "n3"))]
    assert starts(core.handle(PassDue(300))) == []
    assert end(core, a, 600) == [(b, ("n1", "n2")), (c, ("n3",))]
    assert core.job(b).start_time == 600 and core.job(c).start_time == 600


def test_easy_backfills_short_job_that_ends_before_head_reservation() -> None:
    """B's reservation is 600 (A's limit); C ends at 300, so it runs now on the idle node."""
    core = cluster("easy")
    a = submit(core, 0, "A", 3, limit=10)
    b = submit(core, 0, "B", 2, limit=10)
    c = submit(core, 0, "C", 1, limit=5)
    assert starts(core.handle(PassDue(0))) == [(a, ("n1", "n2", "n3")), (c, ("n4",))]
    assert end(core, c, 300) == []  # one node free, B needs two
    assert end(core, a, 600) == [(b, ("n1", "n2"))]
    assert (core.job(b).start_time, core.job(c).start_time) == (600, 0)


@pytest.mark.parametrize(("limit", "backfilled"), [("8:20", True), ("8:21", False)])
def test_easy_backfill_without_extra_nodes_must_end_by_the_head_reservation(
    limit: str, backfilled: bool
) -> None:
    """Reservation for B is 600 with no spare node; C submitted at 100 may run 500 s, not 501."""
    core = cluster("easy")
    submit(core, 0, "A", 3, limit=10)
    submit(core, 0, "B", 4)
    core.handle(PassDue(0))
    c = submit(core, 100, "C", 1, limit=limit)
    assert starts(core.handle(PassDue(100))) == ([(c, ("n4",))] if backfilled else [])


def test_easy_backfills_long_job_into_nodes_the_head_will_not_need() -> None:
    """At B's reservation (600) 4 nodes are free and B needs 3: one spare node, for ever."""
    core = cluster("easy")
    a = submit(core, 0, "A", 2, limit=10)
    b = submit(core, 0, "B", 3)
    c = submit(core, 0, "C", 1)  # unlimited
    assert starts(core.handle(PassDue(0))) == [(a, ("n1", "n2")), (c, ("n3",))]
    # C is still running, and B starts at its reservation all the same.
    assert end(core, a, 600) == [(b, ("n1", "n2", "n4"))]


def test_easy_refuses_a_backfill_that_would_delay_the_head() -> None:
    """C needs 2 nodes until 1200; only 1 is spare at B's reservation (600)."""
    core = cluster("easy")
    a = submit(core, 0, "A", 2, limit=10)
    b = submit(core, 0, "B", 3)
    c = submit(core, 0, "C", 2, limit=20)
    assert starts(core.handle(PassDue(0))) == [(a, ("n1", "n2"))]
    assert end(core, a, 600) == [(b, ("n1", "n2", "n3"))]
    assert core.job(c).state is JobState.PENDING


def test_easy_long_backfills_share_the_spare_nodes() -> None:
    core = cluster("easy")
    submit(core, 0, "A", 2, limit=10)
    submit(core, 0, "B", 3)
    c = submit(core, 0, "C", 1)
    d = submit(core, 0, "D", 1)  # would fit on the last idle node, but it is B's
    assert [jid for jid, _ in starts(core.handle(PassDue(0)))] == [1, c]
    assert core.job(d).state is JobState.PENDING


def test_easy_counts_jobs_started_in_the_same_pass_toward_the_head_reservation() -> None:
    """A starts in this pass; B's reservation is A's end (600), leaving one spare node for D."""
    core = cluster("easy")
    a = submit(core, 0, "A", 2, limit=10)
    submit(core, 0, "B", 3)
    submit(core, 0, "C", 2)  # unlimited, 2 nodes: more than the spare one
    d = submit(core, 0, "D", 1)  # unlimited, 1 node: fits the spare one
    assert starts(core.handle(PassDue(0))) == [(a, ("n1", "n2")), (d, ("n3",))]


def test_easy_treats_unlimited_running_jobs_as_never_ending() -> None:
    """U has no limit, so B (all 4 nodes) has no reservation and no node to spare: only jobs
    with a limit may backfill, and an unlimited candidate never counts as ending in time."""
    core = cluster("easy")
    u = submit(core, 0, "U", 2)
    b = submit(core, 0, "B", 4)
    c = submit(core, 0, "C", 1)
    d = submit(core, 0, "D", 1, limit=1)
    assert starts(core.handle(PassDue(0))) == [(u, ("n1", "n2")), (d, ("n3",))]
    assert end(core, d, 60) == []
    assert end(core, u, 1000) == [(b, ("n1", "n2", "n3", "n4"))]
    assert end(core, b, 1100) == [(c, ("n1",))]


def test_easy_backfills_into_spare_nodes_even_when_the_head_has_no_reservation_time() -> None:
    """U has no limit, but whenever it ends 4 nodes are free and B needs 3: one is spare."""
    core = cluster("easy")
    u = submit(core, 0, "U", 2)
    b = submit(core, 0, "B", 3)
    c = submit(core, 0, "C", 1)
    d = submit(core, 0, "D", 1)
    assert starts(core.handle(PassDue(0))) == [(u, ("n1", "n2")), (c, ("n3",))]
    assert end(core, u, 1000) == [(b, ("n1", "n2", "n4"))]
    assert core.job(d).state is JobState.PENDING


def test_easy_reservation_comes_from_finite_limits_only() -> None:
    """U (unlimited) holds n1, R (10 min) n2-n3; B's reservation is R's end at 600, no spare."""
    core = cluster("easy")
    submit(core, 0, "U", 1)
    submit(core, 0, "R", 2, limit=10)
    core.handle(PassDue(0))
    submit(core, 0, "B", 3)
    c = submit(core, 0, "C", 1, limit=15)  # ends at 900: after the reservation
    d = submit(core, 0, "D", 1, limit=5)  # ends at 300: before it
    assert starts(core.handle(PassDue(0))) == [(d, ("n4",))]
    assert core.job(c).state is JobState.PENDING


def test_easy_counts_the_nodes_of_a_job_being_ended_as_back_now() -> None:
    core = cluster("easy")
    u = submit(core, 0, "U", 3)
    b = submit(core, 0, "B", 2)
    core.handle(PassDue(0))
    assert core.handle(CancelRequested(10, u)) == [Terminate(u, ("n1", "n2", "n3"), JobState.CANCELLED)]
    # B can start as soon as U is gone and will need 2 of the 4 nodes: 2 spare.
    c = submit(core, 10, "C", 1)
    assert starts(core.handle(PassDue(10))) == [(c, ("n4",))]
    core.handle(Exited(12, u, None, 15))
    assert starts(core.handle(PassDue(12))) == [(b, ("n1", "n2"))]


@pytest.mark.parametrize("ending_limit", [None, 20])
def test_easy_backfill_never_delays_head_when_an_ending_job_sorts_after_a_running_one(
    ending_limit: int | None,
) -> None:
    """BUG (easy.py shadow_time, line 30): running jobs are sorted by `estimated_end`, but a
    job being ended counts as ending *now* (line 31).

    R (1 node) ends at 100; E (2 nodes, unlimited or 20 min) is cancelled at 10; H needs 3
    and 1 node is idle. Truly H can start as soon as E is gone (1 + 2 = 3 nodes, 0 spare).
    shadow_time walks R before E, so it returns (now, 1 spare node) — counting R's node as
    spare although it comes back only at 100 — and B (1 node, unlimited) is backfilled onto
    the idle node. When E exits, H cannot start: it waits for R until 100.
    """
    core = cluster("easy")
    r = submit(core, 0, "R", 1, limit="1:40")
    e = submit(core, 0, "E", 2, limit=ending_limit)
    h = submit(core, 0, "H", 3)
    assert [jid for jid, _ in starts(core.handle(PassDue(0)))] == [r, e]
    assert len(core.handle(CancelRequested(10, e))) == 1
    assert starts(core.handle(PassDue(10))) == []
    b = submit(core, 20, "B", 1)
    assert starts(core.handle(PassDue(20))) == [], "B takes the node H needs once E is gone"
    core.handle(Exited(25, e, None, 15))
    assert starts(core.handle(PassDue(25))) == [(h, ("n2", "n3", "n4"))]
    assert core.job(b).state is JobState.PENDING


def test_easy_counts_every_job_ending_at_the_shadow_time_toward_spare_nodes() -> None:
    """BUG (easy.py shadow_time, lines 30-34): it stops at the first job that covers the
    head's need, so other jobs ending at the same time are not counted as spare nodes.

    5 nodes: A and B (2 nodes each, 10 min) run, 1 node idle; H needs 3. At H's reservation
    (600) all 5 nodes are free, 2 more than H needs, so C (1 node, unlimited) may use the idle
    node without delaying H. shadow_time returns (600, 0 spare) and C is refused: a lost
    backfill (never an unsafe one), unlike EASY as described in the module docstring.
    """
    core = cluster("easy", 5)
    a = submit(core, 0, "A", 2, limit=10)
    b = submit(core, 0, "B", 2, limit=10)
    h = submit(core, 0, "H", 3)
    assert [jid for jid, _ in starts(core.handle(PassDue(0)))] == [a, b]
    c = submit(core, 1, "C", 1)
    assert starts(core.handle(PassDue(1))) == [(c, ("n5",))]
    core.handle(Exited(600, a, 0, 0))
    assert end(core, b, 600) == [(h, ("n1", "n2", "n3"))]


def test_easy_uses_a_moldable_heads_minimum_for_its_reservation() -> None:
    core = cluster("easy")
    a = submit(core, 0, "A", 2, limit=10)
    m = submit(core, 0, "M", {"min": 3, "max": 4})
    c = submit(core, 0, "C", 1)  # spare node at 600: 4 free, M needs at least 3
    assert starts(core.handle(PassDue(0))) == [(a, ("n1", "n2")), (c, ("n3",))]
    assert end(core, a, 600) == [(m, ("n1", "n2", "n4"))]


def test_easy_caps_a_long_moldable_backfill_to_the_spare_nodes() -> None:
    core = cluster("easy")
    submit(core, 0, "A", 2, limit=10)
    submit(core, 0, "B", 3)
    m = submit(core, 0, "M", {"min": 1, "max": 2})  # unlimited: only the 1 spare node
    assert starts(core.handle(PassDue(0)))[1:] == [(m, ("n3",))]


def test_easy_lets_a_short_moldable_backfill_take_every_free_node() -> None:
    core = cluster("easy")
    submit(core, 0, "A", 2, limit=10)
    submit(core, 0, "B", 3)
    m = submit(core, 0, "M", {"min": 1, "max": 4}, limit=5)  # gone by 600
    assert starts(core.handle(PassDue(0)))[1:] == [(m, ("n3", "n4"))]


# ---- both policies -------------------------------------------------------------------


@BOTH
def test_jobs_that_fit_start_in_submit_order_in_one_pass(policy: str) -> None:
    core = cluster(policy)
    ids = [submit(core, t, name, n) for t, name, n in [(0, "A", 1), (1, "B", 2), (2, "C", 1), (3, "D", 1)]]
    assert starts(core.handle(PassDue(3))) == [
        (ids[0], ("n1",)), (ids[1], ("n2", "n3")), (ids[2], ("n4",)),
    ]
    assert core.pending_ids == [ids[3]]


@BOTH
def test_moldable_job_starts_on_min_of_its_max_and_the_free_nodes(policy: str) -> None:
    core = cluster(policy)
    submit(core, 0, "A", 1)
    m = submit(core, 0, "M", {"min": 2, "max": 8})
    assert starts(core.handle(PassDue(0)))[1:] == [(m, ("n2", "n3", "n4"))]


@BOTH
def test_moldable_job_takes_only_its_max_when_more_nodes_are_free(policy: str) -> None:
    core = cluster(policy)
    m = submit(core, 0, "M", {"min": 1, "max": 2, "preferred": 1})
    other = submit(core, 0, "O", 2)
    assert starts(core.handle(PassDue(0))) == [(m, ("n1", "n2")), (other, ("n3", "n4"))]


@BOTH
def test_moldable_head_waits_until_its_minimum_is_free(policy: str) -> None:
    core = cluster(policy)
    a = submit(core, 0, "A", 3, limit=10)
    m = submit(core, 0, "M", {"min": 2, "max": 4})
    assert starts(core.handle(PassDue(0))) == [(a, ("n1", "n2", "n3"))]
    assert end(core, a, 600) == [(m, ("n1", "n2", "n3", "n4"))]


@BOTH
def test_malleable_job_starts_as_wide_as_it_may_like_a_moldable_one(policy: str) -> None:
    """Neither policy resizes, so a malleable job starts on min(max, free) nodes."""
    core = cluster(policy)
    j = submit(core, 0, "J", {"min": 1, "max": 3}, kind=JobKind.MALLEABLE)
    assert starts(core.handle(PassDue(0))) == [(j, ("n1", "n2", "n3"))]


@BOTH
def test_evolving_job_starts_at_its_minimum(policy: str) -> None:
    """An evolving job asks for more nodes itself, so it is started on its minimum."""
    core = cluster(policy)
    j = submit(core, 0, "J", {"min": 2, "max": 4}, kind=JobKind.EVOLVING)
    assert starts(core.handle(PassDue(0))) == [(j, ("n1", "n2"))]


@BOTH
def test_time_limit_frees_nodes_for_the_waiting_head_once_the_job_is_gone(policy: str) -> None:
    core = cluster(policy)
    a = submit(core, 0, "A", 4, limit=1)
    b = submit(core, 0, "B", 4)
    core.handle(PassDue(0))
    assert core.handle(LimitReached(60, a)) == [Terminate(a, ("n1", "n2", "n3", "n4"), JobState.TIMEOUT)]
    assert starts(core.handle(PassDue(60))) == []
    core.handle(Exited(61, a, None, 9))
    assert starts(core.handle(PassDue(61))) == [(b, ("n1", "n2", "n3", "n4"))]
    assert core.job(a).state is JobState.TIMEOUT


@pytest.mark.parametrize("fraction", [0.0, 0.5])
def test_easy_sizes_jobs_by_start_size_as_it_would_through_a_sizer_of_its_own(fraction: float) -> None:
    # easy_pass spells start_size out for its default sizer (no call per job that fits): on
    # every pass of a real trace's run, the same starts, spare nodes and queue as when the
    # very same rule comes as any other sizer.
    from pathlib import Path

    from elasticd.policies.base import Decision, Snapshot, start_size
    from elasticd.policies.easy import easy_pass
    from elasticd.sim.simulator import simulate
    from elasticd.sim.swf import Trace, read_swf
    from elasticd.sim.workload import build_workload

    t = read_swf(Path(__file__).resolve().parent.parent / "examples" / "traces" / "sdsc-sp2-1998.swf.gz")
    trace = Trace(t.name, t.nodes, t.jobs[:400])
    easy = make_policy("easy")
    seen: list[Snapshot] = []

    class Recording:
        name = "easy"

        def decide(self, snap: Snapshot) -> list[Decision]:
            seen.append(snap)
            return easy.decide(snap)

    simulate(build_workload(trace, fraction, 5), trace.nodes, Recording())
    backfilled = 0
    for snap in seen:
        plain = easy_pass(snap)
        other = easy_pass(snap, lambda job, available: start_size(job, available), lambda job: job.start_nodes)
        assert plain.starts == other.starts
        assert (plain.free, plain.extra, plain.waiting) == (other.free, other.extra, other.waiting)
        backfilled += plain.backfilled
    assert len(seen) > 500 and backfilled > 20
