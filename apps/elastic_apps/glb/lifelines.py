"""The lifeline graph: which places a place out of work waits on.

GLB needs a graph that is connected (work can reach every place), of bounded out-degree
(a place spends little time serving lifeline thieves) and of low diameter (work spreads in
few hops). The seed uses cyclic hypercubes: write a place's rank in base z with l digits
(z**l >= P); its lifelines are the ranks obtained by adding 1 (mod z) to one digit,
skipping to +2, +3, ... when the result is not a rank (>= P). Out-degree <= l, and every
rank reaches rank 0 and rank 0 reaches every rank, so the graph is strongly connected for
every P, including the gaps a shrink leaves (ranks are positions in the current member
list, not place ids).
"""

from __future__ import annotations


def dimensions(nplaces: int, base: int) -> int:
    """Smallest l with base**l >= nplaces (at least 1)."""
    if base < 2:
        raise ValueError("the lifeline base must be at least 2")
    l, span = 1, base
    while span < nplaces:
        span *= base
        l += 1
    return l


def lifeline_buddies(rank: int, nplaces: int, base: int = 2) -> list[int]:
    """The ranks `rank` establishes lifelines on, in dimension order, without repeats."""
    if not 0 <= rank < nplaces:
        raise ValueError(f"rank {rank} is not in [0, {nplaces})")
    out: list[int] = []
    weight = 1
    for _ in range(dimensions(nplaces, base)):
        digit = (rank // weight) % base
        for k in range(1, base):
            candidate = rank + (((digit + k) % base) - digit) * weight
            if candidate < nplaces:
                if candidate != rank and candidate not in out:
                    out.append(candidate)
                break
        weight *= base
    return out


def lifeline_graph(nplaces: int, base: int = 2) -> dict[int, list[int]]:
    """rank -> its lifeline buddies, for every rank."""
    return {r: lifeline_buddies(r, nplaces, base) for r in range(nplaces)}
