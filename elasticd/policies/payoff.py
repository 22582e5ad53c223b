"""Payoff: malleable EASY that resizes a job only when the resize pays for itself.

What each seed policy uses in part, together, and what none of them weighs: the cost of a
resize.

1. Starts are EASY's (the queue head's reservation is never delayed by a backfilled job; with
   no malleable job the schedule is EASY's, job for job). A malleable job starts as soon as
   its minimum fits, on up to its preferred size (the size its model says it uses well, as
   Pref/KeepPref), never wider: idle nodes beyond it are better lent (3.) than given for good
   (a loan to a job starting in the same pass is a wider start: no grow to pay for).
2. Waiting jobs, in queue order, are made room for by taking nodes back from running
   malleable jobs: first nodes lent beyond a job's preferred size (loans are reclaimed at
   once, whatever the resize interval: nobody may wait for a loan), then, as minAgree does,
   from the widest jobs down to their minimum — but only when the waiting job's wait saved
   (until its EASY reservation) is more than what the shrink costs the jobs shrunk (their
   predicted later end under their own model, reconfiguration included). SD-Policy's
   slowdown-driven sharing, both sides priced in bounded slowdown: the waiting job's over its
   expected run given its limit (expected_inverse_run), each donor's over its run at its limit.
3. Idle nodes no waiting job can use are lent to running malleable jobs, those furthest
   below their preferred size first (Avg's balance, measured against the model's preferred
   size), each loan only if the time it saves the job is more than it costs: the
   reconfiguration to grow, the one to give the nodes back when they are reclaimed, and the
   order round trip (`order_latency`, what the daemon measures; 0 in the simulator).

Predictions use the job's own model (speedup, reconfiguration cost) and its limit as its
work estimate (a scheduler knows limits, not run times), as MEBF and SD-Policy do.
"""

from __future__ import annotations

import bisect
import heapq
import itertools
import math
from collections.abc import Callable
from operator import itemgetter

from elastic_protocol.jobspec import JobKind
from elastic_protocol.models import ReconfigCost, Rho
from elasticd.metrics import BSLD_TAU
from elasticd.policies.base import (
    Decision,
    Grow,
    PendingView,
    RunningView,
    Shrink,
    Snapshot,
    Start,
    grant_requests,
    limit_at,
    start_nodes_of,
    start_size,
)
from elasticd.policies.easy import easy_pass
from elasticd.policies.predict import PendingPrediction, Predictions, RunningPrediction, model_parts, work_of

_MALLEABLE = JobKind.MALLEABLE


def start_up_to_preferred(job: PendingView, available: int) -> int | None:
    """A malleable job starts as soon as its minimum fits, on up to its preferred size."""
    if job.kind is _MALLEABLE:
        if available < job.min_nodes:
            return None
        preferred = job.preferred
        # min() without the call: EASY asks this of every job that fits, twice for most.
        return preferred if preferred < available else available  # noqa: FURB136
    return start_size(job, available)


def start_at_minimum(job: PendingView, available: int) -> int | None:
    if job.kind is _MALLEABLE:
        return job.min_nodes if available >= job.min_nodes else None
    return start_size(job, available)


def expected_inverse_run(limit: float | None) -> float:
    """E[1 / max(R, tau)] for a run R known only to be at most its limit L: R uniform on
    (0, L], the least committal reading of a bound, gives (1 + ln(L / tau)) / L.

    Why not 1 / L: limits are upper bounds, often far above the run (HPC2N: 3 s jobs with
    48 h limits), and a wait is felt in bounded slowdown against the real run. Priced at its
    limit, every wait saved looked negligible beside a donor's few per cent of slowdown: on
    HPC2N at 100 % malleable (seed 1) jobs waited 114 s on average where Pref's waited 6 s
    (bounded slowdown 1.32 against 1.02); priced so, 18 s (1.06). The donors' side stays at
    their limits: a donor's delay shrinks with its real remaining run, so priced at its
    limit it is an upper bound, and a shrink is never over-taken for it."""
    if limit is None or limit == math.inf:
        return 0.0
    if limit <= BSLD_TAU:
        return 1.0 / BSLD_TAU
    return (1.0 + math.log(limit / BSLD_TAU)) / limit


_first = itemgetter(0)
_third = itemgetter(2)
# Above this rho, S(n) = n ** (1 - rho) grows so slowly with n that math.pow's last bit
# could order two sizes wrongly: such a job's plans are always priced in full.
_RHO_ORDERED = 0.999


def _costs_ordered(r: RunningView) -> bool:
    """Whether every cost `Payoff._cost_of` can give for taking nodes from r is a finite
    number >= 0, in floating point too: its run is predicted (a finite work), its history
    replays to its size, its reconfiguration costs are finite and >= 0 and its speedup does
    not rise with fewer nodes (Amdahl's never does; n ** (1 - rho) does not while rho is not
    almost 1). Then its end with fewer nodes is never earlier. A job without a prediction
    costs NaN, which no gain is compared against (its nodes are taken for any waiting job)."""
    speedup, cost = model_parts(r.model)
    work = work_of(r.model, r.time_limit, r.preferred, speedup)
    if work is None or not math.isfinite(work) or r.min_nodes < 1:
        return False
    if not (0.0 <= cost.alpha < math.inf and 0.0 <= cost.beta < math.inf and 0.0 <= cost.b < math.inf):
        return False
    if isinstance(speedup, Rho) and not speedup.rho <= _RHO_ORDERED:
        return False
    return not r.history or r.history[-1][1] == r.size


# What a waiting job's lack of nodes gets (the second field of a verdict, `Payoff._verdict`).
_NEVER = 0  # no room: more than every ready job can give, or no plan found
_ALWAYS = 1  # loans alone free it: taken back whatever the wait saved
_EXACT = 2  # room if the gain is more than the first field (the gain factor times the plan's cost)
_FLOOR = 3  # no room if the gain is at most the first field, a lower bound of that; else priced further


class Payoff:
    name = "payoff"
    stateless = True  # see Policy

    def __init__(self, min_resize_interval: float = 10.0, order_latency: float = 0.0,
                 gain_factor: float = 1.0, start: str = "preferred", max_job_test: int = 500) -> None:
        self.start = start
        self.max_job_test = max_job_test
        self.min_resize_interval = min_resize_interval
        self.order_latency = order_latency
        self.gain_factor = gain_factor
        self._pred = Predictions()
        # Per pass: the ready jobs and their sizes as the pass shrinks them (in the same order).
        self._ready: list[RunningView] = []
        self._size: dict[int, int] = {}
        self._costs: dict[tuple[int, int, int], float] = {}  # per pass: (job, size, taken) -> cost
        self._bounded: bool | None = None  # per pass: every donor's cost is >= 0 (None: not known yet)
        # Per pass, until room is given (_orders_for starts them afresh):
        self._loans: list[tuple[int, int]] = []
        self._loan_total = 0  # nodes lent: a lack up to this many is freed by loans alone
        self._capacity = 0
        self._widths: list[tuple[int, int, int, RunningView]] = []  # heap: (-size, job, room, view)
        self._by_width: list[RunningView] = []  # jobs above their minimum, widest first (taken off _widths)
        self._width_rooms: list[int] = []  # nodes the first k+1 of them can give
        self._width_costs: list[float] = [0.0]  # what taking all of the first k costs
        self._plans: dict[int, tuple[dict[int, int], dict[int, int], float] | None] = {}
        self._verdicts: dict[int, tuple[float, int]] = {}  # lack -> (threshold, _NEVER.._FLOOR)
        # Per pass: wait saved by size, and the running jobs' (end, nodes) by end, read into
        # steps (when, nodes free by then) only as far as the widest size asked needs.
        self._waits: dict[int, float] = {}
        self._ends: list[tuple[float, int]] = []
        self._easy_ends: list[tuple[float, int]] | None = None  # per pass: as the EASY pass sorted them
        self._steps: tuple[list[float], list[int]] = ([], [])
        self._steps_read = -1  # -1: not sorted this pass
        self._free_now = -1  # per pass: reserved now up to this many nodes (-1: not known yet)
        # Facts of a view that hold while the view is the same object (the core keeps a
        # waiting job's view while it waits, a running job's until the job changes): a
        # waiting job's expected inverse run, a running job's _costs_ordered.
        self._inverse_runs: dict[int, tuple[PendingView, float]] = {}
        self._ordered: dict[int, RunningView] = {}  # id -> view, of the views found _costs_ordered

    # ---- the pass ------------------------------------------------------------------------
    def decide(self, snap: Snapshot) -> list[Decision]:
        base = start_at_minimum if (self.start == "minimum" or (self.start == "adaptive" and len(snap.pending) > 1)) \
            else start_up_to_preferred
        res = easy_pass(snap, base, start_nodes_of)
        decisions: list[Decision] = list(res.starts)
        # Malleable jobs starting now (to be widened, 3.).
        starting = [(d, v) for d, v in zip(res.starts, res.started(), strict=True) if v.kind is _MALLEABLE]
        running = snap.running
        if not starting and not any(r.kind is _MALLEABLE for r in running):
            if not any(r.requested for r in running):
                return decisions  # EASY's pass, as EASY ends it: nobody asks, no reservation to work out
            return decisions + grant_requests(snap, res.extra)
        now = snap.now
        self._pred.new_pass(running)
        ready = [r for r in running if r.kind is _MALLEABLE and r.malleable_ready and not r.resizing and not r.ending]
        size = {r.job_id: r.size for r in ready}
        self._ready, self._size = ready, size
        self._costs = {}
        self._waits = {}
        self._steps_read = -1
        self._free_now = -1
        self._easy_ends = res.running_ends()
        self._orders_for()
        self._bounded = None
        shrinks: dict[int, int] = {}
        avail = res.free + snap.incoming_nodes
        owed = False
        # Room is looked for as deep in the queue as Slurm's backfill looks (bf_max_job_test):
        # past it, a queue of 10,000 would cost a pass per job for nodes that the jobs
        # ahead, being considered first, would take anyway.
        waiting = res.first_waiting(self.max_job_test)
        inverse_runs = self._inverse_runs
        if len(inverse_runs) > 2 * len(waiting) + 64:
            inverse_runs = self._inverse_runs = {}  # O(max_job_test): most of those have started
        waits = self._waits
        verdicts = self._verdicts
        # A waiting job's verdict depends on its lack of nodes and, for most, on what
        # starting it now saves (`gain`) against a threshold: worked out once per lack, not
        # once per waiting job (10,000 waiting jobs need a few dozen distinct plans).
        for job in waiting:
            need = job.start_nodes
            if need <= avail:
                owed = True  # idle nodes, or nodes coming back, will start it
                avail -= need
                continue
            lack = need - avail
            verdict = verdicts.get(lack)
            if verdict is None:
                verdict = self._verdict(lack, now)
            kind = verdict[1]
            took: dict[int, int] | None = None
            if kind == _ALWAYS:
                took = self._room(lack, now)
            elif kind != _NEVER:
                # Priced in slowdown, the unit waiting is felt in: the waiting job's wait
                # saved over its run against each donor's later end over its own run.
                if need <= self._free_now:
                    wait = 0.0  # its reservation is now
                else:
                    known = waits.get(need)
                    wait = self._wait_saved(snap, need, now) if known is None else known
                if wait == 0.0 and job.time_limit == job.time_limit:
                    # Nothing saved: 0 times its expected inverse run, which is finite
                    # unless its limit is NaN (its model's speedup is finite and > 0).
                    gain = 0.0
                else:
                    hit = inverse_runs.get(id(job))
                    if hit is None or hit[0] is not job:
                        hit = inverse_runs[id(job)] = (job, expected_inverse_run(limit_at(job, need)))
                    gain = wait * hit[1]
                if not gain <= verdict[0] and (kind == _EXACT or self._worth_taking(gain, lack, now)):
                    took = self._room(lack, now)
            if took is None:
                if avail == 0 and self._capacity == 0:
                    break  # nothing idle and nothing to take back: nobody else starts now
                continue  # cannot be made to fit now (or not worth it); a later, smaller job might
            for j, n in took.items():
                shrinks[j] = shrinks.get(j, 0) + n
                size[j] -= n
            self._orders_for()
            verdicts = self._verdicts
            owed = True
            avail = 0
        decisions.extend(Shrink(j, n) for j, n in sorted(shrinks.items()))
        free = res.free
        if not owed and free > 0:
            grants = grant_requests(snap, free)
            decisions.extend(grants)
            free -= sum(g.by for g in grants)
            lent = self._lend(snap, [r for r in ready if r.job_id not in shrinks], starting, free,
                              res.extra if starting else 0, now)
            if lent:
                widened = {d.job_id: d for d in lent if isinstance(d, Start)}
                decisions = [widened.get(d.job_id, d) if isinstance(d, Start) else d for d in decisions]
                decisions.extend(d for d in lent if isinstance(d, Grow))
        return decisions

    # ---- 2. room for a waiting job --------------------------------------------------------
    def _verdict(self, lack: int, now: float) -> tuple[float, int]:
        """What a waiting job lacking `lack` nodes gets, as far as it is known without its
        gain (see _NEVER.._FLOOR)."""
        if lack > self._capacity:
            verdict = (math.inf, _NEVER)  # all the ready jobs could give, down to their minimums, is not enough
        elif lack <= self._loan_total:
            verdict = (-math.inf, _ALWAYS)
        elif self._loans or not self._bounds_hold():
            plan = self._plan(lack, now)
            verdict = (math.inf, _NEVER) if plan is None else (self.gain_factor * plan[2], _EXACT)
        else:
            verdict = (0.0, _FLOOR)  # a plan costs >= 0: nothing to gain, no room
        self._verdicts[lack] = verdict
        return verdict

    def _room(self, lack: int, now: float) -> dict[int, int]:
        """The nodes to take back (job -> count) for a lack given room."""
        plan = self._plan(lack, now)
        assert plan is not None
        take, extra, _ = plan
        out = dict(take)
        for j, n in extra.items():
            out[j] = out.get(j, 0) + n
        return out

    def _plan(self, lack: int, now: float) -> tuple[dict[int, int], dict[int, int], float] | None:
        """Which nodes would be taken, and what that costs the donors: they depend on `lack`
        alone until room is given."""
        if lack in self._plans:
            return self._plans[lack]
        plan = self._plans[lack] = self._room_plan(lack, now)
        return plan

    def _worth_taking(self, gain: float, lack: int, now: float) -> bool:
        """Whether `gain` is more than the gain factor times the cost of taking `lack` nodes
        from the widest jobs, which is priced only as far as needed to tell.

        Every donor's cost being a finite number >= 0 (`_bounded`), the plan's cost is at
        least that of the donors it takes down to their minimums first: most waiting jobs
        are turned down against donors priced for earlier ones, without pricing their own
        plan (on a machine of 1,000 running jobs, a 500-node plan prices 120 donors). The
        cost compared at the end is the plan's, summed in its own order: exact."""
        factor = self.gain_factor
        full, rooms, donors, size = self._width_costs, self._width_rooms, self._by_width, self._size
        while True:
            k = bisect.bisect_left(rooms, lack)  # k < len(rooms): the plan takes donors[:k] whole, part of donors[k]
            j = min(len(full) - 1, k)
            floor = factor * full[j]
            if gain <= floor:
                self._verdicts[lack] = (floor, _FLOOR)
                return False
            if j == k < len(rooms):
                plan = self._plan(lack, now)
                assert plan is not None
                self._verdicts[lack] = verdict = (factor * plan[2], _EXACT)
                return not gain <= verdict[0]
            if j == len(donors) and not self._next_widest():
                raise AssertionError("a lack within capacity always has a plan")
            r = donors[j]
            full.append(full[-1] + self._cost_of(r, size[r.job_id], size[r.job_id] - r.min_nodes, now))

    def _bounds_hold(self) -> bool:
        """Whether every plan's cost this pass is a sum of numbers >= 0 (so that
        `_worth_taking` may turn a plan down on part of its cost): every donor's cost is
        (`_costs_ordered`), and the gain factor and the order latency keep it so. Asked once
        a pass, when a plan is first needed; the donors then are all there will be (a shrink
        only makes fewer)."""
        if self._bounded is not None:
            return self._bounded
        self._bounded = False
        factor, latency = self.gain_factor, self.order_latency
        if not (0.0 < factor < math.inf and 0.0 <= latency < math.inf):
            return False
        ordered = self._ordered
        if len(ordered) > 2 * len(self._ready) + 64:
            self._ordered = ordered = {}
        known = ordered.get
        for r in itertools.chain(self._by_width, (w[3] for w in self._widths)):
            if known(id(r)) is not r:
                if not _costs_ordered(r):
                    return False
                ordered[id(r)] = r
        self._bounded = True
        return True

    def _room_plan(self, lack: int, now: float) -> tuple[dict[int, int], dict[int, int], float] | None:
        """(loans taken back, nodes taken below the preferred size, what those cost the
        donors in slowdown) to free `lack` nodes; None if they cannot be found."""
        take: dict[int, int] = {}
        # Loans first, the largest first: reclaimed whatever the resize interval.
        for job_id, over in self._loans:
            if lack <= 0:
                break
            n = min(over, lack)
            take[job_id] = n
            lack -= n
        if lack <= 0:
            return take, {}, 0.0
        size = self._size
        # Then below the preferred size, widest first, if the wait saved pays for it (no
        # waiting job waits for a resize interval to pass).
        if not take:
            return self._widest_plan(lack, size, now)
        donors = sorted(self._ready, key=lambda r: (-(size[r.job_id] - take.get(r.job_id, 0)), r.job_id))
        extra: dict[int, int] = {}
        views: dict[int, RunningView] = {}
        for r in donors:
            have = size[r.job_id] - take.get(r.job_id, 0)
            room = have - r.min_nodes
            if room <= 0:
                continue
            n = min(room, lack)
            extra[r.job_id] = n
            views[r.job_id] = r
            lack -= n
            if lack == 0:
                break
        if lack > 0:
            return None
        cost = sum(self._cost_of(views[j], size[j] - take.get(j, 0), n, now) for j, n in extra.items())
        return take, extra, cost

    def _widest_plan(self, lack: int, size: dict[int, int],
                     now: float) -> tuple[dict[int, int], dict[int, int], float] | None:
        """_room_plan's walk when no loan is taken back: the widest jobs down to their
        minimums, read off running sums (plans for dozens of lacks share their donors)."""
        rooms = self._width_rooms
        while (not rooms or rooms[-1] < lack) and self._next_widest():
            pass
        k = bisect.bisect_left(rooms, lack)
        if k == len(rooms):
            return None
        donors = self._by_width
        full = self._width_costs
        while len(full) <= k:  # the cost of taking every donor before k down to its minimum
            r = donors[len(full) - 1]
            full.append(full[-1] + self._cost_of(r, size[r.job_id], size[r.job_id] - r.min_nodes, now))
        last = donors[k]
        n = lack - (rooms[k - 1] if k else 0)
        extra = {r.job_id: size[r.job_id] - r.min_nodes for r in donors[:k]}
        extra[last.job_id] = n
        return {}, extra, full[k] + self._cost_of(last, size[last.job_id], n, now)

    def _next_widest(self) -> bool:
        """Takes the next widest job off the heap into _by_width; False if none is left.
        (Most passes need only the widest few: sorting them all cost more than the rest of
        the room walk.)"""
        if not self._widths:
            return False
        _, _, room, r = heapq.heappop(self._widths)
        rooms = self._width_rooms
        self._by_width.append(r)
        rooms.append(rooms[-1] + room if rooms else room)
        return True

    def _cost_of(self, r: RunningView, have: int, n: int, now: float) -> float:
        """What taking n of the job's `have` nodes costs it, in slowdown (memoized per pass)."""
        key = (r.job_id, have, n)
        c = self._costs.get(key)
        if c is None:
            c = self._costs[key] = self._delay(r, have, n, now) / max(self._runtime(r, now), BSLD_TAU)
        return c

    def _orders_for(self) -> None:
        """The orders room plans walk the ready jobs in, and what they could give at most:
        they change only when a waiting job was given room, not once per waiting job (a
        queue of 10,000 jobs would sort them 20,000 times a pass)."""
        ready, size = self._ready, self._size
        # The jobs above their minimum, widest first, job id breaking ties: a heap read as far as needed.
        widths = [(-s, r.job_id, s - r.min_nodes, r) for r, s in zip(ready, size.values(), strict=True) if s > r.min_nodes]
        # Only the jobs holding loans (above both their preferred size and their minimum)
        # can give one back: (job, nodes lent), the largest loan first.
        by_loan = sorted((w[3] for w in widths if -w[0] > w[3].preferred),
                         key=lambda r: (r.preferred - size[r.job_id], r.job_id))
        self._loans = [(r.job_id, size[r.job_id] - max(r.preferred, r.min_nodes)) for r in by_loan]
        self._loan_total = sum(n for _, n in self._loans)
        self._capacity = sum(map(_third, widths))
        heapq.heapify(widths)
        self._widths = widths
        self._by_width = []
        self._width_rooms = []
        self._width_costs = [0.0]
        self._plans = {}
        self._verdicts = {}

    def _wait_saved(self, snap: Snapshot, need: int, now: float) -> float:
        """How much sooner a job needing `need` nodes starts if it starts now than at its
        EASY reservation.

        The reservation depends on the pass (its time, its running jobs) and on how many
        nodes the job needs, nothing else: computed once per size and pass."""
        start = self._reservation(snap, need, now)
        wait = self._waits[need] = start - now if start != math.inf else 1e12
        return wait

    def _reservation(self, snap: Snapshot, need: int, now: float) -> float:
        """shadow_time's start, from the pass's running jobs sorted once by end: the nodes
        back by each time they come back (a pass asks for dozens of sizes), read only as far
        as the widest size asked needs."""
        if self._steps_read < 0:
            ends = self._easy_ends
            if ends is None:
                ends = [(r.estimated_end, r.size - r.shrinking) for r in snap.running if not r.ending]
                ends.sort(key=_first)  # jobs ending together are merged below: their order does not matter
            self._ends = ends
            avail, i, count = snap.free_nodes + snap.incoming_nodes, 0, len(ends)
            while i < count and ends[i][0] <= now:  # overdue jobs count as ending now, all together
                avail += ends[i][1]
                i += 1
            self._steps = ([now], [avail])
            self._steps_read = i
            self._free_now = avail  # up to this many nodes, a reservation is now
        times, avails = self._steps
        if avails[-1] < need:
            ends, i = self._ends, self._steps_read
            count = len(ends)
            # Every step but the last is final (later ends are later); so is the last one's time.
            while i < count:
                end, n = ends[i]
                if end > times[-1]:
                    if avails[-1] >= need:
                        break
                    times.append(end)
                    avails.append(avails[-1] + n)
                else:  # overdue jobs count as ending now, all together
                    avails[-1] += n
                i += 1
            self._steps_read = i
        k = bisect.bisect_left(avails, need)
        return times[k] if k < len(times) else math.inf

    def _delay(self, r: RunningView, n: int, k: int, now: float) -> float:
        """How much later job r ends if it goes from n to n - k nodes now (plus the order)."""
        p = self._pred.get(r, now)
        if not p.known or p.end is None:
            return math.inf
        return self._end_at(p, n - k) - self._end_at(p, n) + self.order_latency

    def _runtime(self, r: RunningView, now: float) -> float:
        p = self._pred.get(r, now)
        return math.inf if p.end is None else p.end - r.start_time

    @staticmethod
    def _end_at(p: RunningPrediction, n: int) -> float:
        if n == p.job.size:
            assert p.end is not None
            return p.end
        return p.end_if_resized(n)

    # ---- 3. lending idle nodes ------------------------------------------------------------
    def _lend(self, snap: Snapshot, ready: list[RunningView], starting: list[tuple[Start, PendingView]], free: int,
              spare: int, now: float) -> list[Grow | Start]:
        """Loans of the idle nodes: Grow orders to running jobs, and wider Starts for the
        malleable jobs this pass starts — a loan made at a job's start costs no
        reconfiguration (lent right after it, the same nodes cost one grow: on NASA iPSC a
        job started on 93 of 128 idle nodes and grown to 128 at once ended 13 s later than
        rigid, and the next job waited for it).

        A wider start takes only nodes the blocked queue head does not need at its
        reservation (`spare`, less what is lent before it): a loan is taken back through
        the job's application, and a job just started has not registered one yet (in the
        daemon it may never), so its loan must not be what the head waits for."""
        interval = self.min_resize_interval
        takers: list[tuple[float, int, int, RunningView | None, Start | None, PendingView | None]] = [
            (r.size / max(1, r.preferred), r.size, r.job_id, r, None, None) for r in ready
            if r.size < r.max_nodes and (r.last_resize is None or now - r.last_resize >= interval)]
        takers.extend((d.nodes / max(1, v.preferred), d.nodes, d.job_id, None, d, v) for d, v in starting
                      if d.nodes < v.max_nodes)
        if not takers or free <= 0:
            return []
        # Furthest below the preferred size first (size / preferred), then the narrowest.
        takers.sort(key=lambda t: t[:3])
        out: list[Grow | Start] = []
        for _, size, job_id, r, start, v in takers:
            if free <= 0:
                break
            if r is not None:
                k = self._worth(r, min(free, r.max_nodes - size), now)
                if k > 0:
                    out.append(Grow(job_id, k))
            else:
                assert start is not None and v is not None
                k = self._worth_at_start(v, size, min(free, spare, v.max_nodes - size))
                if k > 0:
                    out.append(Start(job_id, size + k))
            free -= k
            spare -= k
        return out

    def _worth_at_start(self, job: PendingView, size: int, k: int) -> int:
        """_worth for a job starting on `size` nodes: no grow to pay for, no order to wait."""
        if job.model is None:
            return 0
        pp = PendingPrediction(job)
        base_run = pp.runtime(size)
        if base_run is None:
            return 0
        _, cost = model_parts(job.model)
        return self._most_worth(size, job.preferred, k, cost, lambda n: base_run - (pp.runtime(n) or 0.0), 0.0)

    def _worth(self, r: RunningView, k: int, now: float) -> int:
        """The most nodes (<= k) whose loan saves the job more than it costs, or 0."""
        p = self._pred.get(r, now)
        if not p.known or p.end is None or p.progress is None:
            return 0
        base_end = p.end
        return self._most_worth(r.size, r.preferred, k, p.cost, lambda n: base_end - p.end_if_resized(n),
                                self.order_latency)

    def _most_worth(self, size: int, preferred: int, k: int, cost: ReconfigCost, saved_on: Callable[[int], float],
                    latency: float) -> int:
        """The most nodes (<= k, halving) more than `size` whose time saved (`saved_on(n)`)
        pays for giving them back later down to the preferred size, and the order."""
        while k > 0:
            n = size + k
            back = cost.seconds(n, preferred) if n > preferred else 0.0
            saved = saved_on(n)
            if saved > self.gain_factor * (back + latency) and saved > 0:
                return k
            k //= 2
        return 0


__all__ = ["Payoff", "start_up_to_preferred"]
