"""Scheduling evolving jobs that declare their evolution up front: the list-scheduling fit
of `evolving-applications-fit.txt`, made online.

An evolution profile (EP) is a list of steps (duration, nodes). The paper's Algorithm 1
takes the jobs in order and fits each requested EP into the resource EP of those already
placed; the fit (its Algorithm 2) places step after step at the earliest time the nodes
are free, and when a step cannot follow its predecessor at once the predecessor is
*expanded* (it keeps its nodes, waiting) -- at most `expand_limit` times its duration
(noX = 1, 2X = 2, infX = inf) -- while the first step is *delayed* instead, so a job
never waits holding nodes before it has started. The optional compacting pass (2X+c,
infX+c) re-places the steps right to left so that the job ends at the same time but
starts as late as possible, wasting fewer node-seconds.

Online reading (the paper's own suggestion: "each time an application submits a change
... the scheduling algorithm could be re-run with updated information"): every pass
rebuilds the plan. Running jobs come first in the list: a job with a declared profile
occupies what remains of it (its position found from the time it has run and any request
it has open), any other job its size until its limit, and every open request its nodes
from now on. Queued jobs are then fitted in queue order, those without a profile as a
single step (start nodes, time limit), which makes this conservative backfilling for
them; a job whose fitted start is now starts. Requests are granted oldest first, whole
or not at all; one that cannot be granted yet keeps its place in the plan, so queued jobs
never take the nodes it waits for and two jobs that both wait cannot deadlock: they were
fitted one after the other.

Readings where the paper is silent:
- A running profiled job is at the step its elapsed time falls in; with a request open it
  is at the boundary to the first later step of that size. Past the end of its profile it
  holds its nodes until its time limit, as an unprofiled job.
- Moldable and malleable jobs (fit resizes no job itself) take, when they start, as many
  nodes as stay free for their limit, as under conservative backfilling, and are planned
  until their limit on that size (the core's rule, scaled by their model).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from elastic_protocol.jobspec import JobKind
from elasticd.policies.base import (
    Decision,
    PendingView,
    RunningView,
    Snapshot,
    Start,
    grant_requests,
    limit_at,
    start_size,
)
from elasticd.policies.conservative import StartBound
from elasticd.policies.profile import FreeProfile, profile_from_segments

Steps = Sequence[tuple[float, int]]
_NO_ROOM = -(1 << 40)  # free nodes "before now" in a mirrored map: never enough


def base_fit(prof: FreeProfile, steps: Steps, limit: float, t0: float) -> tuple[float, list[float] | None]:
    """Algorithm 2: (start, expanded duration of every step), or (inf, None) if the steps
    can never be placed. Step 1 starts at or after t0."""
    if len(steps) == 1:  # one step: nothing to expand, the earliest window is the answer
        (d, n), = steps
        ts = prof.earliest(n, d, t0)
        return (math.inf, None) if ts == math.inf else (ts, [d])
    ts, durations = _fit(prof, steps, limit, 0, t0)
    if durations is None:
        return math.inf, None
    return ts, durations


def _fit(prof: FreeProfile, steps: Steps, limit: float, i: int, t0: float) -> tuple[float, list[float] | None]:
    """Place steps[i:] with step i at or after t0. On failure, (time the caller should
    retry its own step from, None)."""
    if i == len(steps):
        return t0, []
    d, n = steps[i]
    ts = t0
    while True:
        if ts == math.inf:
            return math.inf, None
        short = prof.last_short(ts, ts + d, n)
        if short is not None:
            ts = short  # placement failed: jump past the last congested segment
            continue
        if i > 0:
            d_prev, n_prev = steps[i - 1]
            earliest_prev = ts - limit * d_prev  # earliest allowed start of the previous step
            if earliest_prev > t0 - d_prev:
                return earliest_prev, None  # the previous step would stretch beyond the limit
            if ts > t0:
                short = prof.last_short(t0, ts, n_prev)
                if short is not None:
                    return short, None  # no room to keep the previous step's nodes meanwhile
        t_tail, tail = _fit(prof, steps, limit, i + 1, ts + d)
        if tail is None:
            ts = t_tail
            continue
        if i > 0:
            return ts, [t_tail - ts, *tail]  # expanded until the next step starts
        # The first step is delayed, never expanded (an unlimited single step just starts).
        return (ts if d == math.inf else t_tail - d), [d, *tail]


def compact(prof: FreeProfile, steps: Steps, limit: float, start: float, durations: list[float]) -> tuple[float, list[float]]:
    """The compacting pass: the same fit run backwards in time from the completion found,
    so the last step ends then and earlier steps are placed as late as they fit. Keeps
    the base placement if the mirrored one does not fit after `prof.now`."""
    end = start + sum(durations)
    if end == math.inf:
        return start, durations
    segs = [(t, f) for t, f in prof.segments() if t < end]
    mirrored: list[tuple[float, int]] = []
    for k in range(len(segs) - 1, -1, -1):
        seg_end = segs[k + 1][0] if k + 1 < len(segs) else end
        mirrored.append((end - seg_end, segs[k][1]))
    mirrored.append((end - prof.now, _NO_ROOM))
    mirror = profile_from_segments(0.0, _merge_equal_times(mirrored))
    m_start, m_durations = base_fit(mirror, list(reversed(steps)), limit, 0.0)
    if m_durations is None:
        return start, durations
    total = sum(m_durations)
    new_start = end - m_start - total
    if new_start < prof.now or new_start < start:
        return start, durations
    return new_start, list(reversed(m_durations))


def _merge_equal_times(segs: list[tuple[float, int]]) -> list[tuple[float, int]]:
    out: list[tuple[float, int]] = []
    for t, f in segs:
        if out and out[-1][0] == t:
            out[-1] = (t, f)
        else:
            out.append((t, f))
    return out


def remaining_steps(r: RunningView, now: float) -> list[tuple[float, int]]:
    """What a running job will still occupy, from now on, as steps (duration, nodes)."""
    want = r.size + r.requested
    if r.evolution and r.kind is JobKind.EVOLVING:
        elapsed = now - r.start_time
        t = 0.0
        for k, (d, n) in enumerate(r.evolution):
            if elapsed < t + d:
                if r.requested > 0 and n != want:
                    later = [j for j in range(k + 1, len(r.evolution)) if r.evolution[j][1] == want]
                    if later:
                        j = later[0]
                        return [(r.evolution[j][0], want), *r.evolution[j + 1 :]]
                return [(t + d - elapsed, want), *r.evolution[k + 1 :]]
            t += d
    end = r.estimated_end
    return [(end - now if end != math.inf else math.inf, want)]


def plan_of(snap: Snapshot) -> FreeProfile:
    """The map with every running job's remaining occupancy (and open request) on it."""
    now = snap.now
    changes: list[tuple[float, int]] = []
    free_now = snap.free_nodes + snap.incoming_nodes
    for r in snap.running:
        if r.ending:
            continue  # all its nodes are in incoming_nodes
        held = r.size - r.shrinking  # what the map counts as taken now; the rest is incoming
        t = now
        for k, (d, n) in enumerate(remaining_steps(r, now)):
            if k == 0:
                n = max(0, n - r.shrinking)
                free_now -= n - held  # an open request takes its nodes from now on
            else:
                changes.append((t, held - n))
            held = n
            t += d
            if t == math.inf:
                break
        if t != math.inf:
            changes.append((t, held))
    return FreeProfile(now, free_now, changes)


class EvolvingFit:
    name = "fit"
    stateless = True  # see Policy

    def __init__(self, expand_limit: float = 1.0, compact: bool = False) -> None:
        self.expand_limit = expand_limit
        self.compact = compact

    def decide(self, snap: Snapshot) -> list[Decision]:
        now = snap.now
        prof = plan_of(snap)
        grants = grant_requests(snap, snap.free_nodes)
        out: list[Decision] = list(grants)
        free = snap.free_nodes - sum(g.by for g in grants)
        pending = snap.pending
        all_steps = [self.steps_of(j) for j in pending]
        bound = StartBound(now, [st[0][1] for st in all_steps], [st[0][0] for st in all_steps])
        for i, job in enumerate(pending):
            if bound.exhausted(i, free, prof):
                break  # nothing from here on can start now
            steps = all_steps[i]
            start, durations = base_fit(prof, steps, self.expand_limit, now)
            if durations is None:
                continue  # can never be placed (e.g. nodes held for ever)
            if self.compact and len(steps) > 1:
                start, durations = compact(prof, steps, self.expand_limit, start, durations)
            if start == now and free >= steps[0][1]:
                n = steps[0][1]
                if len(steps) == 1 and job.kind in (JobKind.MOLDABLE, JobKind.MALLEABLE):
                    n = start_size(job, min(free, prof.min_free(now, now + steps[0][0]))) or n
                    # Planned for its limit on the n nodes it takes, which the core scales
                    # by its model (shorter than on its fewest, so inside the window just
                    # checked): planned to the longer one, the map would hold its nodes
                    # after the core ends it, and a later job could take nodes the head
                    # would get then.
                    limit = limit_at(job, n)
                    steps = [(math.inf if limit is None else float(limit), n)]
                    durations = [steps[0][0]]
                out.append(Start(job.job_id, n))
                free -= n
            t = start
            for (_, n), d in zip(steps, durations):
                prof.reserve(t, t + d, n)
                t += d
        return out

    @staticmethod
    def steps_of(job: PendingView) -> list[tuple[float, int]]:
        if job.evolution and job.kind is JobKind.EVOLVING:
            return list(job.evolution)
        # The limit at the size it starts on, by the job's model (the core's rule).
        limit = limit_at(job, job.start_nodes)
        return [(math.inf if limit is None else float(limit), job.start_nodes)]
