"""The GLB applications' bags, in one process: results against the references, and the
bag contracts the runtime relies on (contributions never travel with split work; a
`split(take_all=True)` empties the bag; bags survive pickling), checked by scattering the
work over simulated places at random -- steals, handoffs of leaving places, new places --
and comparing with the sequential run."""

from __future__ import annotations

import pickle
import random
from collections import deque
from fractions import Fraction
from typing import Any

import pytest

from elastic_apps.glb import Problem, run_sequential
from elastic_apps.glb.apps.bc import BCProblem, rmat_graph
from elastic_apps.glb.apps.nqueens import KNOWN_SOLUTIONS, QueensProblem
from elastic_apps.glb.apps.pi import PiProblem
from elastic_apps.glb.apps.uts import (
    REFERENCE_TREES,
    Tree,
    UTSProblem,
    count_recursively,
)


def scattered(problem: Problem[Any, Any], places: int, seed: int) -> Any:
    """Run `problem` over `places` simulated places that steal, leave and join at random."""
    rng = random.Random(seed)
    bags = [problem.initial_work(r, places) or problem.empty_bag() for r in range(places)]
    departed = []

    def travel(bag: Any) -> Any:
        return pickle.loads(pickle.dumps(bag))

    while any(not b.is_empty() for b in bags):
        i = rng.randrange(len(bags))
        bag = bags[i]
        x = rng.random()
        if x < 0.6:
            bag.process(rng.randint(1, problem.granularity))
        elif x < 0.85:
            victim = bags[rng.randrange(len(bags))]
            if victim is not bag and victim.is_splittable():
                loot = victim.split(False)
                assert loot is not None and not loot.is_empty() and not victim.is_empty()
                bag.merge(travel(loot))
        elif x < 0.95 and len(bags) > 1:
            del bags[i]
            if not bag.is_empty():
                loot = bag.split(True)
                assert loot is not None and bag.is_empty()
                bags[rng.randrange(len(bags))].merge(travel(loot))
            partial = problem.new_result()
            bag.submit(partial)
            departed.append(travel(partial))
        else:
            bags.append(problem.empty_bag())
    total = problem.new_result()
    for r in departed:
        total.reduce(r)
    for bag in bags:
        partial = problem.new_result()
        bag.submit(partial)
        total.reduce(partial)
    return total


# ---- UTS ---------------------------------------------------------------------------------
def test_uts_default_tree_has_the_published_size() -> None:
    shape, b0, depth, seed, nodes, leaves = REFERENCE_TREES["default"]
    result, _ = run_sequential(UTSProblem(Tree(shape, b0, depth, seed)))
    assert (result.nodes, result.leaves, result.max_depth) == (nodes, leaves, 6)


@pytest.mark.parametrize("shape,b0,depth,seed", [
    ("fixed", 4.0, 7, 19), ("fixed", 3.0, 8, 5), ("linear", 4.0, 9, 34),
    ("cyclic", 6.0, 4, 502), ("expdec", 4.0, 7, 42),
])
def test_uts_bag_counts_what_a_plain_tree_walk_counts(shape: str, b0: float, depth: int, seed: int) -> None:
    tree = Tree(shape, b0, depth, seed)
    expected = count_recursively(tree)
    result, _ = run_sequential(UTSProblem(tree))
    assert result == expected
    assert scattered(UTSProblem(tree), places=5, seed=seed) == expected


# ---- N-Queens ----------------------------------------------------------------------------
@pytest.mark.parametrize("n", range(1, 11))
def test_nqueens_counts_match_the_known_counts(n: int) -> None:
    result, _ = run_sequential(QueensProblem(n))
    assert result.solutions == KNOWN_SOLUTIONS[n]


@pytest.mark.parametrize("cutoff", [0, 3, 9])
def test_nqueens_scattered_over_places_at_any_task_size(cutoff: int) -> None:
    assert scattered(QueensProblem(9, cutoff), places=4, seed=cutoff).solutions == KNOWN_SOLUTIONS[9]


# ---- Pi ----------------------------------------------------------------------------------
def test_pi_is_bitwise_the_same_however_the_tasks_are_shared() -> None:
    problem = PiProblem(samples=200_003, tasks=37, seed=7)
    reference, _ = run_sequential(problem)
    assert reference.samples == 200_003
    assert abs(reference.pi - 3.14159) < 0.02
    for places, seed in [(1, 1), (3, 2), (8, 3), (5, 4)]:
        result = scattered(problem, places, seed)
        assert (result.hits, result.samples) == (reference.hits, reference.samples)
        assert result.pi.hex() == reference.pi.hex()


# ---- Betweenness centrality --------------------------------------------------------------
def textbook_brandes(adj: tuple[tuple[int, ...], ...]) -> list[Fraction]:
    """Brandes (2001) as printed, with exact arithmetic: the independent reference."""
    n = len(adj)
    bc = [Fraction(0)] * n
    for s in range(n):
        stack: list[int] = []
        preds: list[list[int]] = [[] for _ in range(n)]
        sigma = [0] * n
        sigma[s] = 1
        dist = [-1] * n
        dist[s] = 0
        todo = deque([s])
        while todo:
            v = todo.popleft()
            stack.append(v)
            for w in adj[v]:
                if dist[w] < 0:
                    todo.append(w)
                    dist[w] = dist[v] + 1
                if dist[w] == dist[v] + 1:
                    sigma[w] += sigma[v]
                    preds[w].append(v)
        delta = [Fraction(0)] * n
        while stack:
            w = stack.pop()
            for v in preds[w]:
                delta[v] += Fraction(sigma[v], sigma[w]) * (1 + delta[w])
            if w != s:
                bc[w] += delta[w]
    return bc


@pytest.mark.parametrize("scale,seed", [(4, 1), (6, 2), (7, 3)])
def test_bc_equals_textbook_brandes_exactly(scale: int, seed: int) -> None:
    problem = BCProblem(scale, 8, seed)
    reference = textbook_brandes(rmat_graph(scale, 8, seed))
    result, _ = run_sequential(problem)
    assert result.scores(1 << scale) == reference
    assert scattered(problem, places=4, seed=seed).scores(1 << scale) == reference


def test_rmat_graph_is_a_pure_function_of_its_seed() -> None:
    g = rmat_graph(6, 8, 2)
    assert g == rmat_graph.__wrapped__(6, 8, 2)
    assert g != rmat_graph.__wrapped__(6, 8, 3)
    assert all(v != u for u, adj in enumerate(g) for v in adj)
    assert all(list(adj) == sorted(set(adj)) for adj in g)
