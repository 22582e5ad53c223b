"""The node table against a plain per-node model, under random allocations, partial and
whole releases, claims, nodes going down and up, and nodes leaving and joining the cluster
(the allocation shrinking and growing): free nodes, owners and what a job's end frees must
agree after every step."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from elasticd.core.nodes import NodeTable, _runs
from elasticd.errors import InvalidTransition

N = 24
JOBS = 4

# (operation, job, count or node index, take from which end of the job's hosts)
steps = st.lists(
    st.tuples(
        st.sampled_from(["allocate", "release", "release_all", "down", "up", "claim", "leave", "join"]),
        st.integers(1, JOBS),
        st.integers(0, N - 1),
        st.booleans(),
    ),
    max_size=60,
)


@settings(max_examples=300, deadline=None)
@given(steps)
def test_node_table_agrees_with_a_per_node_model(ops: list[tuple[str, int, int, bool]]) -> None:
    names = [f"n{i}" for i in range(N)]
    t = NodeTable(names)
    owner: dict[str, int | None] = dict.fromkeys(names)
    down: set[str] = set()
    gone: set[str] = set()
    held: dict[int, list[str]] = {j: [] for j in range(1, JOBS + 1)}
    extra = [f"x{i}" for i in range(N)]  # nodes a grown allocation brings, in the order they join
    for op, job, k, tail in ops:
        free = [n for n in names if owner[n] is None and n not in down and n not in gone]
        if op in ("down", "up", "claim") and names[k] in gone:
            continue  # the core never reports on nodes that left
        if op == "allocate":
            count = min(k, len(free))
            got = t.allocate(job, count)
            assert got == free[:count]  # lowest-numbered free nodes first
            for n in got:
                owner[n] = job
            held[job].extend(got)
        elif op == "release":
            mine = held[job]
            part = mine[-k:] if tail else mine[: k // 2]
            t.release(job, part)
            for n in part:
                owner[n] = None
            held[job] = [n for n in mine if n not in set(part)]
        elif op == "release_all":
            assert t.release_all(job) == len(held[job])
            for n in held[job]:
                owner[n] = None
            held[job] = []
        elif op == "down":
            t.mark_down(names[k])
            down.add(names[k])
        elif op == "up":
            t.mark_up(names[k])
            down.discard(names[k])
        elif op == "claim":
            n = names[k]
            if owner[n] is None:
                t.claim(job, [n])
                owner[n] = job
                held[job].append(n)
            else:
                with pytest.raises(InvalidTransition):
                    t.claim(job, [n])
        elif op == "leave":
            n = names[k]
            if owner[n] is None and n not in gone:
                t.remove([n])
                gone.add(n)
                down.discard(n)
            else:
                with pytest.raises(InvalidTransition):
                    t.remove([n])
        elif op == "join":
            n = names[k] if names[k] in gone else extra[len(names) - N]
            t.add([n])
            if n in gone:
                gone.discard(n)
            else:
                names.append(n)
                owner[n] = None
            with pytest.raises(InvalidTransition):
                t.add([n])
        free = [n for n in names if owner[n] is None and n not in down and n not in gone]
        assert t.total == len(names) - len(gone) and t.members == [n for n in names if n not in gone]
        expect_free = free
        assert t.free_hosts() == expect_free
        assert t.free_count == len(expect_free)
        assert t.owner == {n: o for n, o in owner.items() if n not in gone}
    # Every job's end frees exactly what it still holds, and then every node is free.
    for job, mine in held.items():
        assert t.release_all(job) == len(mine)
    assert t.free_hosts() == [n for n in names if n not in down and n not in gone]


def test_releasing_a_node_the_job_does_not_hold_is_refused_and_changes_nothing() -> None:
    t = NodeTable([f"n{i}" for i in range(6)])
    t.allocate(1, 3)
    t.allocate(2, 2)
    with pytest.raises(InvalidTransition, match="n3, which it does not hold"):
        t.release(1, ["n2", "n3"])
    with pytest.raises(InvalidTransition, match="twice"):
        t.release(1, ["n2", "n2"])
    assert t.free_hosts() == ["n5"]
    assert t.release_all(1) == 3
    assert t.free_hosts() == ["n0", "n1", "n2", "n5"]


@given(st.sets(st.integers(0, 200)))
def test_runs_cover_exactly_the_indices_in_maximal_consecutive_stretches(idx: set[int]) -> None:
    runs = _runs(sorted(idx))
    assert [i for s, e in runs for i in range(s, e)] == sorted(idx)
    assert all(e < s2 for (_, e), (s2, _) in itertools.pairwise(runs))  # maximal: a gap between runs
