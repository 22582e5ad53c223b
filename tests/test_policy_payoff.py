"""Payoff's decisions on hand-built snapshots: loans come back whatever the resize interval,
a resize is made only when what it saves is more than what it costs, and with no malleable
job it is EASY (per job on every trace: tests/test_policy_baselines.py)."""

from __future__ import annotations

from elastic_protocol.jobspec import JobKind, PerfModel
from elasticd.policies.base import Grow, PendingView, RunningView, Shrink, Snapshot, Start
from elasticd.policies.easy import EasyBackfill
from elasticd.policies.payoff import Payoff

M, R = JobKind.MALLEABLE, JobKind.RIGID
NOW = 1000.0
AMDAHL = PerfModel(speedup="amdahl:0.05", alpha=1.0)


def running(job_id: int, size: int, pref: int, lo: int = 1, hi: int = 16, limit: float = 3600.0,
            last_resize: float | None = None, model: PerfModel | None = AMDAHL, start: float = NOW - 100) -> RunningView:
    return RunningView(job_id=job_id, kind=M, size=size, min_nodes=lo, max_nodes=hi, preferred=pref,
                       start_time=start, time_limit=limit, malleable_ready=True, last_resize=last_resize,
                       ending=False, submit_time=start, model=model, history=((start, size),))


def waiting(job_id: int, need: int, limit: float = 600.0, kind: JobKind = R) -> PendingView:
    return PendingView(job_id, NOW - 10, kind, need, need, need, limit, None)


def snap(free: int, pending: tuple[PendingView, ...], run: tuple[RunningView, ...], total: int = 16) -> Snapshot:
    return Snapshot(NOW, total, free, pending, run)


def test_a_loan_comes_back_at_once_for_a_waiting_job_whatever_the_resize_interval() -> None:
    # Job 1 runs on 12 nodes, 4 above its preferred 8 (a loan), resized a second ago.
    lent = running(1, 12, pref=8, last_resize=NOW - 1)
    out = Payoff(min_resize_interval=60).decide(snap(4, (waiting(2, 8),), (lent,)))
    assert out == [Shrink(1, 4)]


def test_idle_nodes_are_lent_furthest_below_preferred_first_when_the_loan_saves_more_than_it_costs() -> None:
    a = running(1, 2, pref=8)   # 1/4 of its preferred size
    b = running(2, 6, pref=8)   # 3/4
    out = Payoff().decide(snap(4, (), (a, b)))
    assert out == [Grow(1, 4)]


def test_no_loan_when_the_job_would_end_before_the_reconfiguration_pays_off() -> None:
    # Almost done: about 3 s of work left on its 2 nodes; growing by 4 costs 4 s of no
    # progress (alpha = 1 s per node), more than it could save.
    s = AMDAHL.speedup_model
    limit = (100 * s.speedup(2) + 3 * s.speedup(2)) / s.speedup(8)  # its limit is at its preferred 8
    nearly = running(1, 2, pref=8, limit=limit, start=NOW - 100)
    assert Payoff().decide(snap(4, (), (nearly,))) == []


def test_a_shrink_below_preferred_is_made_only_when_the_wait_saved_outweighs_the_slowdown_it_causes() -> None:
    # A short job (60 s) waits for the whole machine held by a long job until its limit: the
    # long job is shrunk to its minimum and the short one starts.
    long = running(1, 16, pref=16, lo=4, limit=36000.0)
    short = waiting(2, 8, limit=60.0)
    assert Payoff().decide(snap(0, (short,), (long,))) == [Shrink(1, 8)]
    # A long job waiting behind a nearly finished one gains little: no shrink.
    ending_soon = running(1, 16, pref=16, lo=4, limit=110.0)
    patient = waiting(2, 8, limit=36000.0)
    assert Payoff().decide(snap(0, (patient,), (ending_soon,))) == []


def test_idle_nodes_a_starting_job_would_be_lent_at_once_are_given_at_its_start_with_no_grow() -> None:
    # A malleable job (preferred 8, up to 16) starts on an idle 16-node machine: lending it
    # the other 8 right after its start would cost a grow (8 s of no progress at alpha = 1);
    # starting it on 16 costs none, and the 8 beyond its preferred size stay a loan.
    job = PendingView(1, NOW - 10, M, 2, 16, 8, 3600.0, AMDAHL)
    assert Payoff().decide(snap(16, (job,), ())) == [Start(1, 16)]
    # Beside a running malleable job further below its preferred size, that job is lent first.
    below = running(2, 2, pref=8)
    assert Payoff().decide(snap(14, (job,), (below,))) == [Start(1, 8), Grow(2, 6)]
    # Behind a blocked head, only nodes the head does not need at its reservation: a job just
    # started has no application registered to give a loan back through (in the daemon it
    # may never register). 5 nodes: a rigid job holds 2 until NOW + 60; the head needs 4
    # then; a long malleable job is backfilled on the one node the head leaves, and no more.
    rigid = RunningView(job_id=9, kind=R, size=2, min_nodes=2, max_nodes=2, preferred=2, start_time=NOW - 10,
                        time_limit=70.0, malleable_ready=False, last_resize=None, ending=False)
    head = waiting(3, 4)
    long = PendingView(4, NOW - 5, M, 1, 3, 1, 3600.0, AMDAHL)
    assert Payoff().decide(snap(3, (head, long), (rigid,), total=5)) == [Start(4, 1)]
    # A job whose limit is short gains less from them than giving them back costs: none lent.
    brief = PendingView(1, NOW - 10, M, 2, 16, 8, 5.0, AMDAHL)
    assert Payoff().decide(snap(16, (brief,), ())) == [Start(1, 8)]


def test_with_no_malleable_job_running_it_starts_what_easy_starts() -> None:
    rigid = RunningView(job_id=9, kind=R, size=4, min_nodes=4, max_nodes=4, preferred=4, start_time=NOW - 50,
                        time_limit=100.0, malleable_ready=False, last_resize=None, ending=False)
    pending = (waiting(1, 8), waiting(2, 4, limit=30.0), waiting(3, 2, limit=20.0), waiting(4, 1, limit=900.0))
    s = snap(10, pending, (rigid,), total=14)
    assert Payoff().decide(s) == EasyBackfill().decide(s) == [Start(1, 8), Start(3, 2)]


def test_room_is_made_only_for_jobs_within_max_job_test_of_the_queue_head() -> None:
    # No shrink can make room for the head (it needs 14 nodes, the running job can give 12);
    # the short job behind it gets room, but only if the pass looks that deep.
    long = running(1, 16, pref=16, lo=4, limit=36000.0)
    queue = (waiting(2, 14, limit=36000.0), waiting(3, 8, limit=60.0))
    assert Payoff().decide(snap(0, queue, (long,))) == [Shrink(1, 8)]
    assert Payoff(max_job_test=1).decide(snap(0, queue, (long,))) == []


def test_room_plans_from_loans_and_widest_jobs_match_a_walk_of_the_donors() -> None:
    # Loans are taken back first (largest first), then the widest jobs down to their minimum.
    lent = running(1, 6, pref=4, lo=2)   # 2 lent
    wide = running(2, 8, pref=8, lo=3)   # 5 above its minimum
    narrow = running(3, 4, pref=4, lo=2)  # 2 above its minimum
    short = waiting(4, 7, limit=30.0)
    out = Payoff().decide(snap(0, (short,), (lent, wide, narrow), total=18))
    assert out == [Shrink(1, 2), Shrink(2, 5)]
    # Without the loan, the widest job gives 5 and the next-widest the other 2.
    unlent = running(1, 4, pref=4, lo=2)
    out = Payoff().decide(snap(0, (short,), (unlent, wide, narrow), total=16))
    assert out == [Shrink(1, 2), Shrink(2, 5)]


def test_a_wait_is_priced_against_the_run_a_limit_allows_not_the_limit_itself() -> None:
    """A limit bounds a run; a job's expected 1/run given only its limit L is (1 + ln(L/tau))/L
    (run uniform on (0, L]). A 1-node job with a 1-day limit waits 2,000 s for a node held by
    a rigid job, while a wide malleable job could give one at a small slowdown: priced at its
    limit the wait saved looked too small (2,000 / 86,400 = 0.023 against the donor's 0.056); at its
    expected run it is 0.23."""
    from math import log

    from elasticd.policies.payoff import expected_inverse_run

    assert expected_inverse_run(None) == 0.0 and expected_inverse_run(5.0) == 1 / 10
    assert abs(expected_inverse_run(86400.0) - (1 + log(8640.0)) / 86400.0) < 1e-15
    rigid = RunningView(job_id=9, kind=R, size=4, min_nodes=4, max_nodes=4, preferred=4, start_time=NOW - 10,
                        time_limit=2010.0, malleable_ready=False, last_resize=None, ending=False, submit_time=NOW - 10)
    wide = running(1, 12, pref=12, lo=4, limit=36000.0)
    short = waiting(2, 1, limit=86400.0)
    assert Payoff().decide(snap(0, (short,), (rigid, wide))) == [Shrink(1, 1)]


def test_the_easy_pass_inside_payoff_hands_over_its_starts_the_queue_past_them_and_the_ends_it_sorted() -> None:
    """Payoff reads the jobs the EASY pass started (to widen the malleable ones), the first
    jobs still waiting (to make room for) and the running jobs' ends the pass sorted for the
    head's reservation (for reservations of its own), instead of working them out again."""
    from elasticd.policies.easy import easy_pass

    def rigid(job_id: int, size: int, ends_in: float) -> RunningView:
        return RunningView(job_id=job_id, kind=R, size=size, min_nodes=size, max_nodes=size, preferred=size,
                           start_time=NOW, time_limit=ends_in, malleable_ready=False, last_resize=None, ending=False)

    first = waiting(1, 1, limit=20.0)  # fits: started before the head, ends at NOW + 20
    head = waiting(2, 6)  # blocked: its reservation is NOW + 50 (3 idle, 1 back at +20, 2 at +50)
    short = waiting(3, 2, limit=30.0)  # backfilled: ends before the reservation
    wide = waiting(4, 8)
    long = waiting(5, 1, limit=3600.0)  # would delay the head: no node is spare at +50
    pair = waiting(6, 2, limit=10.0)  # one node left: does not fit
    brief = waiting(7, 1, limit=10.0)  # backfilled on the last one
    s = snap(4, (first, head, short, wide, long, pair, brief), (rigid(8, 4, 100.0), rigid(9, 2, 50.0)), total=10)
    res = easy_pass(s)
    assert [d.job_id for d in res.starts] == [1, 3, 7] == [v.job_id for v in res.started()]
    assert res.first_waiting(3) == [head, wide, long] and res.waiting == [head, wide, long, pair]
    assert res.running_ends() == [(NOW + 50.0, 2), (NOW + 100.0, 4)]  # without the job started at the head's turn
