"""SD-Policy (Slowdown Driven), from `sd-policy-slowdown-driven-slurm.txt` (D'Amico,
Jokanovic, Corbalan), adapted from shared cores to whole nodes.

The paper's policy is a backfill variant: each queued job (in priority order) first tries
a static placement; if that fails and the job is malleable, running "mates" are shrunk to
make room for it, but only if the job's predicted end improves on its static one
(Listing 1). Mates are chosen to minimise the sum of their penalties (Eqs. 1-3), a mate's
penalty being its estimated slowdown after the shrink (Eq. 4):

    p = (wait_time + increase + req_time) / req_time

Mates whose penalty reaches MAX_SLOWDOWN are not eligible (static cut-off, or dynamic:
the average predicted slowdown of the running jobs); at most `max_mates` (2) are used;
the new job must finish inside its mates' allocation; mates get their nodes back when the
new job ends.

Whole-node adaptation (the paper shares the cores of a node; elastic moves whole nodes):
- A mate lends at most floor(sharing_factor x nodes) of its nodes (SharingFactor, 0.5 in
  the paper), never going below its minimum. The new job starts on the nodes the
  availability map leaves free (idle or already coming back) plus what its mates lend,
  at most its preferred size (its "request") and at least its minimum.
- Run times follow the job's model (`predict.py`): with none, linear in nodes, which is the
  paper's Eq. 5/6 for whole nodes. A mate's increase is its predicted end when it lends
  its nodes until the new job ends, minus its predicted end without that.
- The static placement is conservative backfilling on the availability map (a Slurm
  backfill "map of jobs reservations in time"), so `static_end` is the job's reservation
  plus its run time on its preferred size. A malleable job also starts right away on
  fewer idle nodes, with no mate at all, when that ends earlier than waiting would.
- Shrinks are asynchronous here: after mates are ordered to shrink, the job holds its
  place on the map and starts on a later pass once their nodes are back. The policy
  remembers that promise (the paper shrinks and starts in one step): weighed afresh
  against the nodes just freed, the job might prefer to wait, and the mates would be
  shrunk again and again for nothing. Jobs ahead in the queue may still start on their
  preferred size, but not borrow the promised nodes; a promise lapses if the nodes do
  not come back (a refused shrink) or the map no longer leaves them to it.
- A mate set must also fit the map by time limits, which is what every other job's
  reservation was made on: lent nodes count from now until the mate's limit, and the
  new job keeps its nodes until its own. A job started below its preferred size (with
  mates or not) is held for its limit on that size, which the core scales by its model
  (the paper likewise updates the new job's requested time).
- "Expanded back when the new job terminates" is read without memory across passes: idle
  nodes that the map does not promise to anyone go back to running malleable jobs below
  the largest size their history shows (the lenders), all they lent at once (never a
  few nodes at a time, each a reconfiguration), those short of the largest share first,
  only for as long as no reservation needs the nodes, and only on a pass that lends
  nothing. A job started reduced keeps its size (the paper gives it a finished mate's
  cores; whole nodes cannot be told apart that way).

Readings where the paper is silent:
- MAX_SLOWDOWN defaults to the static 10, the value the paper analyses on its largest
  workload (CEA-Curie, Section 4.2); `dynamic_max_slowdown` switches to DynAVGSD.
- Mates need a time limit (req_time) and a prediction; jobs without one are never mates.
  A job's wait time is its start minus its submission. "Inside its mates' allocation"
  is checked against each mate's predicted end before it lends (the allocation it has
  when it is chosen; the paper extends a mate's requested time only after).
- Like the Slurm backfill it is built into, a pass looks for mates (and keeps
  reservations for giving nodes back) for at most `max_job_test` queued jobs
  (bf_max_job_test, 500 in Slurm's sched/backfill); later jobs are not planned and
  start only in strict queue order, while every job ahead of them started.
- The candidate list is cut to the `mate_candidates` (nm) mates of lowest current
  slowdown, which the paper allows but does not size; 8 keeps a pass short.
- A job is a mate at most once per pass, and jobs resized within min_resize_interval
  seconds are not mates (elastic's guard against flapping).
- Evolving jobs' requests take their place in the queue by time, as under conservative.
- A promise is weighed on every pass that reaches its job, so a lapsed one ends there.

Why a pass stays short on a deep queue (Theta at 100 % malleable keeps 175 jobs queued on
average, up to 700): the walk must place every job's reservation, since a job further down
is weighed against them, but only jobs that could still act need more than that. A
look-ahead (`_next_actor`) finds the next job that could start, keep a promise, start
reduced or get mates, by necessary conditions read on the map as it stands -- the map only
loses nodes as the walk goes on, so a job found unable stays unable. Jobs before it are
only reserved; after the last one the walk stops, unless a give-back could still change.
This changes no decision: the tests check it against the plain walk.
"""

from __future__ import annotations

import bisect
import itertools
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from operator import itemgetter
from typing import NamedTuple, Protocol

from elastic_protocol.jobspec import JobKind
from elastic_protocol.models import WorkProgress
from elasticd.policies.base import (
    Decision,
    Grow,
    PendingView,
    RunningView,
    Shrink,
    Snapshot,
    Start,
    limit_at,
    start_size,
)
from elasticd.policies.conservative import place_request
from elasticd.policies.predict import PendingPrediction, RunningPrediction, end_at, replay
from elasticd.policies.profile import FreeProfile, queue_entries, running_releases
from elasticd.policies.threestep import resizable


class _Mate:
    """An eligible mate of this pass. Its what-if prediction is built only if a search
    weighs it (most passes rank a dozen running jobs and weigh none)."""

    __slots__ = ("_pred", "base", "end", "job", "lend", "now", "replayed")

    def __init__(self, job: RunningView, replayed: WorkProgress, now: float, base: float, lend: int, end: float) -> None:
        self.job = job
        self.replayed = replayed  # its progress as of its last size change
        self.now = now
        self.base = base  # its predicted slowdown now: a lower bound of its penalty as a mate
        self.lend = lend  # the most nodes it may lend
        self.end = end  # its predicted end if nobody borrows from it
        self._pred: RunningPrediction | None = None

    def end_if_lent(self, k: int, until: float) -> float:
        if self._pred is None:
            self._pred = RunningPrediction(self.job, self.now, self.replayed)
        return self._pred.end_if_lent(k, until)


class _RunInfo(NamedTuple):
    """What a pass reads of a running job's view that does not depend on the time, kept
    while the core hands over the same view (it builds a new one when the job changes)."""

    view: RunningView
    lend: int  # the most nodes it may lend if resizable now; -1: not resizable as it stands
    last_resize: float | None
    replayed: WorkProgress | None  # its progress; None: no prediction, or never a mate as it stands
    submitted: float
    limit: float  # its time limit (inf: none)
    before: int  # the largest size it has had
    release: list[tuple[float, int]]  # `running_releases` of it alone, not yet clamped to now


class _Running(NamedTuple):
    """The running jobs of one snapshot's tuple of views, by what does not depend on the time."""

    views: tuple[RunningView, ...]  # held: while it is, its id is its own
    mates: list[_RunInfo]  # possible mates (the slowdown cut and the resize interval only remove)
    lenders: list[_RunInfo]  # possible lenders
    lend_bound: int  # the most nodes any max_mates possible mates could lend
    releases: list[tuple[float, int]]  # when their nodes come back, unclamped


class _Search(Protocol):
    """_pick_mates' depth-first search over mate sets, handed itself to recurse."""

    def __call__(self, start: int, chosen: list[_Mate], bound: float, again: _Search) -> None: ...


# A set of mates: its members, the nodes it can lend, the earliest predicted end among them,
# and (member's position, its limit) by limit.
_MateSet = tuple[tuple[_Mate, ...], int, float, tuple[tuple[int, float], ...]]


@dataclass
class _Mates:
    ranked: list[_Mate]  # eligible, lowest current slowdown first
    cutoff: float  # MAX_SLOWDOWN for this pass
    used: set[int] = field(default_factory=set)  # lent in this pass (and out of `ranked`)
    _widest: int | None = None
    _latest: tuple[float, float] | None = None
    _sets: list[_MateSet] | None = None
    _by_end: list[tuple[float, int]] | None = None

    def widest(self, candidates: int, max_mates: int) -> int:
        """The most nodes any allowed set of candidates could lend: a bound that lets most
        of a deep queue skip the mate search (kept until a mate is used)."""
        if self._widest is None:
            lends = sorted((m.lend for m in self.ranked[:candidates]), reverse=True)
            self._widest = sum(lends[:max_mates])
        return self._widest

    def latest(self, candidates: int) -> tuple[float, float]:
        """(latest predicted end, latest time limit) of the candidates: a new job must end
        inside a mate's allocation, and past every mate's limit the map alone must hold it."""
        if self._latest is None:
            cands = self.ranked[:candidates]
            self._latest = (
                max((m.end for m in cands), default=-math.inf),
                max((m.job.estimated_end for m in cands), default=-math.inf),
            )
        return self._latest

    def sets(
        self, candidates: int, max_mates: int
    ) -> list[_MateSet]:
        """Every allowed set of candidates, in the search's order, with the nodes it can
        lend, the earliest predicted end among its members, and (member's position, its
        limit) by limit: the order its lent nodes come back in."""
        if self._sets is None:
            cands = self.ranked[:candidates]
            limits = [m.job.estimated_end for m in cands]
            # Singles and pairs spelled out (SD-Policy allows two mates): built on most passes.
            out: list[_MateSet] = [((m,), m.lend, m.end, ((0, e),)) for m, e in zip(cands, limits)]
            if max_mates >= 2:
                for i, (a, ea) in enumerate(zip(cands, limits)):
                    for b, eb in zip(cands[i + 1 :], limits[i + 1 :]):
                        order = ((0, ea), (1, eb)) if ea <= eb else ((1, eb), (0, ea))
                        out.append(((a, b), a.lend + b.lend, min(b.end, a.end), order))
            for r in range(3, max_mates + 1):
                for chosen in itertools.combinations(cands, r):
                    by_limit = sorted(((k, m.job.estimated_end) for k, m in enumerate(chosen)), key=itemgetter(1))
                    out.append((chosen, sum(m.lend for m in chosen), min(m.end for m in chosen), tuple(by_limit)))
            self._sets = out
        return self._sets

    def by_end(self, candidates: int, max_mates: int) -> list[tuple[float, int]]:
        """For each candidate's predicted end e, latest first: the most nodes a set of
        candidates all predicted to end at e or later can lend. A set that can host a job
        ending at t lends at most the entry of its earliest-ending member, whose e >= t; run
        times only fall as nodes grow, so if no entry can host the job on its own nodes
        plus that many, no set can: one look at a few entries instead of every set (most
        jobs the look-ahead weighs are too long for every mate)."""
        if self._by_end is None:
            top: list[int] = []  # the widest lends so far, at most max_mates of them
            keep = max(1, max_mates)  # (`sets` has every single mate, whatever max_mates)
            out: list[tuple[float, int]] = []
            for m in sorted(self.ranked[:candidates], key=lambda m: m.end, reverse=True):
                bisect.insort(top, m.lend)
                if len(top) > keep:
                    del top[0]
                out.append((m.end, sum(top)))
            self._by_end = out
        return self._by_end

    def take(self, mate: _Mate) -> None:
        self.used.add(mate.job.job_id)
        self.ranked.remove(mate)
        self._widest = None
        self._latest = None
        self._sets = None
        self._by_end = None


class SdPolicy:
    name = "sd"

    def __init__(
        self,
        max_slowdown: float = 10.0,
        dynamic_max_slowdown: bool = False,
        sharing_factor: float = 0.5,
        max_mates: int = 2,
        mate_candidates: int = 8,
        max_job_test: int = 500,
        min_resize_interval: float = 10.0,
        look_ahead: bool = True,
    ) -> None:
        """`look_ahead=False` walks the plain way, weighing every job in full: the same
        decisions, slower; kept so that tests can hold the look-ahead to that."""
        self.max_slowdown = max_slowdown
        self.dynamic_max_slowdown = dynamic_max_slowdown
        self.sharing_factor = sharing_factor
        self.max_mates = max_mates
        self.mate_candidates = mate_candidates
        self.max_job_test = max_job_test
        self.min_resize_interval = min_resize_interval
        self.look_ahead = look_ahead
        # Running jobs' time-free facts, per view, and those of the last snapshot's tuple
        # of views (the core hands over the same tuple until a job changes).
        self._run_info: dict[int, _RunInfo] = {}
        self._run_last: _Running | None = None
        # Jobs whose mates were shrunk for them: job id -> the size they start on once the
        # lent nodes are back. Shrinks take effect after the pass (the application answers),
        # so the start comes on a later pass; without this memory that pass would weigh the
        # job afresh against the nodes just freed, may prefer to wait, give the nodes back,
        # and shrink the mates again ten seconds later -- forever.
        self._promised: dict[int, int] = {}
        self._traits: dict[int, tuple[PendingView, int, float, int, int, PendingPrediction | None]] = {}

    # ---- the pass ---------------------------------------------------------------------
    def decide(self, snap: Snapshot) -> list[Decision]:
        now = snap.now
        free = snap.free_nodes
        out: list[Decision] = []
        mates: _Mates | None = None  # built on first need
        # Forget jobs no longer queued: promises at once, kept traits once they outnumber
        # the queue (memory stays bounded at O(queue) now and then).
        if self._promised or len(self._traits) > 2 * len(snap.pending) + 64:
            waiting = {j.job_id for j in snap.pending}
            self._promised = {k: v for k, v in self._promised.items() if k in waiting}
            if len(self._traits) > 2 * len(snap.pending) + 64:
                self._traits = {k: v for k, v in self._traits.items() if k in waiting}
        # Idle nodes promised to jobs further down the queue: jobs ahead may still start
        # on their preferred size (first come, first served) but not borrow these.
        promised_left = sum(self._promised.values())
        entries = queue_entries(snap)
        if not entries:
            # Nothing waits (a third of the passes on a busy trace): at most nodes go back to
            # lenders, and the map is only needed when some job can take them.
            lenders = self._lenders(snap) if free > 0 else []
            return self._give_back(now, self._map(snap), free, lenders) if lenders else []
        prof = self._map(snap)
        # Mates are looked for only while a malleable job is still to come.
        last_malleable = len(entries) - 1
        while last_malleable >= 0 and (
            entries[last_malleable][1] or entries[last_malleable][0].kind is not JobKind.MALLEABLE  # type: ignore[attr-defined]
        ):
            last_malleable -= 1
        # Giving idle nodes back needs every examined job's reservation on the map.
        lenders = self._lenders(snap) if free > 0 else []
        promised = self._promised
        traits = self._traits
        served = 0  # entries started or granted on this pass
        served_from = 0
        # Entries before `next_actor` cannot act on this pass (see `_next_actor`): they only
        # need their reservations, which the entries that may act are weighed against. The
        # next look-ahead starts past `next_actor`: that entry is weighed in full anyway, and
        # weighing it again on the map its quiet predecessors left rarely spares that.
        next_actor = 0
        look_from = 0
        for i, (e, is_request) in enumerate(entries):
            if len(out) > served_from:
                d = out[-1]
                served += isinstance(d, (Start, Grow)) and d.job_id == entries[i - 1][0].job_id  # type: ignore[attr-defined]
                served_from = len(out)
            examined = i < self.max_job_test
            asked = i >= look_from
            if asked and self.look_ahead:
                # Mates are ranked when the look-ahead first needs them, if a malleable job
                # that may get mates is still to come.
                rank = mates is None and examined and i <= last_malleable
                next_actor, mates = self._next_actor(
                    entries, i, free, snap.incoming_nodes - promised_left, prof, mates, snap if rank else None
                )
                look_from = next_actor + 1
            elif asked:
                next_actor = i
                look_from = i + 1
            if (next_actor == len(entries) and (asked or i % 16 == 0)
                    and self._give_back_settled(i, entries, prof, free, lenders, mates, now)):
                break  # nothing from here on acts, and the rest of the map cannot matter
            quiet = i < next_actor
            if not examined:
                # Past bf_max_job_test nothing is planned (as in Slurm, whose backfill stops
                # there): such a job starts only in strict queue order, everyone ahead of it
                # started, so that no unplanned job can delay one that waits ahead.
                if served < i or is_request:  # some entry ahead was neither started nor granted
                    break
                started = self._start_if_fits(e, prof, free, now, out)  # type: ignore[arg-type]
                if not started:
                    break
                free -= started
                continue
            if is_request:
                g = place_request(prof, e, free, now)  # type: ignore[arg-type]
                if g is not None:
                    out.append(g)
                    free -= g.by
                continue
            job: PendingView = e  # type: ignore[assignment]
            if promised and job.job_id in promised:
                n = promised.pop(job.job_id)
                promised_left -= n
                left = self._keep_promise(job, n, prof, free, snap.incoming_nodes, out, now)
                if left is not None:
                    free = left
                    continue
            t = traits.get(job.job_id)  # `_traits_for`, inline on this hot path
            if t is None or t[0] is not job:
                t = self._traits_of(job)
            need, dur = t[1], t[2]
            malleable = job.kind is JobKind.MALLEABLE
            ts = prof.earliest(need, dur)
            if ts == now and free >= need:
                size = need if malleable else start_size(job, min(free, prof.min_free(now, now + dur)))
                assert size is not None
                out.append(Start(job.job_id, size))
                free -= size
                prof.reserve(now, now + _held(job, size, need, dur), size)
                continue
            if malleable and ts > now and examined and not quiet:
                if mates is None:
                    mates = self._mates(snap)
                done, free = self._malleable(job, ts, prof, free, snap.incoming_nodes, promised_left, mates, out, now)
                if done:
                    continue
            if ts != math.inf:
                prof.reserve(ts, ts + dur, need)
        # Nodes go back to lenders only on a pass that lends none and keeps no promise, so
        # that no pass both shrinks some jobs and grows others.
        if not (self._promised or (mates is not None and mates.used)):
            out.extend(self._give_back(now, prof, free, lenders))
        return out

    def _next_actor(
        self,
        entries: list[tuple[object, bool]],
        i: int,
        free: int,
        incoming: int,
        prof: FreeProfile,
        mates: _Mates | None,
        snap: Snapshot | None,
    ) -> tuple[int, _Mates | None]:
        """The first entry from `i` on that could still start, be granted, keep a promise,
        start reduced or get mates on this pass (len(entries) if none can), and the mates.
        `incoming`: nodes on their way back, less those promised to jobs further down.
        `snap`: rank the mates from it when first needed (None: they are not looked for,
        or already ranked); most passes start or reserve what they do before any job
        reaches the tests that need them.

        Each test is a necessary condition of the corresponding path in `decide` and
        `_malleable`, read on the state as it is now. The walk only tightens that state (idle
        nodes are taken, reservations only take from the map, mates are only used up), so
        an entry found unable stays unable -- except that using a mate lets the next-ranked
        candidate in, which is why the search starts again after every entry that may act.
        Most of a deep queue cannot act: skipping the mate search for it, and stopping the
        walk once nobody after can act, is what keeps SD-Policy fast on deep queues."""
        # Idle and incoming nodes not promised to a job further down; promises are only kept
        # by the entries they were made for, where the walk stops anyway.
        now = prof.now
        cap = max(0, free + incoming)
        with_mates = mates is not None and bool(mates.ranked)
        widest = 0
        if with_mates:
            assert mates is not None
            widest = mates.widest(self.mate_candidates, self.max_mates)
            latest_end, latest_limit = mates.latest(self.mate_candidates)
            after_mates = max(latest_limit, now)
        elif snap is not None:
            # Until they are ranked, the widest any mates could lend: what every running
            # job that may ever lend lends, whatever its slowdown. Wider than `widest`, so it
            # skips fewer jobs, but every job it skips, `widest` would have skipped too.
            widest = self._running(snap.running).lend_bound
        # The map does not change during this walk: min_free(now, t) read off one list, made
        # when a job first gets past its minimum's test (often none does).
        starts: list[float] = []
        fewest: list[int] = []
        first_after = bisect.bisect_left
        past_mates: dict[float, int] = {}
        now_free = prof.free_at_now()
        # Nobody can start on more than the map leaves now.
        start_cap = min(free, now_free)
        # Nor on more of its own nodes than that and `cap`, nor with mates on more than
        # that and the widest lenders: a job whose minimum is above cannot act.
        reach_cap = max(0, min(cap, now_free)) + widest
        # A job whose minimum is above both cannot act at all (its planned size is no less).
        hopeless = max(start_cap, reach_cap)

        def free_until(t: float) -> int:
            j = first_after(starts, t) - 1
            return fewest[max(0, j)]
        traits = self._traits
        promised = self._promised
        last_planned = self.max_job_test
        end = len(entries)
        for k in range(i, end):
            e, is_request = entries[k]
            if is_request:
                r: RunningView = e  # type: ignore[assignment]
                if k >= last_planned:
                    return end, mates  # the walk stops at an unplanned request
                if r.requested <= free:
                    if not starts:
                        starts, fewest = prof.fewest_from_now()
                    if free_until(r.estimated_end) >= r.requested:
                        return k, mates
                continue
            t = traits.get(e.job_id)  # type: ignore[attr-defined]  # `_traits_for`, inline
            if t is None or t[0] is not e:
                t = self._traits_of(e)  # type: ignore[arg-type]
            if t[3] > hopeless and k < last_planned and not promised:
                continue  # most of a deep queue: passed without reading the map
            job, need, limit, least, pref, pp = t
            if not starts:
                starts, fewest = prof.fewest_from_now()
            # The fewest nodes the map holds over the job's limit.
            j = first_after(starts, now + limit) - 1
            for_limit = fewest[max(0, j)]
            if need <= start_cap and for_limit >= need:
                return k, mates  # it may start as planned
            if k >= last_planned:
                return end, mates  # unplanned jobs start in strict order: the walk stops here
            if promised and job.job_id in promised:
                return k, mates
            if pp is None:
                continue  # static placement only
            if snap is not None:  # the first job that needs the mates: rank them now
                mates = self._mates(snap)
                snap = None
                with_mates = bool(mates.ranked)
                widest = 0
                if with_mates:
                    widest = mates.widest(self.mate_candidates, self.max_mates)
                    latest_end, latest_limit = mates.latest(self.mate_candidates)
                    after_mates = max(latest_limit, now)
                reach_cap = max(0, min(cap, now_free)) + widest
                hopeless = max(start_cap, reach_cap)
            if least > reach_cap:
                continue
            work, speedup = pp.work, pp.speedup.speedup
            assert work is not None  # `_traits_of` keeps a prediction only with its work
            # The most nodes of its own it could start on now: what the map holds for its
            # limit (a run on fewer nodes is only longer), at most `cap`.
            top = min(cap, for_limit)
            if least <= top:
                # The reduced start's own search on the map as it is: the map only loses
                # nodes, so finding no size that fits now means none will. (It settles on
                # the largest size the map holds for long enough, never above `top`:
                # starting there finds the same.)
                n = min(top, pref)
                while n >= least:
                    run = work / speedup(n)
                    j = first_after(starts, now + (max(_limit_on(job, n, speedup), run))) - 1
                    room = fewest[max(0, j)]
                    room = min(room, cap)
                    if room >= n:
                        return k, mates  # it may start reduced, with no mate
                    n = room
            if not with_mates:
                continue
            reach = (max(0, top)) + widest  # its own nodes and the widest lenders
            reach = min(reach, pref)
            if reach < least:
                continue
            fastest = work / speedup(reach)
            if now + fastest > latest_end:
                continue  # it cannot end inside any mate's allocation
            hold = now + (max(_limit_on(job, reach, speedup), fastest))
            if latest_limit < hold:
                free_past = past_mates.get(hold)
                if free_past is None:
                    free_past = past_mates[hold] = prof.min_free(after_mates, hold)
                if free_past < least:
                    continue  # past every mate's limit the map cannot hold even its minimum
            if self._may_get_mates(job, pp, cap, prof, mates, now, free_until):  # type: ignore[arg-type]
                return k, mates
        return end, mates

    def _traits_for(self, job: PendingView) -> tuple[PendingView, int, float, int, int, PendingPrediction | None]:
        """What a walk asks of a queued job on every pass, kept while the job waits (the
        core hands over the same view until the job changes): (job, nodes to start as
        planned, time limit (inf: none), minimum, preferred size, its prediction if it is
        malleable and has one)."""
        t = self._traits.get(job.job_id)
        return t if t is not None and t[0] is job else self._traits_of(job)

    def _traits_of(self, job: PendingView) -> tuple[PendingView, int, float, int, int, PendingPrediction | None]:
        """`_traits_for`'s entry, computed and kept."""
        malleable = job.kind is JobKind.MALLEABLE
        pp: PendingPrediction | None = None
        if malleable:
            pp = PendingPrediction(job)
            if pp.work is None:
                pp = None
        need = job.preferred if malleable else job.start_nodes
        # Its limit on the nodes it starts on, by its model (the core's rule).
        at_need = limit_at(job, need)
        limit = math.inf if at_need is None else float(at_need)
        t = (job, need, limit, job.min_nodes, job.preferred, pp)
        self._traits[job.job_id] = t
        return t

    def _may_get_mates(
        self,
        job: PendingView,
        pp: PendingPrediction,
        cap: int,
        prof: FreeProfile,
        mates: _Mates,
        now: float,
        free_until: Callable[[float], int],
    ) -> bool:
        """Whether some mate set could still pass `_pick_mates` when the job is reached: its
        constraints with what can only get harder read as it stands now and what depends on
        the job's own nodes read at their loosest. Waiting is taken as never ending (a
        static start only gets later as jobs ahead reserve); the job's own nodes are at most
        what the map leaves now (`base`), so it is at most this wide, ends no earlier, and
        each mate lends at least what it lends here (and at least one node); past a mate's
        limit the map must hold at least the nodes lent by mates already past theirs.
        Penalties are not checked (they rarely decide; leaving a condition out keeps it
        necessary)."""

        work, speedup = pp.work, pp.speedup.speedup
        assert work is not None
        longest = pp.runtime(job.min_nodes)
        assert longest is not None
        base = max(0, min(job.preferred, free_until(now + max(longest, _limit_on(job, job.min_nodes, speedup))), cap))
        pref, least = job.preferred, job.min_nodes
        widest = mates.widest(self.mate_candidates, self.max_mates)
        if base + widest < least or now + work / speedup(min(pref, base + widest)) > mates.latest(
            self.mate_candidates
        )[0]:
            return False  # even the widest set, on what the map leaves it, cannot host it
        for first_end, lend in mates.by_end(self.mate_candidates, self.max_mates):
            n = min(base + lend, pref)
            if n >= least and now + work / speedup(n) <= first_end:
                break
        else:
            return False  # no set's members all end after it (the first test below)
        spans: dict[tuple[float, float], int] = {}

        def free_in(a: float, b: float) -> int:
            if a == now:
                return free_until(b)
            if (a, b) not in spans:
                spans[a, b] = prof.min_free(a, b)
            return spans[a, b]

        def fits(chosen: tuple[_Mate, ...], by_limit: tuple[tuple[int, float], ...], n: int, run: float) -> bool:
            lack = n - base
            lent = []
            for m in chosen:
                k = min(lack, m.lend)
                lack -= k
                lent.append(max(1, k))
            stop = now + (max(_limit_on(job, n, speedup), run))
            start, need = now, 0
            for pos, until in by_limit:  # lent nodes come back at the mates' limits
                until = max(until, now)
                until = min(until, stop)
                if until > start:
                    if free_in(start, until) < need:
                        return False
                    start = until
                need += lent[pos]
            return stop <= start or free_in(start, stop) >= need

        for chosen, lend, first_end, by_limit in mates.sets(self.mate_candidates, self.max_mates):
            n = base + lend
            n = min(n, pref)
            if n < least:
                continue
            run = work / speedup(n)
            if now + run <= first_end and fits(chosen, by_limit, n, run):
                return True
        return False

    def _give_back_settled(
        self,
        i: int,
        entries: list[tuple[object, bool]],
        prof: FreeProfile,
        free: int,
        lenders: list[tuple[RunningView, int]],
        mates: _Mates | None,
        now: float,
    ) -> bool:
        """Whether the reservations of the entries from `i` on can no longer change what
        goes back to lenders: there is no give-back on this pass, no lender could get its
        nodes back even on the map as it is, or none of those entries can start before the
        last such lender's limit (nor now)."""
        if free <= 0 or not lenders or self._promised or (mates is not None and mates.used):
            return True
        ends = [
            r.estimated_end
            for r, before in lenders
            if before - r.size <= free and before - r.size <= prof.min_free(now, r.estimated_end)
        ]
        if not ends:
            return True
        # None of them reserves fewer nodes than this. A lender past its limit counts as
        # ending now: the map at `now` itself decides.
        need = min(e.requested if is_req else e.start_nodes for e, is_req in entries[i:])  # type: ignore[attr-defined]
        first = prof.first_with(need, now)
        return first > now and first >= max(ends)

    def _keep_promise(
        self, job: PendingView, n: int, prof: FreeProfile, free: int, incoming: int, out: list[Decision], now: float
    ) -> int | None:
        """Start (or keep holding nodes for) a job whose mates were shrunk for it: the paper
        shrinks the mates and starts the job in one step; here the two fall on two passes,
        and weighing the job afresh in between would undo the plan. Kept while the map
        (the reservations of jobs ahead included) still leaves it the nodes; lapses when
        they did not come back (a refused shrink) or were taken. Idle nodes left, or None."""
        run = PendingPrediction(job).runtime(n)
        assert run is not None
        limit = limit_at(job, n)  # on the n nodes it starts on: the limit the core enforces
        hold = math.inf if limit is None else max(run, float(limit))
        if min(prof.min_free(now, now + hold), free + incoming) < n:
            return None
        prof.reserve(now, now + hold, n)
        if free >= n:
            out.append(Start(job.job_id, n))
            return free - n
        self._promised[job.job_id] = n
        return free - min(free, n)

    @staticmethod
    def _start_if_fits(job: PendingView, prof: FreeProfile, free: int, now: float, out: list[Decision]) -> int:
        need = job.preferred if job.kind is JobKind.MALLEABLE else job.start_nodes
        if free < need:
            return 0
        at_need = limit_at(job, need)  # the longest of the sizes it may start on
        dur = math.inf if at_need is None else float(at_need)
        usable = min(free, prof.min_free(now, now + dur))
        if usable < need:
            return 0
        n = need if job.kind is JobKind.MALLEABLE else start_size(job, usable)
        assert n is not None
        out.append(Start(job.job_id, n))
        prof.reserve(now, now + _held(job, n, need, dur), n)
        return n

    # ---- Listing 1: the malleable placement of one job ----------------------------------------
    def _malleable(
        self,
        job: PendingView,
        ts: float,
        prof: FreeProfile,
        free: int,
        incoming: int,
        spare: int,
        mates: _Mates,
        out: list[Decision],
        now: float,
    ) -> tuple[bool, int]:
        """Place a malleable job that cannot start statically now, if that improves its
        predicted end: on fewer free nodes, or with mates. (placed?, idle nodes left).
        `spare`: idle or incoming nodes promised to jobs further down, not to be borrowed."""
        pp = self._traits_for(job)[5]
        if pp is None:
            return False, free  # no prediction: static placement only
        static = pp.runtime(job.preferred)
        assert static is not None
        static_end = ts + static
        # The most nodes it could start on now, idle, incoming and lent together; runtimes
        # fall as nodes grow (both speedup models), so if even that does not end before the
        # static start would, nothing below can: most of a deep queue stops here.
        reach = min(job.preferred, max(0, free + incoming - spare) + mates.widest(self.mate_candidates, self.max_mates))
        if reach < job.min_nodes:
            return False, free
        fastest = pp.runtime(reach)
        assert fastest is not None
        if now + fastest >= static_end:
            return False, free
        longest = pp.runtime(job.min_nodes)
        assert longest is not None

        def hold(n: int, run: float) -> float:
            """How long the map keeps the job's nodes if it starts on n of them: its limit
            there (scaled by its model, the core's rule: on fewer nodes than preferred it may
            run longer, the paper's updated requested time), or longer if predicted."""
            limit = limit_at(job, n)
            return math.inf if limit is None else max(run, float(limit))

        # The most nodes (up to preferred) the map leaves it for as long as it runs on them:
        # fewer nodes, a longer run, a longer window to keep free -- until that settles.
        n = job.preferred
        while n >= job.min_nodes:
            run = pp.runtime(n)
            assert run is not None
            # Nodes really idle or on their way back: a job past its limit but still
            # running counts as ending now on the map, but nobody can start on its nodes.
            room = min(prof.min_free(now, now + hold(n, run)), free + incoming - spare)
            if room >= n:
                if now + run >= static_end:
                    break  # no better than waiting; mates (more nodes) might be
                prof.reserve(now, now + hold(n, run), n)
                if free >= n:
                    out.append(Start(job.job_id, n))
                    return True, free - n
                return True, 0  # it waits for nodes coming back, holding the idle ones
            n = room
        # Mates lend the rest; the map's own nodes are counted for the longest possible run.
        base = max(0, min(job.preferred, prof.min_free(now, now + hold(job.min_nodes, longest)), free + incoming - spare))
        static = float(job.time_limit) if job.time_limit is not None else math.inf
        static_run = pp.runtime(job.preferred)
        assert static_run is not None
        with_lent: dict[int, float] = {0: static_end}  # nothing lent: the static start

        def static_end_with(lent: int) -> float:
            """The static end if `lent` more nodes were idle from now on: what the job
            will compare with once its mates' nodes are back, so lending for it is only
            worth it if the reduced start still wins then."""
            if lent not in with_lent:
                need = job.preferred - lent
                ts_lent = now if need <= 0 else prof.earliest(need, static)
                with_lent[lent] = ts_lent + static_run
            return with_lent[lent]

        choice = self._pick_mates(job, pp, base, static_end_with, hold, prof, mates, now)
        if choice is None:
            return False, free
        n_new, lent = choice
        run = pp.runtime(n_new)
        assert run is not None
        for m, k in lent:
            prof.reserve(now, m.job.estimated_end, -k)
        prof.reserve(now, now + hold(n_new, run), n_new)
        for m, k in lent:
            mates.take(m)
            out.append(Shrink(m.job.job_id, k))
        self._promised[job.job_id] = n_new
        return True, free - min(free, base)  # the idle nodes it counts on are its

    def _pick_mates(
        self,
        job: PendingView,
        pp: PendingPrediction,
        base: int,
        static_end_with: Callable[[int], float],
        hold: Callable[[int, float], float],
        prof: FreeProfile,
        mates: _Mates,
        now: float,
    ) -> tuple[int, list[tuple[_Mate, int]]] | None:
        """The mate set of least total penalty (Eq. 1) under Eqs. 2-3 and the paper's
        constraints, as (new job's size, [(mate, nodes lent)]), or None.

        A set must also fit the map by time limits: the lent nodes are free from now until
        the mate's limit, and the new job keeps all its nodes until its own -- which must
        not push back a reservation made ahead of it (predictions say it ends first; limits
        are what every other job was promised on)."""
        spans: dict[tuple[float, float], int] = {}

        def free_in(a: float, b: float) -> int:
            if (a, b) not in spans:
                spans[a, b] = prof.min_free(a, b)
            return spans[a, b]

        def fits_map(n_new: int, lent: list[tuple[_Mate, int]], run: float) -> bool:
            end = now + hold(n_new, run)
            start, credit = now, sum(k for _, k in lent)
            for m, k in sorted(lent, key=lambda mk: mk[0].job.estimated_end):
                until = min(max(m.job.estimated_end, now), end)
                if until > start:
                    if free_in(start, until) + credit < n_new:
                        return False
                    start = until
                credit -= k
            return end <= start or free_in(start, end) + credit >= n_new

        cands = mates.ranked[: self.mate_candidates]
        top = sorted((m.lend for m in cands), reverse=True)[: self.max_mates]
        if not cands or base + sum(top) < job.min_nodes:
            return None  # even the widest lenders cannot make room
        widest = min(job.preferred, base + sum(top))
        fastest = pp.runtime(widest)
        assert fastest is not None
        if now + fastest >= static_end_with(0):
            return None  # even the most nodes mates could lend do not beat waiting
        # A mate predicted to end before the new job could possibly end can never host it.
        cands = [m for m in cands if m.end >= now + fastest]
        top = sorted((m.lend for m in cands), reverse=True)[: self.max_mates]
        if not cands or base + sum(top) < job.min_nodes:
            return None
        # Past the last mate's limit and until the new job's own (at least), lent nodes
        # count for nothing: the map alone must leave it its smallest size there.
        last = max(m.job.estimated_end for m in cands)
        # (Its widest size holds its nodes the shortest: a necessary condition for every set.)
        shortest = now + hold(widest, fastest)
        if last < shortest and free_in(max(last, now), shortest) < job.min_nodes:
            return None
        cutoff = mates.cutoff
        best: tuple[float, int, list[int], list[tuple[_Mate, int]]] | None = None

        def evaluate(chosen: list[_Mate]) -> None:
            nonlocal best
            n_new = min(job.preferred, base + sum(m.lend for m in chosen))
            if n_new < job.min_nodes:
                return
            lack = n_new - base
            lent: list[tuple[_Mate, int]] = []
            for m in chosen:  # lowest penalty lends first
                k = min(m.lend, lack)
                if k == 0:
                    return  # a mate lending nothing: the smaller set covers this
                lent.append((m, k))
                lack -= k
            run = pp.runtime(n_new)
            assert run is not None
            end = now + run
            # Reduced, it must also beat waiting with the lent nodes idle, which is what
            # the job weighs once they are back; on its preferred size it simply starts.
            if end >= static_end_with(0 if n_new == job.preferred else n_new - base):
                return  # no better than waiting
            if any(m.end < end for m, _ in lent):
                return  # the new job must finish inside its mates' allocation
            if not fits_map(n_new, lent, run):
                return
            total = 0.0
            for m, k in lent:
                new_end = m.end_if_lent(k, end)
                assert m.job.time_limit is not None
                p = (new_end - _submitted(m.job)) / m.job.time_limit  # Eq. 4
                if p >= cutoff:
                    return  # Eq. 2: p < MAX_SLOWDOWN
                total += p
            ids = [m.job.job_id for m, _ in lent]
            if best is None or (total, -n_new, ids) < (best[0], -best[1], best[2]):
                best = (total, n_new, ids, lent)

        # search is handed itself rather than calling itself by name: a nested function
        # naming itself is held by its own closure cell, a reference cycle per pass (with
        # everything this frame's closures hold) left for the cycle collector.
        def search(start: int, chosen: list[_Mate], bound: float, again: _Search) -> None:
            for i in range(start, len(cands)):
                m = cands[i]
                if best is not None and bound + m.base >= best[0]:
                    break  # penalties are at least the base: nothing better from here on
                chosen.append(m)
                evaluate(chosen)
                if len(chosen) < self.max_mates:
                    again(i + 1, chosen, bound + m.base, again)
                chosen.pop()

        search(0, [], 0.0, search)
        if best is None:
            return None
        return best[1], best[3]

    def _mates(self, snap: Snapshot) -> _Mates:
        """Eligible mates, lowest current slowdown first, cut at MAX_SLOWDOWN."""
        now = snap.now
        interval = self.min_resize_interval
        dynamic = self.dynamic_max_slowdown
        # Only the dynamic cut-off needs every running job's predicted slowdown.
        preds: list[tuple[RunningView, WorkProgress, float, float, int]] = []
        for r, lend, last_resize, replayed, submitted, limit, _, _ in self._running(snap.running).mates:
            if lend >= 1 and last_resize is not None and now - last_resize < interval:
                lend = 0  # resized too recently (`resizable`'s time test)
            if lend < 1 and not dynamic:
                continue
            assert replayed is not None
            end = end_at(replayed, now)  # RunningPrediction(r, now, replayed).end
            preds.append((r, replayed, end, (end - submitted) / limit, lend))
        if dynamic:
            cutoff = sum(p[3] for p in preds) / len(preds) if preds else math.inf
        else:
            cutoff = self.max_slowdown
        out = [
            _Mate(r, replayed, now, slowdown, lend, end)
            for r, replayed, end, slowdown, lend in preds
            if lend >= 1 and slowdown < cutoff
        ]
        out.sort(key=lambda m: (m.base, m.job.job_id))
        return _Mates(out, cutoff)

    def _running(self, running: tuple[RunningView, ...]) -> _Running:
        """The running jobs' time-free facts: kept while the snapshot's tuple of views is the
        same one (a pass asks more than once), each view's while the view is: a job's
        history is replayed once per view, not on every pass."""
        last = self._run_last
        if last is not None and last.views is running:
            return last
        cache = self._run_info
        if len(cache) > 2 * len(running) + 64:  # bounded at O(running), now and then
            cache = self._run_info = {id(r): cache[id(r)] for r in running if id(r) in cache and cache[id(r)][0] is r}
        mates: list[_RunInfo] = []
        lenders: list[_RunInfo] = []
        releases: list[tuple[float, int]] = []
        dynamic = self.dynamic_max_slowdown
        for r in running:
            info = cache.get(id(r))
            if info is None or info.view is not r:
                info = cache[id(r)] = self._run_info_of(r)
            if info.replayed is not None and (info.lend >= 1 or dynamic):
                mates.append(info)
            if r.size < info.before and info.lend >= 0:
                lenders.append(info)
            if info.release:
                releases += info.release
        lends = sorted((info.lend for info in mates if info.lend >= 1), reverse=True)
        self._run_last = _Running(running, mates, lenders, sum(lends[: self.max_mates]), releases)
        return self._run_last

    def _run_info_of(self, r: RunningView) -> _RunInfo:
        lend = -1
        if resizable(r, math.inf, self.min_resize_interval):  # but its time test, made per pass
            lend = min(math.floor(self.sharing_factor * r.size), r.size - r.min_nodes)
        replayed = None
        if r.time_limit is not None and not r.ending and (lend >= 1 or self.dynamic_max_slowdown):
            replayed = replay(r)  # only a possible mate's (every job's for the dynamic cut-off)
        limit = math.inf if r.time_limit is None else r.time_limit
        # Clamped to -inf, that is not at all: the map clamps every release to its own now.
        release = running_releases((r,), -math.inf)
        return _RunInfo(r, lend, r.last_resize, replayed, _submitted(r), limit, _before_lending(r), release)

    def _map(self, snap: Snapshot) -> FreeProfile:
        """`profile_of(snap)`, with each running job's release read once per view: the same
        map (FreeProfile clamps releases to its now itself), built on every pass."""
        releases = self._running(snap.running).releases
        return FreeProfile(snap.now, snap.free_nodes + snap.incoming_nodes, releases)

    # ---- nodes back to the jobs that lent them ----------------------------------------------
    def _lenders(self, snap: Snapshot) -> list[tuple[RunningView, int]]:
        """Resizable running jobs below the size they had before lending, with that size."""
        now = snap.now
        interval = self.min_resize_interval
        return [
            (r, before)
            for r, _, last_resize, _, _, _, before, _ in self._running(snap.running).lenders
            if last_resize is None or now - last_resize >= interval
        ]

    @staticmethod
    def _give_back(now: float, prof: FreeProfile, free: int, lenders: list[tuple[RunningView, int]]) -> list[Decision]:
        """Idle nodes back to jobs that lent theirs: all they lent at once (the paper's mate
        gets its cores back whole when the borrower ends), for as long as no reservation needs
        them; those that lent the largest share first. Never a few nodes at a time: each
        resize costs the application a reconfiguration, and trickling nodes back would
        resize a lender again on every pass that frees a handful."""
        out: list[Decision] = []
        for r, before in sorted(lenders, key=lambda rb: (rb[0].size / rb[1], rb[0].job_id)):
            if free <= 0:
                break
            n = before - r.size
            if n <= free and n <= prof.min_free(now, r.estimated_end):  # (the map read only if needed)
                prof.reserve(now, r.estimated_end, n)
                out.append(Grow(r.job_id, n))
                free -= n
        return out


def _held(job: PendingView, n: int, need: int, dur: float) -> float:
    """How long a job started on n nodes keeps them: its limit there, which the core scales
    by its model (`dur`, its limit on the `need` nodes it was planned on, when n is that).
    Wider than planned (a moldable job), it ends sooner: held for the planned, longer
    limit, it would put the reservations behind it later than the nodes really come back,
    and a job backfilled before those could then delay them."""
    if n == need:
        return dur
    limit = limit_at(job, n)
    return math.inf if limit is None else float(limit)


def _limit_on(job: PendingView, n: int, speedup: Callable[[int], float]) -> float:
    """`limit_at(job, n)` (inf: no limit) by the job's speedup already parsed (its
    prediction's): the look-ahead asks it for every size it tries, and reads the limit the
    walk's own search holds nodes for, so that its tests are as tight as that search."""
    limit = job.time_limit
    if limit is None:
        return math.inf
    if job.model is None or n == job.preferred:
        return float(limit)
    return limit * speedup(job.preferred) / speedup(n)


def _before_lending(r: RunningView) -> int:
    """The largest size the job has had (its size before it lent nodes), at most its max."""
    return min(r.max_nodes, max(map(itemgetter(1), r.history), default=r.size))


def _submitted(r: RunningView) -> float:
    return r.start_time if r.submit_time is None else r.submit_time
