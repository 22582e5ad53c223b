"""Schedule metrics as the seed papers define them, against examples computed by hand: slowdown
over each job's static run (a job a shrink stretched is slowed down), stretch, the window's
figures, the static run of a real job file, paired intervals over seeds, and what a policy
sees a resize cost before it orders it."""

from __future__ import annotations

import math

import pytest

from elastic_protocol.jobspec import JobKind, PerfModel
from elasticd.intervals import Paired, interval, paired, t975
from elasticd.metrics import JobRow, job_metrics, percentile, static_run_of, summarize_window, windowed_summary


def job(jid: int, submit: float, start: float, end: float, static: float | None, nodes: int = 1,
        changes: tuple[tuple[float, int], ...] = (), reconf: float = 0.0, state: str = "COMPLETED") -> JobRow:
    final = changes[-1][1] if changes else nodes
    return JobRow(jid, "malleable" if changes else "rigid", state, submit, start, end, static, None, 1, nodes, nodes,
                  nodes, nodes, final, len(changes), 0, reconf, reconf * final, changes)


def test_a_stretched_job_is_slowed_down_by_its_stretch_not_scored_one() -> None:
    # Logged: 100 s on 8 nodes. Never waited, but shrunk to 2 nodes at 10 s it ran 400 s.
    m = job_metrics(job(1, 0.0, 0.0, 400.0, 100.0, 8, ((10.0, 2),)))
    assert (m.wait, m.run, m.turnaround) == (0.0, 400.0, 400.0)
    assert m.slowdown == 4.0 and m.bounded_slowdown == 4.0 and m.stretch == 4.0
    s = windowed_summary([job(1, 0.0, 0.0, 400.0, 100.0, 8, ((10.0, 2),))], total_nodes=8, warmup=0.0)
    assert s.mean_bounded_slowdown == 4.0
    # Over the run as it ran, the figure this project printed before: 1, as if nothing happened.
    assert s.mean_bounded_slowdown_own_run == 1.0


def test_bounded_slowdown_bounds_a_short_static_run_by_tau() -> None:
    # A 5 s job that waited 100 s: slowdown 105 / 5 = 21, bounded 105 / max(5, 10) = 10.5.
    m = job_metrics(job(1, 0.0, 100.0, 105.0, 5.0))
    assert m.slowdown == 21.0 and m.bounded_slowdown == 10.5 and m.stretch == 1.0
    # A job faster than its static run (grown) and that never waited: bounded below by 1.
    assert job_metrics(job(2, 0.0, 0.0, 50.0, 100.0)).bounded_slowdown == 1.0


def test_the_windows_stretch_reconfiguration_and_mebf_slowdown_by_hand() -> None:
    rows = [
        job(1, 0.0, 0.0, 100.0, 100.0),  # in the warm-up: not measured
        job(2, 100.0, 100.0, 200.0, 100.0),  # stretch 1
        job(3, 110.0, 110.0, 410.0, 100.0, 4, ((150.0, 1),), reconf=20.0),  # stretch 3, reconfigured 20 s on 1 node
        job(4, 120.0, 200.0, 250.0, 50.0, state="TIMEOUT"),  # waited 80, stretch 1
        job(5, 130.0, 130.0, 330.0, 100.0),  # stretch 2: not "over 2x"
    ]
    s = windowed_summary(rows, total_nodes=4, warmup=50.0)
    assert s.jobs == 4
    assert s.mean_wait == 20.0
    assert s.mean_turnaround == (100 + 300 + 130 + 200) / 4
    assert s.mean_slowdown == pytest.approx((1 + 3 + 130 / 50 + 2) / 4)
    assert s.mebf_slowdown == pytest.approx(((100 + 300 + 130 + 200) / 4) / ((100 + 100 + 50 + 100) / 4))
    assert (s.stretch_mean, s.stretch_max) == (7 / 4, 3.0)
    # The 95th percentile between ranks: sorted 1, 1, 2, 3; position 0.95 * 3 = 2.85.
    assert s.stretch_p95 == pytest.approx(2 + 0.85 * (3 - 2))
    assert s.stretch_p95 == percentile([1.0, 1.0, 2.0, 3.0], 95)
    assert s.stretched == 0.25 and s.timeouts == 0.25
    used = 100 * 1 + (40 * 4 + 260 * 1) + 50 * 1 + 200 * 1
    assert s.reconfig_node_seconds == 20.0 and s.reconfig_share == pytest.approx(20.0 / used)
    # Utilization over [50, 130]: job 1 to 100 (50 s), 2 from 100 (30 s), 3 from 110 on 4 nodes (20 s), 5 (0 s).
    assert s.utilization == pytest.approx((50 + 30 + 20 * 4) / (4 * 80))


def test_a_window_over_jobs_of_unknown_static_run_counts_them_apart() -> None:
    s = summarize_window([job(1, 0, 0, 10, 10.0), job(2, 0, 5, 30, None, 2, ((10.0, 1),))], 2, 0.0, 0.0)
    assert s.jobs == 2 and s.static_unknown == 1 and s.mean_bounded_slowdown == 1.0 and s.mean_wait == 2.5


def test_a_job_files_static_run_is_its_models_work_at_its_requested_size_else_its_unresized_run() -> None:
    model = PerfModel(speedup="amdahl:0.1", work=1000.0)
    s4 = 1 / (0.1 + 0.9 / 4)
    assert static_run_of(model, 4, run=500.0, resized=True) == pytest.approx(1000.0 / s4)
    assert static_run_of(None, 4, run=500.0, resized=False) == 500.0
    assert static_run_of(PerfModel(speedup="linear"), 4, run=500.0, resized=False) == 500.0
    assert static_run_of(None, 4, run=500.0, resized=True) is None
    assert JobKind.MALLEABLE.value == "malleable"


def test_student_t_quantiles_are_the_table_and_the_expansion_agrees_with_it() -> None:
    assert t975(9) == 2.262 and t975(4) == 2.776 and t975(1) == 12.706
    # Beyond the table, A&S 26.7.5: t(0.975, 40) = 2.021, t(0.975, 60) = 2.000, t(0.975, 120) = 1.980.
    assert t975(40) == pytest.approx(2.021, abs=1e-3)
    assert t975(60) == pytest.approx(2.000, abs=1e-3)
    assert t975(120) == pytest.approx(1.980, abs=1e-3)
    # And it agrees with the table where both exist (from 20 degrees of freedom on).
    from elasticd import intervals

    for df in range(20, 31):
        z = intervals._Z975
        g = [(z**3 + z) / 4, (5 * z**5 + 16 * z**3 + 3 * z) / 96, (3 * z**7 + 19 * z**5 + 17 * z**3 - 15 * z) / 384]
        assert z + g[0] / df + g[1] / df**2 + g[2] / df**3 == pytest.approx(t975(df), abs=1e-3)


def test_a_paired_interval_by_hand_and_whether_it_tells_two_policies_apart() -> None:
    p = interval([0.1, 0.2, 0.3])  # mean 0.2, sd 0.1, t(0.975, 2) = 4.303
    assert p.mean == pytest.approx(0.2) and p.half_width == pytest.approx(4.303 * 0.1 / math.sqrt(3))
    assert not p.different and p.text() == "+20.0 % [-4.8, +44.8] n.d."
    q = paired({1: 90.0, 2: 80.0, 3: 85.0}, {1: 100.0, 2: 100.0, 3: 100.0, 4: 100.0})
    assert q is not None and q.n == 3 and q.mean == pytest.approx(-0.15) and q.different
    assert q.text() == "-15.0 % [-27.4, -2.6]"
    assert paired({1: 1.0}, {2: 1.0}) is None
    assert Paired(0.1, math.nan, 1).text() == "+10.0 % (1 seed)" and not Paired(0.1, math.nan, 1).different


def test_a_policy_sees_what_a_resize_will_cost_a_job_and_how_far_it_stretches_it() -> None:
    from elasticd.policies.base import RunningView
    from elasticd.policies.predict import RunningPrediction, resize_cost

    # Linear, 800 s of work on its preferred 8 nodes = 100 s; reconfiguration 0.5 s per node changed.
    model = PerfModel(speedup="linear", work=800.0, alpha=0.5)
    view = RunningView(1, JobKind.MALLEABLE, 8, 1, 16, 8, 0.0, 100.0, True, None, False, model=model,
                       history=((0.0, 8),))
    assert resize_cost(view, 2) == 3.0 and resize_cost(view, 8) == 0.0
    p = RunningPrediction(view, 50.0)
    assert p.reconfig_seconds(2) == 3.0
    # At 50 s, 400 s of work is left: on 2 nodes after 3 s of reconfiguration, 50 + 3 + 200 = 253 s: 2.53x.
    assert p.stretch_if_resized(2) == pytest.approx(2.53)
    assert resize_cost(RunningView(2, JobKind.MALLEABLE, 8, 1, 16, 8, 0.0, 100.0, True, None, False), 2) == 0.0
