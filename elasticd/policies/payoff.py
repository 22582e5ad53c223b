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
import itertools
import math
from collections.abc import Callable

from elastic_protocol.jobspec import JobKind
from elastic_protocol.models import ReconfigCost
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
from elasticd.policies.predict import PendingPrediction, Predictions, RunningPrediction, model_parts


def start_up_to_preferred(job: PendingView, available: int) -> int | None:
    """A malleable job starts as soon as its minimum fits, on up to its preferred size."""
    if job.kind is JobKind.MALLEABLE:
        return min(available, job.preferred) if available >= job.min_nodes else None
    return start_size(job, available)


def start_at_minimum(job: PendingView, available: int) -> int | None:
    if job.kind is JobKind.MALLEABLE:
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


class Payoff:
    name = "payoff"

    def __init__(self, min_resize_interval: float = 10.0, order_latency: float = 0.0,
                 gain_factor: float = 1.0, start: str = "preferred", max_job_test: int = 500) -> None:
        self.start = start
        self.max_job_test = max_job_test
        self.min_resize_interval = min_resize_interval
        self.order_latency = order_latency
        self.gain_factor = gain_factor
        self._pred = Predictions()
        self._loans: list[tuple[int, int]] = []
        self._costs: dict[tuple[int, int, int], float] = {}  # per pass: (job, size, taken) -> cost
        self._by_width: list[RunningView] = []  # jobs above their minimum, widest first
        self._width_rooms: list[int] = []  # nodes the first k+1 of them can give
        self._width_costs: list[float] = [0.0]  # what taking all of the first k costs
        self._capacity = 0
        self._shadows: dict[int, float] = {}
        self._steps: tuple[list[float], list[int]] | None = None  # per pass: (when, nodes free by then)
        self._plans: dict[int, tuple[dict[int, int], dict[int, int], float] | None] = {}

    # ---- the pass ------------------------------------------------------------------------
    def decide(self, snap: Snapshot) -> list[Decision]:
        base = start_at_minimum if (self.start == "minimum" or (self.start == "adaptive" and len(snap.pending) > 1)) \
            else start_up_to_preferred
        sized: dict[int, PendingView] = {}  # malleable jobs the pass sized (to be widened, 3.)

        def sizer(job: PendingView, available: int) -> int | None:
            n = base(job, available)
            if n is not None and job.kind is JobKind.MALLEABLE:
                sized[job.job_id] = job
            return n

        res = easy_pass(snap, sizer, start_nodes_of)
        decisions: list[Decision] = list(res.starts)
        starting = [(d, sized[d.job_id]) for d in res.starts if d.job_id in sized]
        if not starting and not any(r.kind is JobKind.MALLEABLE for r in snap.running):
            return decisions + grant_requests(snap, res.extra)
        now = snap.now
        self._pred.new_pass(snap.running)
        ready = [r for r in snap.running if r.kind is JobKind.MALLEABLE and r.malleable_ready
                 and not r.resizing and not r.ending]
        size = {r.job_id: r.size for r in ready}
        self._orders_for(ready, size)
        self._shadows = {}  # per pass: reservations by size
        self._costs = {}
        self._steps = None
        shrinks: dict[int, int] = {}
        avail = res.free + snap.incoming_nodes
        owed = False
        # Room is looked for as deep in the queue as Slurm's backfill looks (bf_max_job_test):
        # past it, a queue of 10,000 would cost a pass per job for nodes that the jobs
        # ahead, being considered first, would take anyway.
        for job in res.first_waiting(self.max_job_test):
            need = start_nodes_of(job)
            if need <= avail:
                owed = True  # idle nodes, or nodes coming back, will start it
                avail -= need
                continue
            took = self._make_room(snap, job, need - avail, ready, size, now)
            if took is None:
                if avail == 0 and self._capacity == 0:
                    break  # nothing idle and nothing to take back: nobody else starts now
                continue  # cannot be made to fit now (or not worth it); a later, smaller job might
            for j, n in took.items():
                shrinks[j] = shrinks.get(j, 0) + n
                size[j] -= n
            self._orders_for(ready, size)
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
    def _make_room(self, snap: Snapshot, job: PendingView, lack: int, ready: list[RunningView],
                   size: dict[int, int], now: float) -> dict[int, int] | None:
        """Nodes to take back (job -> count) so that `lack` more are free, or None if that is
        impossible or not worth it."""
        if lack > self._capacity:
            return None  # all the ready jobs could give, down to their minimums, is not enough
        # Which nodes would be taken, and what that costs the donors, depend on `lack` alone
        # until room is given (then _orders_for starts afresh): worked out once per lack, not
        # once per waiting job (10,000 waiting jobs need a few dozen distinct plans).
        if lack in self._plans:
            plan = self._plans[lack]
        else:
            plan = self._plans[lack] = self._room_plan(lack, ready, size, now)
        if plan is None:
            return None
        take, extra, cost = plan
        if not extra:
            return dict(take)
        # Priced in slowdown, the unit waiting is felt in: the waiting job's wait saved over
        # its run against each donor's later end over its own run.
        gain = self._wait_saved(snap, job, now) * expected_inverse_run(limit_at(job, start_nodes_of(job)))
        if gain <= self.gain_factor * cost:
            return None
        out = dict(take)
        for j, n in extra.items():
            out[j] = out.get(j, 0) + n
        return out

    def _room_plan(self, lack: int, ready: list[RunningView], size: dict[int, int],
                   now: float) -> tuple[dict[int, int], dict[int, int], float] | None:
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
        # Then below the preferred size, widest first, if the wait saved pays for it (no
        # waiting job waits for a resize interval to pass).
        if not take:
            return self._widest_plan(lack, size, now)
        donors = sorted(ready, key=lambda r: (-(size[r.job_id] - take.get(r.job_id, 0)), r.job_id))
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

    def _cost_of(self, r: RunningView, have: int, n: int, now: float) -> float:
        """What taking n of the job's `have` nodes costs it, in slowdown (memoized per pass)."""
        key = (r.job_id, have, n)
        c = self._costs.get(key)
        if c is None:
            c = self._costs[key] = self._delay(r, have, n, now) / max(self._runtime(r, now), BSLD_TAU)
        return c

    def _orders_for(self, ready: list[RunningView], size: dict[int, int]) -> None:
        """The orders `_make_room` walks the ready jobs in, and what they could give at most:
        they change only when a waiting job was given room, not once per waiting job (a
        queue of 10,000 jobs would sort them 20,000 times a pass)."""
        # Only the jobs holding loans (above their preferred size) can give one back: (job,
        # nodes lent), the largest loan first.
        by_loan = sorted((r for r in ready if size[r.job_id] > max(r.preferred, r.min_nodes)),
                         key=lambda r: (r.preferred - size[r.job_id], r.job_id))
        self._loans = [(r.job_id, size[r.job_id] - max(r.preferred, r.min_nodes)) for r in by_loan]
        self._by_width = sorted((r for r in ready if size[r.job_id] > r.min_nodes),
                                key=lambda r: (-size[r.job_id], r.job_id))
        self._width_rooms = list(itertools.accumulate(size[r.job_id] - r.min_nodes for r in self._by_width))
        self._width_costs = [0.0]
        self._capacity = sum(max(0, size[r.job_id] - r.min_nodes) for r in ready)
        self._plans = {}

    def _wait_saved(self, snap: Snapshot, job: PendingView, now: float) -> float:
        """How much sooner the job starts if it starts now than at its EASY reservation.

        The reservation depends on the pass (its time, its running jobs) and on how many
        nodes the job needs, nothing else: computed once per size and pass."""
        need = start_nodes_of(job)
        start = self._shadows.get(need)
        if start is None:
            start = self._shadows[need] = self._reservation(snap, need, now)
        return start - now if start != math.inf else 1e12

    def _reservation(self, snap: Snapshot, need: int, now: float) -> float:
        """shadow_time's start, from the pass's running jobs sorted once: the nodes back by
        each time they come back (a pass asks for dozens of sizes)."""
        steps = self._steps
        if steps is None:
            avail = snap.free_nodes + snap.incoming_nodes
            times, avails = [now], [avail]
            for end, n in sorted((r.estimated_end, r.size - r.shrinking) for r in snap.running if not r.ending):
                avail += n
                if end <= times[-1]:  # overdue jobs count as ending now, all together
                    avails[-1] = avail
                else:
                    times.append(end)
                    avails.append(avail)
            steps = self._steps = (times, avails)
        times, avails = steps
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
