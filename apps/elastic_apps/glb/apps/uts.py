"""UTS, the Unbalanced Tree Search benchmark, on the GLB runtime (geometric trees).

The tree is generated as it is searched, exactly as in the UTS suite, so node counts are
comparable with its published reference counts:
- the root's descriptor is SHA-1 of 16 zero bytes followed by the seed (4 bytes, big
  endian); child i's descriptor is SHA-1 of the parent's 20-byte descriptor followed by i
  (4 bytes, big endian);
- a node's random number is the descriptor's bytes 16..19 (big endian) & 0x7fffffff,
  u = that / 2**31;
- a node at depth h has floor(log(1 - u) / log(1 - p)) children (at most 100), where
  p = 1 / (1 + b_h) and b_h follows the shape function: fixed (b_0 while h < d, else 0),
  linear (b_0 (1 - h/d)), expdec (b_0 h^(-log b_0 / log d)), cyclic (b_0^sin(2 pi h/d),
  0 past 5d); the root always uses b_0.

Reference trees (UTS sample_trees.sh): T1 = fixed, b 4, d 10, seed 19: 4,130,071 nodes,
3,305,118 leaves; the UTS default (linear, b 4, d 6, seed 0): 1,732 nodes, 1,050 leaves.

The bag is a stack of (descriptor, depth, next child, end child): ranges of children not
generated yet, as in the seed's GLB UTS; split gives away the upper half of every range.

    python -m elastic_apps.glb.apps.uts --tree T1 [--depth 12] [GLB runtime options]
"""

from __future__ import annotations

import argparse
import hashlib
import math
import sys
from dataclasses import dataclass
from typing import Any

from elastic_apps.glb.bag import Bag, Problem, Result
from elastic_apps.glb.runtime import add_runtime_arguments, main_for

MAX_CHILDREN = 100
SHAPES = ("linear", "expdec", "cyclic", "fixed")
#: name -> (shape, b_0, depth, seed, published node count, published leaf count)
REFERENCE_TREES: dict[str, tuple[str, float, int, int, int | None, int | None]] = {
    "default": ("linear", 4.0, 6, 0, 1_732, 1_050),
    "T1": ("fixed", 4.0, 10, 19, 4_130_071, 3_305_118),
    "T5": ("linear", 4.0, 20, 34, 4_147_582, 2_181_318),
    "T2": ("cyclic", 6.0, 16, 502, 4_117_769, 2_342_762),
    "T1L": ("fixed", 4.0, 13, 29, 102_181_082, 81_746_377),
}
_CHILD_INDEX = [i.to_bytes(4, "big") for i in range(MAX_CHILDREN + 1)]


def root_descriptor(seed: int) -> bytes:
    return hashlib.sha1(bytes(16) + (seed & 0xFFFFFFFF).to_bytes(4, "big")).digest()


@dataclass(frozen=True)
class Tree:
    """A geometric UTS tree's parameters and, per depth, the log(1 - p) its nodes use."""

    shape: str
    b0: float
    depth: int
    seed: int

    def __post_init__(self) -> None:
        if self.shape not in SHAPES:
            raise ValueError(f"unknown shape {self.shape!r}")
        if self.depth < 1 or self.b0 <= 0:
            raise ValueError("depth must be >= 1 and the branching factor > 0")
        limit = 5 * self.depth + 2 if self.shape == "cyclic" else self.depth + 2
        object.__setattr__(self, "_dens", [self.den(h) for h in range(limit)])

    def branching(self, h: int) -> float:
        """The shape function: expected children of a node at depth h."""
        b0, d = self.b0, self.depth
        if h == 0:
            return b0
        if self.shape == "fixed":
            return b0 if h < d else 0.0
        if self.shape == "linear":
            return b0 * (1.0 - h / d)
        if self.shape == "expdec":
            return b0 * math.pow(h, -math.log(b0) / math.log(d))
        if h > 5 * d:
            return 0.0
        return math.pow(b0, math.sin(2.0 * 3.141592653589793 * h / d))

    def den(self, h: int) -> float | None:
        """log(1 - p) at depth h, or None when nodes there have no children (p = 1)."""
        p = 1.0 / (1.0 + self.branching(h))
        q = 1.0 - p
        if q <= 0.0:
            return None
        return math.log(q)

    @property
    def dens(self) -> list[float | None]:
        return self._dens  # type: ignore[attr-defined, no-any-return]

    def children(self, descriptor: bytes, h: int) -> int:
        d = self.den(h)
        if d is None:
            return 0
        r = int.from_bytes(descriptor[16:20], "big") & 0x7FFFFFFF
        return min(MAX_CHILDREN, int(math.log(1.0 - r / 2147483648.0) / d))


@dataclass
class UTSResult(Result):
    nodes: int = 0
    leaves: int = 0
    max_depth: int = 0

    def reduce(self, other: UTSResult) -> None:
        self.nodes += other.nodes
        self.leaves += other.leaves
        self.max_depth = max(self.max_depth, other.max_depth)


class UTSBag(Bag[UTSResult]):
    __slots__ = ("leaves", "max_depth", "nodes", "stack", "tree")

    def __init__(self, tree: Tree | None, stack: list[list[Any]] | None = None) -> None:
        self.tree = tree
        self.stack: list[list[Any]] = stack if stack is not None else []
        self.nodes = 0
        self.leaves = 0
        self.max_depth = 0

    # Only the work travels: a bag arriving at another place is merged into that place's
    # bag, which has the tree.
    def __getstate__(self) -> list[list[Any]]:
        return self.stack

    def __setstate__(self, stack: list[list[Any]]) -> None:
        self.tree = None
        self.stack = stack
        self.nodes = self.leaves = self.max_depth = 0

    def process(self, n: int) -> bool:
        stack = self.stack
        tree = self.tree
        assert tree is not None, "process() on a bag that was only meant to be merged"
        dens = tree.dens
        sha1 = hashlib.sha1
        log = math.log
        index = _CHILD_INDEX
        nodes = leaves = 0
        max_depth = self.max_depth
        while stack and nodes < n:
            top = stack[-1]
            parent, h, lo, hi = top
            child = sha1(parent + index[lo]).digest()
            lo += 1
            if lo == hi:
                stack.pop()
            else:
                top[2] = lo
            nodes += 1
            h += 1
            if h > max_depth:  # noqa: PLR1730 - a call per node costs more than the test
                max_depth = h
            try:
                den = dens[h]
            except IndexError:
                den = tree.den(h)
            if den is None:
                leaves += 1
                continue
            m = int(log(1.0 - (int.from_bytes(child[16:20], "big") & 0x7FFFFFFF) / 2147483648.0) / den)
            if m:
                stack.append([child, h, 0, m if m <= MAX_CHILDREN else MAX_CHILDREN])  # noqa: FURB136
            else:
                leaves += 1
        self.nodes += nodes
        self.leaves += leaves
        self.max_depth = max_depth
        return bool(stack)

    def split(self, take_all: bool) -> UTSBag | None:
        if take_all:
            loot, self.stack = self.stack, []
            return UTSBag(None, loot)
        loot = []
        for entry in self.stack:
            lo, hi = entry[2], entry[3]
            if hi - lo >= 2:
                mid = (lo + hi) // 2
                loot.append([entry[0], entry[1], mid, hi])
                entry[3] = mid
        if not loot and len(self.stack) >= 2:
            half = len(self.stack) // 2
            loot, self.stack = self.stack[:half], self.stack[half:]
        return UTSBag(None, loot) if loot else None

    def merge(self, other: UTSBag) -> None:
        self.stack.extend(other.stack)

    def is_empty(self) -> bool:
        return not self.stack

    def is_splittable(self) -> bool:
        stack = self.stack
        if len(stack) >= 2:
            return True
        return bool(stack) and stack[0][3] - stack[0][2] >= 2

    def submit(self, result: UTSResult) -> None:
        result.reduce(UTSResult(self.nodes, self.leaves, self.max_depth))


class UTSProblem(Problem[UTSBag, UTSResult]):
    name = "uts"
    granularity = 511

    def __init__(self, tree: Tree) -> None:
        self.tree = tree

    def empty_bag(self) -> UTSBag:
        return UTSBag(self.tree)

    def initial_work(self, rank: int, nranks: int) -> UTSBag | None:
        if rank != 0:
            return None
        bag = UTSBag(self.tree)
        root = root_descriptor(self.tree.seed)
        bag.nodes = 1
        m = self.tree.children(root, 0)
        if m:
            bag.stack.append([root, 0, 0, m])
        else:
            bag.leaves = 1
        return bag

    def new_result(self) -> UTSResult:
        return UTSResult()

    def report(self, result: UTSResult) -> dict[str, Any]:
        t = self.tree
        return {
            "nodes": result.nodes,
            "leaves": result.leaves,
            "max_depth": result.max_depth,
            "tree": {"shape": t.shape, "b0": t.b0, "depth": t.depth, "seed": t.seed},
        }


def count_recursively(tree: Tree) -> UTSResult:
    """The tree counted by a plain depth-first walk (no bag): a second reference."""
    out = UTSResult()
    todo = [(root_descriptor(tree.seed), 0)]
    while todo:
        descriptor, h = todo.pop()
        out.nodes += 1
        out.max_depth = max(out.max_depth, h)
        m = tree.children(descriptor, h)
        if m == 0:
            out.leaves += 1
        for i in range(m):
            todo.append((hashlib.sha1(descriptor + i.to_bytes(4, "big")).digest(), h + 1))
    return out


def tree_from_args(args: argparse.Namespace) -> Tree:
    shape, b0, depth, seed = REFERENCE_TREES[args.tree][:4]
    return Tree(
        shape=args.shape or shape,
        b0=args.branching if args.branching is not None else b0,
        depth=args.depth if args.depth is not None else depth,
        seed=args.seed if args.seed is not None else seed,
    )


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="elastic_apps.glb.apps.uts", description=__doc__.split("\n\n")[0])
    p.add_argument("--tree", choices=sorted(REFERENCE_TREES), default="T1",
                   help="start from a UTS reference tree's parameters (default T1)")
    p.add_argument("--shape", choices=SHAPES, default=None, help="geometric shape function")
    p.add_argument("--branching", "-b", type=float, default=None, help="branching factor b_0")
    p.add_argument("--depth", "-d", type=int, default=None, help="depth parameter d (gen_mx)")
    p.add_argument("--seed", "-r", type=int, default=None, help="root seed")
    add_runtime_arguments(p)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return main_for(UTSProblem(tree_from_args(args)), args)


if __name__ == "__main__":
    # Import main from the package, not this __main__ module: classes pickle by their path.
    from elastic_apps.glb.apps.uts import main as _main

    sys.exit(_main())
