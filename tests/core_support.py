"""Driving the pure core by hand in tests, the way the daemon and the simulator do."""

from __future__ import annotations

from elastic_protocol.jobspec import JobSpec
from elasticd.core.engine import RESIZABLE, Core
from elasticd.core.events import OrderKind, Submitted
from elasticd.core.job import Job
from elasticd.core.states import JobState


def submit(core: Core, spec: JobSpec, now: float) -> Job:
    """A Submitted event with the id the core expects next; the new job."""
    job_id = core.next_job_id
    core.handle(Submitted(now, job_id, spec))
    return core.job(job_id)


# ---- invariants ------------------------------------------------------------------------


def check_books(core: Core) -> None:
    """Node table vs job hosts, bounds on held hosts, queue order."""
    names = core.nodes.members
    owner = core.nodes.owner
    active = set(core.active_ids)
    pending = core.pending_ids
    held_by: dict[str, int] = {}
    owned_by: dict[int, list[str]] = {}
    for n in names:
        o = owner[n]
        if o is not None:
            owned_by.setdefault(o, []).append(n)
    for jid, job in core.jobs.items():
        owned = owned_by.get(jid, [])
        assert sorted(job.hosts, key=core.nodes.index.__getitem__) == owned, \
            f"job {jid}: hosts {job.hosts}, node table {owned}"
        for h in job.hosts:
            assert h not in held_by, f"{h} held by jobs {held_by[h]} and {jid}"
            held_by[h] = jid
        if job.state.holds_nodes:
            lo, hi, _ = job.bounds
            assert lo <= job.size <= hi, f"job {jid} runs on {job.size}, outside {lo}..{hi}"
            assert jid in active
        else:
            assert job.hosts == [] and jid not in active
        assert (job.state is JobState.PENDING) == (jid in pending)
    for n, o in owner.items():
        assert o is None or o in active, f"{n} owned by job {o}, which holds no nodes"
    allocated = sum(1 for n in names if owner[n] is not None)
    assert allocated <= core.nodes.total
    assert allocated == sum(core.jobs[j].size for j in active)
    # Down nodes nobody holds are neither free nor allocated.
    idle_down = sum(1 for n in core.nodes.down if owner[n] is None)
    assert core.nodes.free_count == core.nodes.total - allocated - idle_down
    assert pending == sorted(pending), "the queue is in submit order"


def check_invariants(core: Core, now: float) -> None:
    """Every invariant of the core, written once; checked after every event in every core
    test (conftest wraps Core.handle) and by the property tests' drivers."""
    check_books(core)
    active = set(core.active_ids)
    for jid, job in core.jobs.items():
        if jid not in active:
            assert job.order is None and not job.leaving, f"job {jid} ended with an order or leaving hosts"
            continue
        lo, hi, _ = job.bounds
        staying = job.size - len(job.leaving)
        assert job.leaving <= set(job.hosts), f"job {jid}: leaving {job.leaving} not among {job.hosts}"
        assert lo <= staying <= hi, f"job {jid}: {staying} hosts staying, outside {lo}..{hi}"
        assert job.size <= hi
        if job.state is JobState.RESIZING:
            assert job.order is not None or job.leaving, f"job {jid} RESIZING without an order or leaving hosts"
        if job.order is not None:
            assert job.state is JobState.RESIZING
            assert job.kind in RESIZABLE
            if job.order.settled is None:
                assert set(job.order.new_hosts) <= set(job.hosts) and not job.leaving
            else:
                assert job.leaving, f"job {jid}: order settled ({job.order.settled}) with nothing to reclaim"
                if job.order.kind is OrderKind.GROW:  # only the hosts started for it are taken back
                    assert job.leaving <= set(job.order.new_hosts)
        if job.order is not None or job.leaving:
            assert not core.can_take_order(job, now)
    check_snapshot(core, now)


def check_snapshot(core: Core, now: float) -> None:
    """The policy's snapshot agrees with the jobs as they are now: a view cached by the core
    must never outlive a change to its job (the driver reads jobs through `core.jobs`,
    which does not drop cached views, so a stale one shows here)."""
    snap = core.snapshot(now)
    assert snap.free_nodes == core.nodes.free_count
    idle_down = sum(1 for n in core.nodes.down if core.nodes.owner_of(n) is None)
    assert snap.free_nodes + sum(core.jobs[j].size for j in core.active_ids) + idle_down == core.nodes.total
    # A pending job the cluster is too small for is in no snapshot, and says why.
    assert [p.job_id for p in snap.pending] == [j for j in core.pending_ids if j not in core.cannot_start]
    capacity = max(core.nodes.total, core.grow_to)
    for jid in core.pending_ids:
        job = core.jobs[jid]
        lo, hi, pref = job.bounds
        assert lo <= pref <= hi, f"job {jid}: range {job.bounds}"
        assert (lo > capacity) == (jid in core.cannot_start), f"job {jid}: min {lo} on {capacity} nodes"
        assert job.reason == core.cannot_start.get(jid), f"job {jid}: reason {job.reason!r}"
        assert lo > capacity or hi <= capacity, f"job {jid}: max {hi} on {capacity} nodes"
    assert [r.job_id for r in snap.running] == core.active_ids
    for view in snap.running:
        job = core.jobs[view.job_id]
        lo, hi, _ = job.bounds
        order = job.order
        shrinking = order.count if order is not None and order.kind is OrderKind.SHRINK and order.settled is None else 0
        expected = (
            job.size - len(job.leaving), lo, hi, job.start_time, core.policy_may_order(job, now), job.last_resize,
            job.ending_as is not None, order is not None or bool(job.leaving), job.requested, job.requested_at,
            len(job.leaving), shrinking,
        )
        actual = (
            view.size, view.min_nodes, view.max_nodes, view.start_time, view.malleable_ready, view.last_resize,
            view.ending, view.resizing, view.requested, view.requested_at, view.leaving, view.shrinking,
        )
        assert actual == expected, f"at {now}: job {view.job_id}'s policy view is stale: {actual} != {expected}"
    assert snap.incoming_nodes == promised_back(core)
    # What Core._pass reads to tell a pass in which no decision could be valid.
    floor = min((core.jobs[j].bounds[0] for j in core.pending_ids), default=None)
    assert sum(core._minima.values()) == core.pending_count
    assert floor is None or core._pending_floor() == floor, f"pending floor {core._pending_floor()}, not {floor}"
    assert core._resizable == {j for j in core.active_ids if core.jobs[j].kind in RESIZABLE}


def promised_back(core: Core) -> int:
    """Nodes held now that are already on their way back: whole jobs being ended, hosts
    being reclaimed, and the counts of shrink orders not answered yet."""
    total = 0
    for jid in core.active_ids:
        job = core.jobs[jid]
        if job.ending_as is not None:
            total += job.size
            continue
        total += len(job.leaving)
        if job.order is not None and job.order.kind is OrderKind.SHRINK and job.order.settled is None:
            total += job.order.count
    return total


def fingerprint(core: Core) -> tuple[object, ...]:
    """Everything a core holds, as plain data: two cores with the same fingerprint decide alike."""
    import json

    from elasticd.core.record import job_state

    jobs = {jid: json.loads(json.dumps(job_state(j))) for jid, j in sorted(core.jobs.items())}
    return (jobs, core.pending_ids, core.active_ids, core.next_job_id, core.next_order_id, core.nodes.members,
            sorted(core.nodes.owner.items()), sorted(core.nodes.down), sorted(core.nodes.gone), core.nodes.free_count,
            {jid: j.bounds for jid, j in core.jobs.items()}, dict(core.cannot_start))
