"""Replaying a workload in virtual time through the daemon's own core and policies.

The simulated application is the ideal one: it registers as soon as it starts, answers
every order at once (releasing its last hosts on a shrink), and its processes are gone the
moment it says so. Reconfiguration cost is charged to the job's progress (WorkProgress),
not to the scheduler. Events at one instant are applied together, then the policy is asked
once; a pass that resized jobs is followed by another at the same instant (nodes freed by a
shrink start the waiting job), and by a wake-up when the policy's resize interval passes.
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass

from elastic_apps.models import WorkProgress
from elastic_protocol.jobspec import JobKind, JobSpec, NodeRange
from elasticd.core import events as ev
from elasticd.core.actions import Action, ArmLimit, Launch, LaunchJoining, Reclaim, SendOrder, Terminate
from elasticd.core.engine import Core
from elasticd.core.events import OrderKind
from elasticd.core.states import JobState
from elasticd.metrics import SizedRecord
from elasticd.policies.base import Policy
from elasticd.sim.workload import SimJob

_SUBMIT, _END, _WAKE = 0, 1, 2
MAX_PASSES_PER_INSTANT = 8


@dataclass(frozen=True)
class JobOutcome:
    job_id: int  # the trace's id
    submit: float
    start: float | None
    end: float | None
    nodes: int  # logged size
    node_seconds: float
    malleable: bool
    shrinks: int
    expands: int
    state: str
    sizes: tuple[tuple[float, int], ...]  # (time, nodes held) change points, last is 0

    def record(self) -> SizedRecord:
        assert self.start is not None and self.end is not None
        return SizedRecord(self.job_id, self.submit, self.start, self.end, self.sizes, self.shrinks, self.expands)


_SPECS: dict[tuple[bool, bool, int, int, int, int], JobSpec] = {}


def _spec(j: SimJob) -> JobSpec:
    """Trace jobs were validated by the reader, so pydantic's validation is skipped; specs
    are frozen, so jobs alike share one."""
    limit = int(math.ceil(j.limit))
    key = (j.malleable, j.moldable, j.min_nodes, j.max_nodes, j.preferred, limit)
    spec = _SPECS.get(key)
    if spec is None:
        spec = _SPECS[key] = _make_spec(j, limit)
    return spec


# Specs are copied from these with the job's own fields set: a copy costs a quarter of
# model_construct, which fills in every default anew (8,000 distinct specs in a trace).
_RANGE = NodeRange.model_construct(min=1, max=1, preferred=1)
_TEMPLATE = JobSpec.model_construct(name="sim", command=["sim"], nodes=1, kind=JobKind.RIGID, time_limit="1:00")


def _make_spec(j: SimJob, limit: int) -> JobSpec:
    tl = f"{limit // 60}:{limit % 60:02d}"
    if j.malleable or j.moldable:
        nodes = _RANGE.model_copy(update={"min": j.min_nodes, "max": j.max_nodes, "preferred": j.preferred})
        kind = JobKind.MALLEABLE if j.malleable else JobKind.MOLDABLE
        return _TEMPLATE.model_copy(update={"nodes": nodes, "kind": kind, "time_limit": tl})
    return _TEMPLATE.model_copy(update={"nodes": j.nodes, "time_limit": tl})


class Simulation:
    def __init__(self, jobs: list[SimJob], nodes: int, policy: Policy) -> None:
        self.jobs = jobs
        self.core = Core((f"n{i}" for i in range(nodes)), policy, order_deadline=math.inf)
        self.policy = policy
        self._events: list[tuple[float, int, int, int, int]] = []
        self._seq = 0
        self._sim_of: dict[int, SimJob] = {}  # core job id -> workload job
        self._progress: dict[int, WorkProgress] = {}
        self._version: dict[int, int] = {}
        self.passes = 0
        self.resizes = 0

    def _push(self, t: float, kind: int, a: int, b: int = 0) -> None:
        self._seq += 1
        heapq.heappush(self._events, (t, self._seq, kind, a, b))

    def run(self) -> list[JobOutcome]:
        for i, j in enumerate(self.jobs):
            self._push(j.submit, _SUBMIT, i)
        interval = getattr(self.policy, "min_resize_interval", None)
        events = self._events
        core = self.core
        while events:
            now = events[0][0]
            while events and events[0][0] == now:
                _, _, kind, a, b = heapq.heappop(events)
                if kind == _SUBMIT:
                    j = self.jobs[a]
                    jid = core.next_job_id
                    core.handle(ev.Submitted(now, jid, _spec(j)))
                    self._sim_of[jid] = j
                elif kind == _END:
                    if self._version.get(a) == b:
                        core.handle(ev.Exited(now, a, 0, 0))
                        self._progress.pop(a, None)
            before = self.resizes
            for _ in range(MAX_PASSES_PER_INSTANT):
                self.passes += 1
                if not self._apply(core.handle(ev.PassDue(now)), now):
                    break
            if self.resizes != before and interval:
                self._push(now + interval, _WAKE, 0)
        return self._outcomes()

    def _apply(self, actions: list[Action], now: float) -> bool:
        """Carry actions out instantly; True if a resize happened (worth another pass)."""
        core = self.core
        resized = False
        for a in actions:
            if isinstance(a, Launch):
                j = self._sim_of[a.job_id]
                p = WorkProgress(j.work, j.speedup, j.cost, len(a.hosts), now)
                if not j.malleable and len(a.hosts) == j.nodes:
                    p.remaining = j.run * j.speedup.speedup(j.nodes)  # exact logged run time
                p.frozen_until = now + j.startup + j.startup_per_node * len(a.hosts)
                self._progress[a.job_id] = p
                core.handle(ev.Launched(now, a.job_id))
                if j.malleable:
                    core.handle(ev.Registered(now, a.job_id))
                self._reschedule_end(a.job_id, now)
            elif isinstance(a, SendOrder):
                job = core.jobs[a.job_id]
                if a.kind is OrderKind.SHRINK:
                    keep = [h for h in job.hosts if h not in job.leaving] if job.leaving else job.hosts
                    for r in core.handle(ev.ShrinkAnswered(now, a.job_id, a.order_id, tuple(keep[-a.count :]))):
                        assert isinstance(r, Reclaim)
                        core.handle(ev.HostsGone(now, r.job_id, r.hosts))
                    self._progress[a.job_id].resize(len(job.hosts), now)
                else:
                    core.handle(ev.GrowAnswered(now, a.job_id, a.order_id, tuple(job.hosts)))
                    j = self._sim_of[a.job_id]
                    # The old size computes on while the new processes start and join.
                    delay = j.grow_latency + j.grow_latency_per_node * a.count
                    self._progress[a.job_id].resize(len(job.hosts), now + delay)
                self._reschedule_end(a.job_id, now)
                # Only nodes freed by a shrink can start something in another pass now.
                resized = resized or a.kind is OrderKind.SHRINK
                self.resizes += 1
            elif isinstance(a, Reclaim):
                core.handle(ev.HostsGone(now, a.job_id, a.hosts))
                resized = True
            elif isinstance(a, Terminate):
                core.handle(ev.Exited(now, a.job_id, 0, 15))
            elif isinstance(a, LaunchJoining):
                pass  # the simulated application's new processes are up at once
            elif isinstance(a, ArmLimit):
                pass  # trace jobs' limits are not enforced here yet
        return resized

    def _reschedule_end(self, job_id: int, now: float) -> None:
        v = self._version.get(job_id, 0) + 1
        self._version[job_id] = v
        self._push(self._progress[job_id].end_time(now), _END, job_id, v)

    def _outcomes(self) -> list[JobOutcome]:
        out = []
        for jid, j in self._sim_of.items():
            job = self.core.jobs[jid]
            shrinks = expands = 0
            sizes: list[tuple[float, int]] = []
            for e in job.events:
                if e.event == "shrunk" or e.event == "released":
                    shrinks += e.event == "shrunk"
                    sizes.append((e.time, e.nodes))
                elif e.event in ("started", "grow_ordered", "grown"):
                    # Nodes are held from the grow order on (they are allocated then).
                    expands += e.event == "grown"
                    sizes.append((e.time, e.nodes))
                elif e.event == "ended":
                    sizes.append((e.time, 0))
            out.append(JobOutcome(j.job_id, job.submit_time, job.start_time, job.end_time, j.nodes,
                                  job.node_seconds, j.malleable, shrinks, expands, job.state.value,
                                  tuple(sizes)))
        return out


def simulate(jobs: list[SimJob], nodes: int, policy: Policy) -> list[JobOutcome]:
    sim = Simulation(jobs, nodes, policy)
    out = sim.run()
    unfinished = [o for o in out if o.state != JobState.COMPLETED.value]
    if unfinished:
        raise RuntimeError(f"{len(unfinished)} jobs did not complete, e.g. {unfinished[0]}")
    return out
