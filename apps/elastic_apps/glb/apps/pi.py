"""Monte-Carlo Pi on the GLB runtime: the fraction of random points of the unit square
that fall in the quarter disc.

Static tasks, as in the seed: the samples are cut into `--tasks` tasks known from the
start and shared out evenly over the initial places. Task i draws its points from its
own generator, seeded with (seed, i), and the result is the *integer* count of hits, so
the estimate 4 * hits / samples is bitwise the same whatever the number of places, the
steals and the resizes: only which place runs a task changes, never what it computes, and
integer addition does not depend on the order of the reduction.

    python -m elastic_apps.glb.apps.pi --samples 10000000 [GLB runtime options]
"""

from __future__ import annotations

import argparse
import random
import sys
from dataclasses import dataclass
from typing import Any

from elastic_apps.glb.bag import Bag, Problem, Result
from elastic_apps.glb.runtime import add_runtime_arguments, main_for


def task_hits(seed: int, task: int, samples: int) -> int:
    """Hits of one task: a pure function of (seed, task, samples)."""
    draw = random.Random((seed << 32) | task).random
    hits = 0
    for _ in range(samples):
        x = draw()
        y = draw()
        if x * x + y * y <= 1.0:
            hits += 1
    return hits


@dataclass
class PiResult(Result):
    hits: int = 0
    samples: int = 0

    def reduce(self, other: PiResult) -> None:
        self.hits += other.hits
        self.samples += other.samples

    @property
    def pi(self) -> float:
        return 4 * self.hits / self.samples if self.samples else 0.0


class PiBag(Bag[PiResult]):
    """Ranges [lo, hi) of task indices still to do, and the hits of the tasks done."""

    __slots__ = ("hits", "last_task_samples", "per_task", "ranges", "samples", "seed", "tasks")

    def __init__(self, seed: int, tasks: int, per_task: int, last: int, ranges: list[list[int]] | None = None) -> None:
        self.seed = seed
        self.tasks = tasks
        self.per_task = per_task
        self.last_task_samples = last
        self.ranges: list[list[int]] = ranges if ranges is not None else []
        self.hits = 0
        self.samples = 0

    def _empty_like(self, ranges: list[list[int]]) -> PiBag:
        return PiBag(self.seed, self.tasks, self.per_task, self.last_task_samples, ranges)

    def __getstate__(self) -> tuple[int, int, int, int, list[list[int]]]:
        return (self.seed, self.tasks, self.per_task, self.last_task_samples, self.ranges)

    def __setstate__(self, state: tuple[int, int, int, int, list[list[int]]]) -> None:
        self.seed, self.tasks, self.per_task, self.last_task_samples, self.ranges = state
        self.hits = self.samples = 0

    def process(self, n: int) -> bool:
        ranges = self.ranges
        while ranges and n > 0:
            n -= 1
            r = ranges[-1]
            task = r[0]
            r[0] += 1
            if r[0] >= r[1]:
                ranges.pop()
            size = self.last_task_samples if task == self.tasks - 1 else self.per_task
            self.hits += task_hits(self.seed, task, size)
            self.samples += size
        return bool(ranges)

    def remaining(self) -> int:
        return sum(hi - lo for lo, hi in self.ranges)

    def split(self, take_all: bool) -> PiBag | None:
        if take_all:
            loot, self.ranges = self.ranges, []
            return self._empty_like(loot)
        if len(self.ranges) >= 2:
            half = len(self.ranges) // 2
            loot, self.ranges = self.ranges[:half], self.ranges[half:]
            return self._empty_like(loot)
        if not self.ranges or self.ranges[0][1] - self.ranges[0][0] < 2:
            return None
        lo, hi = self.ranges[0]
        mid = (lo + hi) // 2
        self.ranges[0][1] = mid
        return self._empty_like([[mid, hi]])

    def merge(self, other: PiBag) -> None:
        self.ranges.extend(other.ranges)

    def is_empty(self) -> bool:
        return not self.ranges

    def is_splittable(self) -> bool:
        return len(self.ranges) >= 2 or (bool(self.ranges) and self.ranges[0][1] - self.ranges[0][0] >= 2)

    def submit(self, result: PiResult) -> None:
        result.reduce(PiResult(self.hits, self.samples))


class PiProblem(Problem[PiBag, PiResult]):
    name = "pi"
    granularity = 1

    def __init__(self, samples: int, tasks: int, seed: int) -> None:
        if samples < 1 or tasks < 1:
            raise ValueError("samples and tasks must be positive")
        self.samples = samples
        self.tasks = min(tasks, samples)
        self.seed = seed
        self.per_task = samples // self.tasks
        self.last = samples - self.per_task * (self.tasks - 1)

    def empty_bag(self) -> PiBag:
        return PiBag(self.seed, self.tasks, self.per_task, self.last)

    def initial_work(self, rank: int, nranks: int) -> PiBag | None:
        lo, hi = rank * self.tasks // nranks, (rank + 1) * self.tasks // nranks
        if lo == hi:
            return None
        return PiBag(self.seed, self.tasks, self.per_task, self.last, [[lo, hi]])

    def new_result(self) -> PiResult:
        return PiResult()

    def report(self, result: PiResult) -> dict[str, Any]:
        return {"pi": result.pi, "pi_hex": result.pi.hex(), "hits": result.hits, "samples": result.samples}


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="elastic_apps.glb.apps.pi", description=__doc__.split("\n\n")[0])
    p.add_argument("--samples", type=int, default=10_000_000, help="random points (default 1e7)")
    p.add_argument("--tasks", type=int, default=1000, help="tasks the samples are cut into (default 1000)")
    p.add_argument("--seed", type=int, default=1, help="random seed (default 1)")
    add_runtime_arguments(p)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return main_for(PiProblem(args.samples, args.tasks, args.seed), args)


if __name__ == "__main__":
    # Import main from the package, not this __main__ module: classes pickle by their path.
    from elastic_apps.glb.apps.pi import main as _main

    sys.exit(_main())
