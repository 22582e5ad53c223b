"""What a GLB user writes: a bag of work, a result with a reduction, and a problem that
makes them.

The runtime never looks inside a bag; it only asks it to work, to give part of its work
away and to take work in. That is what lets the same bags run on one place or many, and
lets places come and go (malleability) without a line of code in the bag.

Contracts the runtime relies on (and the tests check for the bundled apps):
- A bag's *contribution* (what `submit` folds into a result) stays with the bag object
  it was computed in. `split` hands out work only, never contribution; `merge` takes in
  work only. So moving work between places never moves or duplicates a partial result,
  and a place's partial result is exactly `bag.submit(fresh_result)` at any time.
- `split(take_all=False)` is only called when `is_splittable()` is true and leaves work
  in both bags; `split(take_all=True)` takes all of the work (used when a place leaves).
- `Result.reduce` is associative and commutative, so the reduction order (which depends
  on how work travelled) does not change the final result.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, Generic, Self, TypeVar


class Result(ABC):
    """A partial or total result; partial results of all places are reduced into one."""

    @abstractmethod
    def reduce(self, other: Self) -> None:
        """Fold `other` into this result (associative and commutative)."""


R = TypeVar("R", bound=Result)


class Bag(ABC, Generic[R]):
    """A place's work: tasks still to do plus the contribution of the tasks already done."""

    @abstractmethod
    def process(self, n: int) -> bool:
        """Do about `n` units of work; return whether work is left.

        The runtime answers steals and orders between calls, so `n` sets the latency of
        the whole system: keep one call around a millisecond.
        """

    @abstractmethod
    def split(self, take_all: bool) -> Self | None:
        """A new bag with part (about half) of the work, or all of it if `take_all`."""

    @abstractmethod
    def merge(self, other: Self) -> None:
        """Take in the work of `other` (a bag `split` made)."""

    @abstractmethod
    def is_empty(self) -> bool:
        """No work left (the contribution may be non-zero)."""

    @abstractmethod
    def is_splittable(self) -> bool:
        """Enough work to give some away and keep some."""

    @abstractmethod
    def submit(self, result: R) -> None:
        """Fold this bag's contribution into `result`."""


B = TypeVar("B", bound=Bag[Any])


class Problem(ABC, Generic[B, R]):
    """Builds the bags and results of one computation; every place builds its own copy
    from the same command-line arguments, so a problem must be deterministic."""

    #: Short name, printed with the result.
    name: str = "glb"
    #: Units of work per `process` call (the seed's GLB default is 511).
    granularity: int = 511

    @abstractmethod
    def empty_bag(self) -> B:
        """A bag without work: what a place starts from before it gets any."""

    @abstractmethod
    def initial_work(self, rank: int, nranks: int) -> B | None:
        """The work place `rank` of the `nranks` initial places starts with.

        Dynamic problems (a root task that spawns the rest) give everything to rank 0 and
        None elsewhere; static problems give each rank its share.
        """

    @abstractmethod
    def new_result(self) -> R:
        """A neutral result (the identity of `reduce`)."""

    def report(self, result: R) -> dict[str, Any]:
        """The result as JSON-able fields for the program's output line."""
        return {"result": repr(result)}
