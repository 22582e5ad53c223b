"""N-Queens on the GLB runtime: how many ways to place N non-attacking queens.

A task is a board with the first `row` rows filled (bit masks of the columns and both
diagonals under attack). Tasks near the root are expanded into one task per safe square
of the next row, so the tree of tasks spreads over the places (dynamic tasks, like UTS);
boards with `--sequential-rows` rows or fewer left are counted in one go by a plain
recursive search, which keeps a task around a millisecond.

Known counts (OEIS A000170): 1, 0, 0, 2, 10, 4, 40, 92, 352, 724, 2680, 14200, 73712,
365596, 2279184, 14772512, 95815104, 666090624 for N = 1..18.

    python -m elastic_apps.glb.apps.nqueens -n 12 [GLB runtime options]
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from typing import Any

from elastic_apps.glb.bag import Bag, Problem, Result
from elastic_apps.glb.runtime import add_runtime_arguments, main_for

KNOWN_SOLUTIONS = {
    1: 1, 2: 0, 3: 0, 4: 2, 5: 10, 6: 4, 7: 40, 8: 92, 9: 352, 10: 724, 11: 2680, 12: 14200,
    13: 73712, 14: 365596, 15: 2279184, 16: 14772512, 17: 95815104, 18: 666090624,
}

Board = tuple[int, int, int, int]  # (row, columns, left diagonals, right diagonals)


def count_completions(cols: int, left: int, right: int, full: int) -> int:
    """Solutions below a board, by depth-first search over bit masks."""
    if cols == full:
        return 1
    total = 0
    free = full & ~(cols | left | right)
    while free:
        bit = free & -free
        free ^= bit
        total += count_completions(cols | bit, ((left | bit) << 1) & full, (right | bit) >> 1, full)
    return total


@dataclass
class QueensResult(Result):
    solutions: int = 0

    def reduce(self, other: QueensResult) -> None:
        self.solutions += other.solutions


class QueensBag(Bag[QueensResult]):
    __slots__ = ("boards", "cutoff", "n", "solutions")

    def __init__(self, n: int, cutoff: int, boards: list[Board] | None = None) -> None:
        self.n = n
        self.cutoff = cutoff
        self.boards: list[Board] = boards if boards is not None else []
        self.solutions = 0

    def __getstate__(self) -> tuple[int, int, list[Board]]:
        return (self.n, self.cutoff, self.boards)  # work only, never the contribution

    def __setstate__(self, state: tuple[int, int, list[Board]]) -> None:
        self.n, self.cutoff, self.boards = state
        self.solutions = 0

    def process(self, n: int) -> bool:
        boards = self.boards
        size = self.n
        full = (1 << size) - 1
        expand_below = size - self.cutoff
        found = 0
        while boards and n > 0:
            n -= 1
            row, cols, left, right = boards.pop()
            if row >= expand_below:
                found += count_completions(cols, left, right, full)
                continue
            if row == size:
                found += 1
                continue
            free = full & ~(cols | left | right)
            while free:
                bit = free & -free
                free ^= bit
                boards.append((row + 1, cols | bit, ((left | bit) << 1) & full, (right | bit) >> 1))
        self.solutions += found
        return bool(boards)

    def split(self, take_all: bool) -> QueensBag | None:
        if take_all:
            loot, self.boards = self.boards, []
            return QueensBag(self.n, self.cutoff, loot)
        if len(self.boards) < 2:
            return None
        # The bottom of the stack holds the boards nearest the root: the biggest subtrees.
        half = len(self.boards) // 2
        loot, self.boards = self.boards[:half], self.boards[half:]
        return QueensBag(self.n, self.cutoff, loot)

    def merge(self, other: QueensBag) -> None:
        self.boards.extend(other.boards)

    def is_empty(self) -> bool:
        return not self.boards

    def is_splittable(self) -> bool:
        return len(self.boards) >= 2

    def submit(self, result: QueensResult) -> None:
        result.solutions += self.solutions


class QueensProblem(Problem[QueensBag, QueensResult]):
    name = "nqueens"
    granularity = 8

    def __init__(self, n: int, sequential_rows: int | None = None) -> None:
        if not 1 <= n <= 30:
            raise ValueError("N must be between 1 and 30")
        self.n = n
        self.cutoff = min(n, sequential_rows if sequential_rows is not None else max(1, n - 5))

    def empty_bag(self) -> QueensBag:
        return QueensBag(self.n, self.cutoff)

    def initial_work(self, rank: int, nranks: int) -> QueensBag | None:
        if rank != 0:
            return None
        return QueensBag(self.n, self.cutoff, [(0, 0, 0, 0)])

    def new_result(self) -> QueensResult:
        return QueensResult()

    def report(self, result: QueensResult) -> dict[str, Any]:
        known = KNOWN_SOLUTIONS.get(self.n)
        return {"n": self.n, "solutions": result.solutions,
                "known": known, "correct": None if known is None else known == result.solutions}


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="elastic_apps.glb.apps.nqueens", description=__doc__.split("\n\n")[0])
    p.add_argument("-n", type=int, default=12, help="board size N (default 12)")
    p.add_argument("--sequential-rows", type=int, default=None,
                   help="count boards with this many rows left in one task (default N-5)")
    add_runtime_arguments(p)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return main_for(QueensProblem(args.n, args.sequential_rows), args)


if __name__ == "__main__":
    # Import main from the package, not this __main__ module: classes pickle by their path.
    from elastic_apps.glb.apps.nqueens import main as _main

    sys.exit(_main())
