"""How the command-line tools print: tables of columns, and counts whose nouns agree."""

from __future__ import annotations

from collections.abc import Sequence


def render_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """Left-aligned columns two spaces apart, as squeue and sacct print them."""
    table = [tuple(header), *(tuple(r) for r in rows)]
    widths = [max(len(r[i]) for r in table) for i in range(len(header))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in table)


def count(n: int, noun: str, plural: str | None = None) -> str:
    """`1 node`, `0 nodes`, `3 nodes`: a user reads "shrunk to 1 nodes" as a bug."""
    return f"{n} {noun if n == 1 else plural or noun + 's'}"


def named(noun: str, ids: Sequence[object], plural: str | None = None) -> str:
    """`job 3`, `jobs 3, 4`: a list of ids after its noun, which agrees with it."""
    return f"{noun if len(ids) == 1 else plural or noun + 's'} {', '.join(map(str, ids))}"
