"""What-if runs of a real run: the jobs a daemon's event log recorded, simulated under any
policy, beside what really happened (`elasticd sim --from-log STATE_DIR --policy P`).

The jobs are the very ones the daemon took: their job files (specs), submitted at the same
offsets. A job whose file declares a performance model runs what its model says at whatever
size the simulated policy gives it (the synthetic application follows the same model in real
time, so this is sim-vs-real on the same jobs). A job without a model cannot be predicted at
another size: it runs as long as it really ran, at the size it started with (rigid). Jobs
cancelled before they started are left out (nobody knows how long they would have run).

A real job also spends time its model does not know: its processes start, import, join, exit,
and on a loaded machine that is seconds. Each modelled job carries what it really spent so:
if it kept one size, its run minus what its model gives at that size; if it was resized, from
its launch to its registration (the rest cannot be told apart from its resizes). The what-if
runs charge it at every start, so the recorded policy replays to the recorded schedule and
another policy is judged on the same overheads, not on a machine faster than the real one.

A state directory's log holds every daemon start. Each run (a start, and the restarts that
recovered its jobs after a crash) is simulated on its own, on its own nodes under its own
policy; a run whose restart changed its nodes or policy is named and not simulated.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path

from elasticd.core.events import JobEventKind
from elasticd.core.job import Job
from elasticd.metrics import JobRow, WindowSummary, recorded_row, windowed_summary
from elasticd.policies.registry import make_policy
from elasticd.replay import ReplayedStart, replay
from elasticd.sim.rows import job_rows
from elasticd.sim.simulator import simulate
from elasticd.sim.workload import SimJob, from_specs


@dataclass(frozen=True)
class LoggedRun:
    """One daemon's run: a daemon start and the restarts that recovered its jobs after a crash.
    Runs are simulated one by one: the jobs of two runs never shared a machine (a clean stop
    ended them all), and each run had its own nodes and policy."""

    number: int  # in log order, from 1
    line: int  # the log line of its first daemon start
    starts: int  # daemon starts it spans
    nodes: int
    policy: str
    params: dict[str, object]
    jobs: list[SimJob]
    real: WindowSummary
    left_out: int  # cancelled before they started


@dataclass(frozen=True)
class SkippedRun:
    """A run that cannot be simulated, and why (said beside the others, not silently dropped)."""

    number: int
    line: int
    starts: int
    why: str


def load(path: Path) -> list[LoggedRun | SkippedRun]:
    """Every run of the log, in order: a restart that recovered jobs from the journal goes on
    with the run before it; any other start (after a clean stop, or with nothing to recover)
    begins a new one."""
    groups: list[list[ReplayedStart]] = []
    for start in replay(path).starts:
        if start.header.get("recovered") and groups:
            groups[-1].append(start)
        else:
            groups.append([start])
    return [_run(k, group) for k, group in enumerate(groups, 1)]


def _run(number: int, starts: list[ReplayedStart]) -> LoggedRun | SkippedRun:
    line, n = starts[0].line, len(starts)
    settings = [_settings(s) for s in starts]
    if len(set(settings)) > 1:
        said = ", then ".join(f"{_describe(s)} (line {st.line})" for s, st in zip(settings, starts))
        return SkippedRun(number, line, n, f"restarted with another machine or policy: {said}; one what-if "
                          "needs one machine and one policy")
    core = starts[-1].core  # the recovered restarts took back every job of the run
    ran = [j for j in sorted(core.jobs.values(), key=lambda j: j.job_id) if j.start_time is not None]
    if not ran:
        return SkippedRun(number, line, n, "no job of it ever started; nothing to compare")
    if any(not j.state.is_final for j in ran):
        return SkippedRun(number, line, n, "it has jobs still running; simulate it once they end")
    t0 = min(j.submit_time for j in ran)
    sims = from_specs([j.spec for j in ran])
    jobs: list[SimJob] = []
    for real, sim in zip(ran, sims):
        sim = dataclasses.replace(sim, job_id=real.job_id, submit=real.submit_time - t0)
        if real.spec.model is None:
            assert real.start_time is not None and real.end_time is not None
            n0 = real.size_history()[0][1]
            run = real.end_time - real.start_time
            sim = dataclasses.replace(sim, run=run, nodes=n0, malleable=False, moldable=False,
                                      min_nodes=n0, max_nodes=n0, preferred=n0, work=run * sim.speedup.speedup(n0))
        else:
            sim = dataclasses.replace(sim, startup=_overhead(real, sim))
        jobs.append(sim)
    header = starts[0].header
    return LoggedRun(number, line, n, core.nodes.total, str(header["policy"]), dict(header.get("params", {})),
                     jobs, windowed_summary([job_row(j) for j in ran], core.nodes.total, 0.0),
                     len(core.jobs) - len(ran))


def _settings(start: ReplayedStart) -> tuple[str, str, str]:
    """What a what-if takes from a daemon start: its nodes, its policy and the policy's settings."""
    h = start.header
    return (json.dumps(h["nodes"]), str(h["policy"]), json.dumps(h.get("params", {}), sort_keys=True))


def _describe(settings: tuple[str, str, str]) -> str:
    nodes, policy, params = settings
    return f"{policy}{'' if params == '{}' else ' ' + params} on {len(json.loads(nodes))} nodes"


def _overhead(real: Job, sim: SimJob) -> float:
    """Seconds the real job spent beyond its model (see the module's docstring)."""
    assert real.start_time is not None and real.end_time is not None
    sizes = [n for _, n in real.size_history()]
    if len(set(sizes)) == 1:
        modelled = sim.work / sim.speedup.speedup(sizes[0])
        return max(0.0, real.end_time - real.start_time - modelled)
    # A start that was requeued never launched, so never registered: any registration is the last start's.
    registered = next((e.time for e in real.events if e.event is JobEventKind.REGISTERED), None)
    return max(0.0, registered - real.start_time) if registered is not None else 0.0


def job_row(job: Job) -> JobRow:
    """A recorded job as a per-job row (elasticd.metrics.recorded_row)."""
    limit = job.spec.limit_seconds
    return recorded_row(job.job_id, job.kind.value, job.state.value, job.submit_time, job.start_time, job.end_time,
                        job.spec.node_bounds, float(limit) if limit is not None else None, job.spec.model,
                        job.size_history(), sum(1 for e in job.events if e.event is JobEventKind.SHRUNK),
                        sum(1 for e in job.events if e.event is JobEventKind.GROWN))


def what_if(run: LoggedRun, policy: str, params: dict[str, object] | None = None) -> WindowSummary:
    outcomes = simulate(run.jobs, run.nodes, make_policy(policy, params))
    return windowed_summary(job_rows(run.jobs, outcomes), run.nodes, 0.0)
