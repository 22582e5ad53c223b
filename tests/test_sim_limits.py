"""One job model in both clocks: time limits end jobs in the simulator as in the daemon, a
converted trace job's limit covers its run at every size it can be given, and the policies
that predict see each job's own model."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest

from conftest import start_daemon, stop_daemon, write_job
from elasticd.jobfile import load_job_file
from elasticd.policies import make_policy
from elasticd.policies.base import Decision, Snapshot
from elasticd.sim.simulator import _spec, simulate
from elasticd.sim.swf import read_swf
from elasticd.sim.workload import MalleabilityRule, build_workload, from_specs

pytestmark = pytest.mark.timeout(120)
TRACES = Path(__file__).resolve().parent.parent / "examples" / "traces"

JOB = '''
name = "{name}"
command = ["{python}", "-m", "elastic_apps.synthetic", "--work", "{work}", "--speedup", "linear"]
nodes = 1
time_limit = "{limit}"
working_dir = "."
output = "{name}-%j.out"
model = {{ speedup = "linear", work = {work} }}
'''


def test_a_job_that_overruns_its_limit_ends_timeout_at_the_limit_in_the_simulator_as_in_the_daemon(
        tmp_path: Path) -> None:
    over = write_job(tmp_path, "over", JOB.format(name="over", python=sys.executable, work=30, limit="0:03"))
    fits = write_job(tmp_path, "fits", JOB.format(name="fits", python=sys.executable, work=1, limit="0:05"))
    specs = [load_job_file(over), load_job_file(fits)]
    sim = {o.job_id: o for o in simulate(from_specs(specs), 2, make_policy("easy"))}
    assert sim[1].state == "TIMEOUT" and sim[1].end - sim[1].start == 3.0
    assert sim[2].state == "COMPLETED" and sim[2].end - sim[2].start == pytest.approx(1.0)
    d = start_daemon(tmp_path / "state", nodes=2, kill_wait=1.0)
    try:
        a, b = d.submit(over), d.submit(fits)
        d.wait([a, b], timeout=30)
        real_a, real_b = d.job(a), d.job(b)
    finally:
        stop_daemon(d.record)
    assert real_a["state"] == "TIMEOUT" and 3.0 <= real_a["time_used"] <= 3.0 + 1.0 + 1.0
    assert real_b["state"] == "COMPLETED"


@pytest.mark.parametrize("rule", [MalleabilityRule("efficiency"), MalleabilityRule("mebf"),
                                  MalleabilityRule("efficiency", model="rho")], ids=["efficiency", "mebf", "rho"])
@pytest.mark.parametrize("trace_name", ["hpc2n-2002-subset", "theta-2023", "sdsc-sp2-1998"])
def test_every_converted_jobs_limit_covers_its_run_at_every_size_it_can_be_given(
        trace_name: str, rule: MalleabilityRule) -> None:
    trace = read_swf(TRACES / f"{trace_name}.swf.gz")
    trace.jobs = trace.jobs[:800]
    for j in build_workload(trace, 1.0, 3, rule):
        spec = _spec(j)
        limit, (lo, hi, pref) = spec.limit_seconds, spec.node_bounds
        assert limit is not None and spec.model is not None and spec.model.work is None
        s = spec.model.speedup_model
        assert s.text == j.speedup.text
        for n in sorted({lo, hi, pref, (lo + hi) // 2}):
            limit_n = limit * s.speedup(pref) / s.speedup(n)  # the core's rule, elasticd.core.limits
            assert limit_n >= j.work / s.speedup(n) * (1 - 1e-12), (j.job_id, n, limit_n, j.work / s.speedup(n))


@pytest.mark.parametrize("policy", ["malleable", "avg", "sd", "mebf-basic-intensive"])
def test_resizes_never_push_a_converted_job_past_its_limit(policy: str) -> None:
    """The limit moves with the job's model and every resize's cost (the core's rule), and the
    simulated job progresses by the same model: no malleable job times out because of how a
    policy resized it."""
    trace = read_swf(TRACES / "hpc2n-2002-subset.swf.gz")
    trace.jobs = trace.jobs[:600]
    outcomes = simulate(build_workload(trace, 1.0, 2), trace.nodes, make_policy(policy))
    assert sum(o.shrinks + o.expands for o in outcomes) > 20
    assert [o.job_id for o in outcomes if o.state == "TIMEOUT"] == []


class Recording:
    """A predicting policy, watched: which model each waiting job carried into a pass."""

    def __init__(self, inner: object) -> None:
        self.inner = inner
        self.name = inner.name  # type: ignore[attr-defined]
        self.seen: dict[int, str | None] = {}

    def decide(self, snap: Snapshot) -> list[Decision]:
        for p in snap.pending:
            self.seen[p.job_id] = None if p.model is None else p.model.speedup
        return self.inner.decide(snap)  # type: ignore[attr-defined, no-any-return]


@pytest.mark.parametrize("policy", ["sd", "mebf-basic-handoff"])
def test_predicting_policies_see_each_jobs_own_model(policy: str) -> None:
    trace = read_swf(TRACES / "theta-2023.swf.gz")
    trace.jobs = trace.jobs[:300]
    jobs = build_workload(trace, 1.0, 1)
    watched = Recording(make_policy(policy))
    simulate(jobs, trace.nodes, watched)  # type: ignore[arg-type]
    by_core_id = {i + 1: j for i, j in enumerate(jobs)}
    assert len(watched.seen) > 100
    for jid, text in watched.seen.items():
        assert text == by_core_id[jid].speedup.text
    assert len({t for t in watched.seen.values()}) > 50  # each its own, not one default
    assert not math.isnan(sum(by_core_id[j].work for j in watched.seen))


MALLEABLE = '''
name = "grows"
command = ["{python}", "-m", "elastic_apps.synthetic", "--work", "6", "--speedup", "linear"]
nodes = {{ min = 1, max = 4 }}
kind = "malleable"
time_limit = "1:00"
working_dir = "."
output = "grows-%j.out"
model = {{ speedup = "linear", work = 6 }}
'''


def test_idle_nodes_go_to_a_malleable_job_when_it_registers_in_the_simulator_as_in_the_daemon(
        tmp_path: Path) -> None:
    # minAgree starts a malleable job on its minimum and gives it the idle nodes once it can
    # take an order: in the daemon, when it registers (a pass follows every registration);
    # in the simulator, where it registers as it starts, at that same instant -- not at the
    # next event, which on a quiet trace can be hours later.
    path = write_job(tmp_path, "grows", MALLEABLE.format(python=sys.executable))
    [out] = simulate(from_specs([load_job_file(path)]), 4, make_policy("malleable"))
    assert out.sizes[:3] == ((0.0, 1), (0.0, 4), (0.0, 4))  # started, grow ordered, grown
    assert out.end == pytest.approx(6 / 4)
    d = start_daemon(tmp_path / "state", nodes=4, policy="malleable")
    try:
        job = d.submit(path)
        info = d.wait_event(job, "grown", timeout=30)
    finally:
        stop_daemon(d.record)
    grown = next(e for e in info["events"] if e["event"] == "grown")
    assert grown["nodes"] == 4


GUARDED = '''
name = "guarded"
command = ["{python}", "-m", "elastic_apps.synthetic", "--work", "30", "--speedup", "linear"]
nodes = {{ min = 1, max = 2 }}
kind = "malleable"
time_limit = "1:00"
working_dir = "."
output = "guarded-%j.out"
model = {{ speedup = "linear", work = 30 }}
'''

WAITER = '''
name = "waiter"
command = ["{python}", "-c", "import time; time.sleep(1)"]
nodes = 1
time_limit = "1:00"
working_dir = "."
output = "waiter-%j.out"
submit_offset = {offset}
'''


def test_a_job_waiting_for_a_resize_guard_starts_when_the_guard_ends_in_the_daemon_as_in_the_simulator(
        tmp_path: Path) -> None:
    # minAgree grows the malleable job to both nodes when it registers; a job submitted just
    # after waits for it to be shrunk, which the policy's resize guard (2 s) forbids until
    # 2 s after the grow. Nothing happens at that instant: the simulator wakes its policy
    # then, and so must the daemon, not at its next periodic pass (here 10 minutes away).
    guarded = write_job(tmp_path, "guarded", GUARDED.format(python=sys.executable))
    waiter = write_job(tmp_path, "waiter", WAITER.format(python=sys.executable, offset=0.5))
    sim = {o.job_id: o for o in simulate(from_specs([load_job_file(guarded), load_job_file(waiter)]), 2,
                                         make_policy("malleable", min_resize_interval=2.0))}
    assert sim[1].sizes[:3] == ((0.0, 1), (0.0, 2), (0.0, 2))  # started, grow ordered, grown
    assert sim[2].start == 2.0  # the guard's end, not the malleable job's
    d = start_daemon(tmp_path / "state", nodes=2, policy="malleable",
                     extra=["--min-resize-interval", "2", "--schedule-interval", "600"])
    try:
        a = d.submit(guarded)
        grown = next(e for e in d.wait_event(a, "grown", timeout=30)["events"] if e["event"] == "grown")
        b = d.submit(waiter)
        d.wait([b], timeout=30)
        started = d.job(b)["start_time"]
    finally:
        stop_daemon(d.record)
    assert 2.0 <= started - grown["time"] < 2.0 + 1.5


class WorkSeen:
    """A policy, watched: the `work` each job's model carried into a pass, waiting or running."""

    def __init__(self, inner: object) -> None:
        self.inner = inner
        self.name = inner.name  # type: ignore[attr-defined]
        self.seen: dict[int, float | None] = {}

    def decide(self, snap: Snapshot) -> list[Decision]:
        for v in (*snap.pending, *snap.running):
            self.seen[v.job_id] = None if v.model is None else v.model.work
        return self.inner.decide(snap)  # type: ignore[attr-defined, no-any-return]


def test_a_replayed_job_files_declared_work_reaches_the_simulated_policy_as_it_reaches_the_daemons(
        tmp_path: Path) -> None:
    # SD-Policy, MEBF and payoff predict a job's run from its model's `work` when its file
    # gives it, else from its limit. The daemon's policies see the job file as it is; the
    # simulator replaying it (elasticd sim --from-log, elasticd experiment) must show them the
    # same, or they predict other run times and choose other mates, sizes and starts.
    from elasticd.core import events as ev
    from elasticd.core.engine import Core

    told = write_job(tmp_path, "told", JOB.format(name="told", python=sys.executable, work=8, limit="1:00"))
    untold = write_job(tmp_path, "untold", JOB.format(name="untold", python=sys.executable, work=8, limit="1:00")
                       .replace(", work = 8 }", " }"))
    specs = [load_job_file(told), load_job_file(untold)]
    assert [s.model.work if s.model else "-" for s in specs] == [8.0, None]
    daemons = WorkSeen(make_policy("sd"))
    core = Core(["n1"], daemons)  # type: ignore[arg-type]
    for i, spec in enumerate(specs, 1):
        core.handle(ev.Submitted(0.0, i, spec))
    core.handle(ev.PassDue(0.0))
    simulated = WorkSeen(make_policy("sd"))
    simulate(from_specs(specs), 1, simulated)  # type: ignore[arg-type]
    assert daemons.seen == simulated.seen == {1: 8.0, 2: None}
