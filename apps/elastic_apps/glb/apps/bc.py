"""Betweenness Centrality on the GLB runtime: Brandes' algorithm on a seeded R-MAT graph.

Static tasks, as in the seed: a task is one source vertex; its breadth-first search and
dependency accumulation add that source's share to every vertex's score. Every place
builds the same graph from the seed (R-MAT with the SSCA2 probabilities a=0.55, b=0.1,
c=0.1, d=0.25; directed, without self loops or repeated edges).

Scores are exact rationals, so the result is the same, to the last bit, whatever the
order in which places add their shares (floating-point sums would differ with the number
of places). Per source, with L the least common multiple of the shortest-path counts
sigma, Q(v) = L / sigma(v) + sum of Q(w) over v's successors w on shortest paths is an
integer, and the dependency is delta(v) = (sigma(v) Q(v) - L) / L; a bag keeps its sum
over one common denominator, so almost all the arithmetic is on integers.

    python -m elastic_apps.glb.apps.bc --scale 8 --edge-factor 8 [GLB runtime options]
"""

from __future__ import annotations

import argparse
import hashlib
import math
import random
import sys
from dataclasses import dataclass, field
from fractions import Fraction
from functools import cache
from typing import Any

from elastic_apps.glb.bag import Bag, Problem, Result
from elastic_apps.glb.runtime import add_runtime_arguments, main_for


@cache
def rmat_graph(scale: int, edge_factor: int, seed: int) -> tuple[tuple[int, ...], ...]:
    """Adjacency lists (sorted) of the R-MAT graph with 2**scale vertices."""
    rng = random.Random(seed)
    n = 1 << scale
    a, b, c = 0.55, 0.1, 0.1
    edges: set[tuple[int, int]] = set()
    for _ in range(edge_factor * n):
        u = v = 0
        for bit in range(scale):
            r = rng.random()
            if r < a:
                pass
            elif r < a + b:
                v |= 1 << bit
            elif r < a + b + c:
                u |= 1 << bit
            else:
                u |= 1 << bit
                v |= 1 << bit
        if u != v:
            edges.add((u, v))
    adj: list[list[int]] = [[] for _ in range(n)]
    for u, v in edges:
        adj[u].append(v)
    return tuple(tuple(sorted(x)) for x in adj)


def source_dependencies(adj: tuple[tuple[int, ...], ...], s: int) -> tuple[int, list[tuple[int, int]]]:
    """(L, [(v, L * delta_s(v)) for every v != s with a non-zero dependency])."""
    n = len(adj)
    dist = [-1] * n
    sigma = [0] * n
    dist[s] = 0
    sigma[s] = 1
    order = [s]
    i = 0
    while i < len(order):
        v = order[i]
        i += 1
        dv = dist[v] + 1
        sv = sigma[v]
        for w in adj[v]:
            if dist[w] < 0:
                dist[w] = dv
                order.append(w)
            if dist[w] == dv:
                sigma[w] += sv
    lcm = 1
    for v in order:
        lcm = math.lcm(lcm, sigma[v])
    q = [0] * n
    out: list[tuple[int, int]] = []
    for v in reversed(order):
        dv = dist[v] + 1
        total = lcm // sigma[v]
        for w in adj[v]:
            if dist[w] == dv:
                total += q[w]
        q[v] = total
        if v != s:
            num = sigma[v] * total - lcm
            if num:
                out.append((v, num))
    return lcm, out


@dataclass
class BCResult(Result):
    """Scores as numerators over one common denominator."""

    numerators: list[int] = field(default_factory=list)
    denominator: int = 1

    def add(self, lcm: int, deps: list[tuple[int, int]], n: int) -> None:
        if not self.numerators:
            self.numerators = [0] * n
        den = self.denominator
        if den % lcm:
            new = math.lcm(den, lcm)
            k = new // den
            self.numerators = [x * k for x in self.numerators]
            self.denominator = den = new
        k = den // lcm
        nums = self.numerators
        for v, num in deps:
            nums[v] += num * k

    def reduce(self, other: BCResult) -> None:
        if not other.numerators:
            return
        if not self.numerators:
            self.numerators = list(other.numerators)
            self.denominator = other.denominator
            return
        new = math.lcm(self.denominator, other.denominator)
        a, b = new // self.denominator, new // other.denominator
        self.numerators = [x * a + y * b for x, y in zip(self.numerators, other.numerators)]
        self.denominator = new

    def scores(self, n: int) -> list[Fraction]:
        if not self.numerators:
            return [Fraction(0)] * n
        return [Fraction(x, self.denominator) for x in self.numerators]


class BCBag(Bag[BCResult]):
    """Ranges [lo, hi) of source vertices still to do, and the scores of those done."""

    __slots__ = ("partial", "problem", "ranges")

    def __init__(self, problem: BCProblem | None, ranges: list[list[int]] | None = None) -> None:
        self.problem = problem
        self.ranges: list[list[int]] = ranges if ranges is not None else []
        self.partial = BCResult()

    def __getstate__(self) -> list[list[int]]:
        return self.ranges  # work only; the receiving place has the graph

    def __setstate__(self, ranges: list[list[int]]) -> None:
        self.problem = None
        self.ranges = ranges
        self.partial = BCResult()

    def process(self, n: int) -> bool:
        assert self.problem is not None, "process() on a bag that was only meant to be merged"
        adj = self.problem.graph
        ranges = self.ranges
        while ranges and n > 0:
            n -= 1
            r = ranges[-1]
            s = r[0]
            r[0] += 1
            if r[0] >= r[1]:
                ranges.pop()
            lcm, deps = source_dependencies(adj, s)
            self.partial.add(lcm, deps, len(adj))
        return bool(ranges)

    def split(self, take_all: bool) -> BCBag | None:
        if take_all:
            loot, self.ranges = self.ranges, []
            return BCBag(None, loot)
        if len(self.ranges) >= 2:
            half = len(self.ranges) // 2
            loot, self.ranges = self.ranges[:half], self.ranges[half:]
            return BCBag(None, loot)
        if not self.ranges or self.ranges[0][1] - self.ranges[0][0] < 2:
            return None
        lo, hi = self.ranges[0]
        mid = (lo + hi) // 2
        self.ranges[0][1] = mid
        return BCBag(None, [[mid, hi]])

    def merge(self, other: BCBag) -> None:
        self.ranges.extend(other.ranges)

    def is_empty(self) -> bool:
        return not self.ranges

    def is_splittable(self) -> bool:
        return len(self.ranges) >= 2 or (bool(self.ranges) and self.ranges[0][1] - self.ranges[0][0] >= 2)

    def submit(self, result: BCResult) -> None:
        result.reduce(self.partial)


def scores_checksum(scores: list[Fraction]) -> str:
    """SHA-256 of the exact scores written as p/q in lowest terms, vertex by vertex."""
    text = ",".join(f"{x.numerator}/{x.denominator}" for x in scores)
    return hashlib.sha256(text.encode()).hexdigest()


class BCProblem(Problem[BCBag, BCResult]):
    name = "bc"
    granularity = 1

    def __init__(self, scale: int, edge_factor: int, seed: int, print_scores: bool = False) -> None:
        if not 1 <= scale <= 20 or edge_factor < 1:
            raise ValueError("scale must be in [1, 20] and the edge factor positive")
        self.scale = scale
        self.edge_factor = edge_factor
        self.seed = seed
        self.print_scores = print_scores

    @property
    def graph(self) -> tuple[tuple[int, ...], ...]:
        return rmat_graph(self.scale, self.edge_factor, self.seed)

    def empty_bag(self) -> BCBag:
        return BCBag(self)

    def initial_work(self, rank: int, nranks: int) -> BCBag | None:
        n = 1 << self.scale
        lo, hi = rank * n // nranks, (rank + 1) * n // nranks
        return BCBag(self, [[lo, hi]]) if lo < hi else None

    def new_result(self) -> BCResult:
        return BCResult()

    def report(self, result: BCResult) -> dict[str, Any]:
        n = len(self.graph)
        scores = result.scores(n)
        top = sorted(range(n), key=lambda v: (-scores[v], v))[:5]
        out: dict[str, Any] = {
            "vertices": n,
            "edges": sum(len(a) for a in self.graph),
            "checksum": scores_checksum(scores),
            "top": [[v, float(scores[v])] for v in top],
        }
        if self.print_scores:
            out["scores"] = [f"{x.numerator}/{x.denominator}" for x in scores]
        return out


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="elastic_apps.glb.apps.bc", description=__doc__.split("\n\n")[0])
    p.add_argument("--scale", type=int, default=8, help="2**scale vertices (default 8)")
    p.add_argument("--edge-factor", type=int, default=8, help="edges drawn per vertex (default 8)")
    p.add_argument("--seed", type=int, default=2, help="graph seed (default 2, as in the seed paper)")
    p.add_argument("--print-scores", action="store_true", help="print every vertex's exact score")
    add_runtime_arguments(p)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return main_for(BCProblem(args.scale, args.edge_factor, args.seed, args.print_scores), args)


if __name__ == "__main__":
    # Import main from the package, not this __main__ module: classes pickle by their path.
    from elastic_apps.glb.apps.bc import main as _main

    sys.exit(_main())
