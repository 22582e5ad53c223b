"""Replaying a workload in virtual time through the daemon's own core and policies.

The simulated application is the ideal one: it registers as soon as it starts, answers
every order at once (releasing its last hosts on a shrink), and its processes are gone the
moment it says so. Reconfiguration cost is charged to the job's progress (WorkProgress),
not to the scheduler. Events at one instant are applied together, then the policy is asked
once; a pass that resized jobs is followed by another at the same instant (nodes freed by a
shrink start the waiting job), and by a wake-up when the policy's resize interval passes
(Core.resize_guard_end, at which the daemon makes a pass too); so
is the instant a malleable job registers: at its start for a trace job, after its measured
start-up for a replayed one (the daemon asks its policy again whenever a job registers: idle
nodes may go to it).
An instant where nothing happened (only the stale end of a job that was resized since, or
a limit armed before a resize moved it) is no instant at all: the daemon never has one.

Time limits are the core's (elasticd.core.limits): the core arms each job's limit and the
simulator feeds LimitReached when it falls, so a job ends TIMEOUT here exactly as in the
daemon. A job whose work ends at its limit's instant (within LIMIT_TIE seconds: both are
floating-point sums) completes: its end is handled first, as a process that exits before
its batch system's kill does.
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass
from typing import Any, TypeVar

from elastic_protocol.jobspec import JobKind, JobSpec, NodeRange, PerfModel
from elastic_protocol.models import WorkProgress
from elastic_protocol.timefmt import MAX_TIME_LIMIT
from elasticd.core import events as ev
from elasticd.core.actions import Action, ArmLimit, Launch, LaunchJoining, Reclaim, SendOrder, Terminate
from elasticd.core.engine import Core
from elasticd.core.events import JobEventKind, OrderKind
from elasticd.core.fastinit import fast_init
from elasticd.core.states import JobState
from elasticd.errors import ElasticError
from elasticd.policies.base import Policy
from elasticd.sim.workload import SimJob, young_collections_only

_M = TypeVar("_M", JobSpec, NodeRange, PerfModel)

_END, _WAKE, _LIMIT, _REGISTER, _FIXED_END = 1, 2, 3, 4, 5
_SHRINK = OrderKind.SHRINK
# The history entries an outcome's sizes are read from (nodes are held from a grow order on:
# they are allocated then), and which of them are counted as shrinks or expansions.
_SIZE, _COUNT_SHRINK, _COUNT_EXPAND, _ENDED = 0, 1, 2, 3
_SIZE_POINT: dict[str, int] = {
    JobEventKind.SHRUNK: _COUNT_SHRINK, JobEventKind.RELEASED: _SIZE, JobEventKind.STARTED: _SIZE,
    JobEventKind.GROW_ORDERED: _SIZE, JobEventKind.GROWN: _COUNT_EXPAND, JobEventKind.ENDED: _ENDED,
}
MAX_PASSES_PER_INSTANT = 8
LIMIT_TIE = 1e-6


@dataclass(frozen=True, slots=True)
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


fast_init(JobOutcome)  # one per job of a run


def _spec(j: SimJob) -> JobSpec:
    """The job file a trace job would have: its node range, its time limit at its preferred
    size and its performance model (speedup and reconfiguration cost, not its work: a
    scheduler knows a job's limit, not how long it will really run). A replayed job file
    that declares its work keeps it (SimJob.declared_work): the daemon's policies saw it,
    and a model-driven policy (SD-Policy, MEBF) predicting from the limit instead decides
    otherwise. Trace jobs were validated by the reader, so pydantic's validation is skipped.

    Made anew for each job: a trace's jobs all differ (each has its own speedup model and
    its own limit), and a cache of them that never hit grew by a trace's worth of specs
    with every simulation a process ran."""
    seconds = math.ceil(j.limit_at_preferred)
    # Beyond any job file's limit (a year; logs write 'none' as 2^31 - 1 s, and a limit scaled
    # to a preferred size below the logged one grows): none, as UNLIMITED.
    tl = None if seconds > MAX_TIME_LIMIT else f"{seconds // 60}:{seconds % 60:02d}"
    model = None
    if j.has_model:
        cost = j.cost
        f = _MODEL_FIELDS.copy()
        f["speedup"], f["alpha"], f["beta"], f["b"] = j.speedup.text, cost.alpha, cost.beta, cost.b
        work = j.declared_work
        if work is None:
            model = _filled(PerfModel, f, _MODEL_SET)
        else:
            f["work"] = work
            model = _filled(PerfModel, f, _MODEL_WORK_SET)
    f = _TEMPLATE_FIELDS.copy()
    f["time_limit"], f["model"] = tl, model
    if j.malleable or j.moldable:
        r = _RANGE_FIELDS.copy()
        r["min"], r["max"], r["preferred"] = j.min_nodes, j.max_nodes, j.preferred
        f["nodes"] = _filled(NodeRange, r, _RANGE_SET)
        f["kind"] = JobKind.MALLEABLE if j.malleable else JobKind.MOLDABLE
        return _filled(JobSpec, f, _RANGED_SET)
    f["nodes"] = j.nodes
    return _filled(JobSpec, f, _RIGID_SET)


# Specs are made from these with the job's own fields set, as model_copy(update=...) makes
# them (the same fields, the same set of fields set; tests/test_sim.py compares the two)
# in a third of its time: model_copy goes through copy.copy for each of a model's parts,
# and model_construct fills in every default anew.
_RANGE = NodeRange.model_construct(min=1, max=1, preferred=1)
_TEMPLATE = JobSpec.model_construct(name="sim", command=["sim"], nodes=1, kind=JobKind.RIGID, time_limit="1:00")
_MODEL = PerfModel.model_construct(speedup="linear", work=None, alpha=0.0, beta=0.0, b=0.0)
_RANGE_FIELDS, _TEMPLATE_FIELDS, _MODEL_FIELDS = dict(_RANGE.__dict__), dict(_TEMPLATE.__dict__), dict(_MODEL.__dict__)
_RANGE_SET = frozenset(_RANGE.model_fields_set | {"min", "max", "preferred"})
_RIGID_SET = frozenset(_TEMPLATE.model_fields_set | {"nodes", "time_limit", "model"})
_RANGED_SET = frozenset(_RIGID_SET | {"kind"})
_MODEL_SET = frozenset(_MODEL.model_fields_set | {"speedup", "alpha", "beta", "b"})
_MODEL_WORK_SET = frozenset(_MODEL_SET | {"work"})


def _slot_setter(name: str) -> Any:
    """The setter of a part every pydantic model has (its own setattr refuses: frozen),
    called directly rather than looked up by object.__setattr__ for each model made."""
    owners = {next(vars(k)[name] for k in cls.__mro__ if name in vars(k)) for cls in (JobSpec, NodeRange, PerfModel)}
    if len(owners) != 1:
        raise TypeError(f"{name}: not one slot shared by the job file's models")
    return owners.pop().__set__


_set_dict, _set_fields_set, _set_extra, _set_private = map(
    _slot_setter, ("__dict__", "__pydantic_fields_set__", "__pydantic_extra__", "__pydantic_private__"))
_new = object.__new__


def _filled(cls: type[_M], fields: dict[str, Any], fields_set: frozenset[str]) -> _M:
    """A model of `cls` with these fields (a template's copy with the job's own set over
    it), those in `fields_set` counted as set (see above)."""
    m = _new(cls)
    _set_dict(m, fields)
    _set_fields_set(m, set(fields_set))
    _set_extra(m, None)
    _set_private(m, None)
    return m


class Simulation:
    def __init__(self, jobs: list[SimJob], nodes: int, policy: Policy, record_hosts: bool = True) -> None:
        """`record_hosts`: keep the hosts of every history entry (what a Gantt chart draws);
        without, only their number (every outcome and metric is the same)."""
        self.jobs = jobs
        self.core = Core((f"n{i}" for i in range(nodes)), policy, order_deadline=math.inf)
        self.core.record_hosts = record_hosts
        self.policy = policy
        self._events: list[tuple[float, int, int, int]] = []  # (time, sequence, kind, index or job)
        self._seq = 0
        self._sim_of: dict[int, SimJob] = {}  # core job id -> workload job
        self._progress: dict[int, WorkProgress] = {}
        # A job's end and its time limit are timers that move with every resize (a job of
        # Avg is resized a dozen times). Each is due at one (time, sequence) key, its latest
        # setting; the heap holds one entry per timer carrying it, at or before that key,
        # and an entry that pops before the key it carries is pushed again at that key.
        # A timer moved later is thus not pushed again each time, and a timer fires at the
        # very place in the event order its latest setting would have put it.
        self._end_due: dict[int, tuple[float, int]] = {}
        self._end_carried: dict[int, tuple[float, int]] = {}
        self._limit_due: dict[int, tuple[float, int]] = {}
        self._limit_carried: dict[int, tuple[float, int]] = {}
        self.passes = 0
        self.resizes = 0
        self._wake = -math.inf  # the latest wake-up pushed (Core.resize_guard_end)

    def _push(self, t: float, kind: int, a: int) -> None:
        self._seq += 1
        heapq.heappush(self._events, (t, self._seq, kind, a))

    def _set_timer(self, t: float, kind: int, job_id: int, due: dict[int, tuple[float, int]],
                   carried: dict[int, tuple[float, int]]) -> None:
        """Set the job's end or limit timer to fire at t (see __init__)."""
        self._seq = seq = self._seq + 1
        key = (t, seq)
        due[job_id] = key
        c = carried.get(job_id)
        if c is None or key < c:
            carried[job_id] = key
            heapq.heappush(self._events, (t, seq, kind, job_id))

    def _timer_fires(self, t: float, seq: int, kind: int, job_id: int, due: dict[int, tuple[float, int]],
                     carried: dict[int, tuple[float, int]]) -> bool:
        """A timer entry popped: whether the timer fires now (else it was moved)."""
        key = (t, seq)
        if carried.get(job_id) != key:
            return False  # superseded by an earlier entry that carries the timer
        d = due.get(job_id)
        if d == key:
            del carried[job_id], due[job_id]
            return True
        if d is None:
            del carried[job_id]
            return False  # cancelled
        carried[job_id] = d  # moved later: carried on to its key
        heapq.heappush(self._events, (d[0], d[1], kind, job_id))
        return False

    def run(self) -> list[JobOutcome]:
        """Every job's outcome.

        CPython's collector of reference cycles rescans its oldest generation each time the
        objects that outlive young collections grow by a quarter; a simulation keeps every
        job's record to the end, so those full scans, over ever more records, cost a third
        of a long run (3.3 of 8.8 s on theta-2023 repeated 8x). During the run only the
        youngest generation is collected: the cycles a pass makes are short-lived and go with
        it (peak memory is the same; a whole run of Avg leaves a few hundred objects in
        cycles), and the older generations, which only scan again what outlived it (most of
        it the jobs' records, 2 % of a run of Avg), are left to the end."""
        with young_collections_only():
            return self._run()

    def _run(self) -> list[JobOutcome]:
        # Submissions are read in (time, index) order from a sorted list rather than the
        # heap: they are known in advance, and at an instant they come before everything
        # else (in a heap they would carry the lowest sequence numbers). The heap then holds
        # only the timers of running jobs, a few hundred entries rather than the whole trace.
        jobs = self.jobs
        # In submission order (stable: ties by index).
        arrivals = [jobs[i] for i in sorted(range(len(jobs)), key=lambda i: jobs[i].submit)]
        n_arrivals = len(arrivals)
        next_submit = 0
        events = self._events
        core = self.core
        sim_of, progress = self._sim_of, self._progress
        end_due, end_carried = self._end_due, self._end_carried
        limit_due, limit_carried = self._limit_due, self._limit_carried
        fires = self._timer_fires
        handle = core.handle
        apply = self._apply
        heappop = heapq.heappop
        pass_due, submitted, exited = ev.PassDue, ev.Submitted, ev.Exited
        passes = self.passes  # counted here, kept at the end (a few per instant)
        while events or next_submit < n_arrivals:
            now = events[0][0] if events else math.inf
            happened = False
            limits: list[int] | None = None
            while next_submit < n_arrivals and arrivals[next_submit].submit <= now:
                j = arrivals[next_submit]
                now = j.submit
                next_submit += 1
                jid = core.next_job_id
                handle(submitted(now, jid, _spec(j)))
                sim_of[jid] = j
                happened = True
            while events and events[0][0] == now:
                _, seq, kind, a = heappop(events)
                if kind == _END:
                    if fires(now, seq, kind, a, end_due, end_carried):
                        handle(exited(now, a, 0, 0))
                        progress.pop(a, None)
                        happened = True
                elif kind == _FIXED_END:
                    if a in progress:  # (else it ended at its limit before)
                        handle(exited(now, a, 0, 0))
                        del progress[a]
                        happened = True
                elif kind == _LIMIT:
                    if fires(now, seq, kind, a, limit_due, limit_carried):
                        if limits is None:
                            limits = [a]
                        else:
                            limits.append(a)
                elif kind == _REGISTER:
                    if core.jobs[a].state.holds_nodes:
                        handle(ev.Registered(now, a))
                        happened = True
                else:
                    happened = True  # a wake-up: the resize interval passed
            if limits is not None:
                for jid in limits:  # after the ends of this instant: an end at the limit completes
                    p = progress.get(jid)
                    if p is None or p.end_time(now) <= now + LIMIT_TIE:
                        continue
                    apply(handle(ev.LimitReached(now, jid)), now)
                    happened = True
            if not happened:
                continue
            for _ in range(MAX_PASSES_PER_INSTANT):
                passes += 1
                actions = handle(pass_due(now))
                if not actions or not apply(actions, now):
                    break
        self.passes = passes
        return self._outcomes()

    def _apply(self, actions: list[Action], now: float) -> bool:
        """Carry actions out instantly; True if another pass is due at this instant (a
        shrink freed nodes, or a malleable job registered). The most frequent kinds are
        looked for first, by their exact type: a resize makes several actions, hundreds of
        thousands in a long run."""
        core = self.core
        handle = core.handle
        again = False
        joining: LaunchJoining | None = None  # the grow order just before, if any
        # (job, end) of a job just launched that is never resized (not malleable): a limit
        # armed for it that falls after that end would find it gone, and is not set (a heap
        # entry less per rigid job); one that falls earlier ends it, and is set.
        fixed_end: tuple[int, float] | None = None
        for a in actions:
            if type(a) is ArmLimit:
                if fixed_end is not None and fixed_end[0] == a.job_id and fixed_end[1] < a.at:
                    continue
                self._set_timer(a.at, _LIMIT, a.job_id, self._limit_due, self._limit_carried)
            elif type(a) is Launch:  # one per job: looked for second
                jid = a.job_id
                j = self._sim_of[jid]
                n = len(a.hosts)
                p = WorkProgress(j.work, j.speedup, j.cost, n, now)
                if not j.malleable and n == j.nodes:
                    p.remaining = j.run * j.speedup.speedup(j.nodes)  # exact logged run time
                p.frozen_until = now + j.startup + j.startup_per_node * n
                self._progress[jid] = p
                handle(ev.Launched(now, jid))
                if j.malleable:
                    # It registers once started (at once for a trace job; after its measured
                    # start-up for a replayed one), and the daemon asks its policy again when a
                    # job registers (idle nodes can go to it): so does the simulator.
                    if p.frozen_until > now:
                        self._push(p.frozen_until, _REGISTER, jid)
                    else:
                        handle(ev.Registered(now, jid))
                        again = True
                end = p.end_time(now)
                if j.malleable:
                    self._set_timer(end, _END, jid, self._end_due, self._end_carried)
                else:
                    # Never resized, so never moved: one heap entry, no timer to keep (it
                    # is due while the job's progress is kept, which a Terminate drops).
                    self._push(end, _FIXED_END, jid)
                    fixed_end = (jid, end)
            elif type(a) is SendOrder:
                jid = a.job_id
                job = core.jobs[jid]
                progress = self._progress[jid]
                if a.kind is _SHRINK:
                    hosts = job.hosts
                    keep = [h for h in hosts if h not in job.leaving] if job.leaving else hosts
                    for r in handle(ev.ShrinkAnswered(now, jid, a.order_id, tuple(keep[-a.count :]))):
                        assert isinstance(r, Reclaim)
                        self._moved(handle(ev.HostsGone(now, r.job_id, r.hosts)), now)  # the limit moves
                    progress.resize(len(job.hosts), now)
                    again = True  # nodes freed by a shrink can start something in another pass now
                else:
                    # The application runs on every host of the job: the list the joining
                    # processes were started with, when they were (the same hosts).
                    every = joining.all_hosts if joining is not None and joining.job_id == jid else tuple(job.hosts)
                    self._moved(handle(ev.GrowAnswered(now, jid, a.order_id, every)), now)
                    j = self._sim_of[jid]
                    # The old size computes on while the new processes start and join.
                    delay = j.grow_latency + j.grow_latency_per_node * a.count
                    progress.resize(len(job.hosts), now + delay)
                self._set_timer(progress.end_time(now), _END, jid, self._end_due, self._end_carried)
                self.resizes += 1
                # A pass when the policy may resize the job again (resized now: the jobs
                # resized at one instant share that time, and one wake-up serves them all).
                wake = core.resize_guard_end(job)
                if wake is not None and wake != self._wake:
                    self._wake = wake
                    self._push(wake, _WAKE, 0)
            elif type(a) is LaunchJoining:
                joining = a  # the simulated application's new processes are up at once
            elif isinstance(a, Reclaim):
                moved = core.handle(ev.HostsGone(now, a.job_id, a.hosts))
                if moved:
                    self._apply(moved, now)
                again = True
            elif isinstance(a, ArmLimit | SendOrder | LaunchJoining | Launch):
                raise AssertionError(f"a subclass of a core action: {a!r}")
            elif isinstance(a, Terminate):
                # SIGTERM: the simulated processes are gone at once.
                core.handle(ev.Exited(now, a.job_id, None, 15))
                self._progress.pop(a.job_id, None)
                self._end_due.pop(a.job_id, None)  # its end never comes
                again = True
        return again

    def _moved(self, actions: list[Action], now: float) -> None:
        """What a grow's answer or hosts gone give back: the job's limit moved, or nothing."""
        for a in actions:
            if type(a) is ArmLimit:
                self._set_timer(a.at, _LIMIT, a.job_id, self._limit_due, self._limit_carried)
            else:
                self._apply([a], now)

    def _outcomes(self) -> list[JobOutcome]:
        out = []
        jobs = self.core.jobs
        point_of = _SIZE_POINT.get
        for jid, j in self._sim_of.items():
            job = jobs[jid]
            shrinks = expands = 0
            sizes: list[tuple[float, int]] = []
            add = sizes.append
            for e in job.events:  # (time, kind, nodes, ...): read by index
                point = point_of(e[1])
                if point is None:
                    continue
                if point == _SIZE:
                    add((e[0], e[2]))
                elif point == _ENDED:
                    add((e[0], 0))
                else:
                    if point == _COUNT_SHRINK:
                        shrinks += 1
                    else:
                        expands += 1
                    add((e[0], e[2]))
            # state._value_: its value, without Enum's property (a call per job).
            out.append(JobOutcome(j.job_id, job.submit_time, job.start_time, job.end_time, j.nodes,
                                  job.node_seconds, j.malleable, shrinks, expands, job.state._value_,
                                  tuple(sizes)))
        return out


_FINISHED = (JobState.COMPLETED.value, JobState.TIMEOUT.value)


class SimulationError(ElasticError):
    """A simulation that left jobs unfinished: a policy that never starts a job it accepted."""

    code = "simulation_failed"


def simulate(jobs: list[SimJob], nodes: int, policy: Policy) -> list[JobOutcome]:
    """Every job's outcome; each ends COMPLETED or TIMEOUT (its time limit)."""
    sim = Simulation(jobs, nodes, policy, record_hosts=False)
    out = sim.run()
    unfinished = [o for o in out if o.state not in _FINISHED]
    if unfinished:
        raise SimulationError(f"{policy.name}: {len(unfinished)} jobs did not finish, e.g. job {unfinished[0].job_id} "
                              f"({unfinished[0].state})")
    return out
