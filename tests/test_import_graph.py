"""The import graph of the project: no cycle, and layers that point one way.

Every import counts: at the top of a module, inside a function, and under
`if TYPE_CHECKING:`. A cycle that only the type checker sees is still two modules that
cannot be read, changed or tested apart — the shell's servers once named `Daemon` under
TYPE_CHECKING while `Daemon` imported them — so it fails here as any other does.

Read from the source with `ast` (nothing is imported), so a module that is never imported
by the suite is checked too.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from itertools import pairwise
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = {"elasticd": ROOT / "elasticd", "elastic_protocol": ROOT / "protocol" / "elastic_protocol",
            "elastic_apps": ROOT / "apps" / "elastic_apps"}


@dataclass(frozen=True)
class Import:
    target: str  # the module imported: a module of the project, or the top name of any other
    line: int


def _modules() -> dict[str, Path]:
    """Dotted name -> file, for every module of the three packages."""
    found: dict[str, Path] = {}
    for pkg, root in PACKAGES.items():
        for f in sorted(root.rglob("*.py")):
            parts = [pkg, *f.relative_to(root).with_suffix("").parts]
            found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = f
    return found


MODULES = _modules()


def _own(name: str) -> str | None:
    """The project module a dotted name is in (`elasticd.core.events.Exited` is in
    `elasticd.core.events`); None when it is not the project's."""
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def _imports(module: str) -> list[Import]:
    """Every import statement of a module, wherever it stands, as the modules it names."""
    path = MODULES[module]
    return _imports_in(path.read_text(), module, path.name == "__init__.py")


def _imports_in(source: str, module: str, is_package: bool) -> list[Import]:
    package = module if is_package else module.rpartition(".")[0]
    out: list[Import] = []
    for node in ast.walk(ast.parse(source, module)):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[:len(anchor) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            # `from pkg import name`: the module pkg.name if there is one, else pkg itself.
            names = [f"{base}.{a.name}" for a in node.names]
        for name in names:
            own = _own(name)
            out.append(Import(own if own is not None else name.split(".")[0], node.lineno))
    return out


def _graph() -> dict[str, dict[str, int]]:
    """Module -> the project modules it imports, each with the line of its first import."""
    graph: dict[str, dict[str, int]] = {m: {} for m in MODULES}
    for m in MODULES:
        for imp in _imports(m):
            if imp.target in MODULES and imp.target != m:
                graph[m].setdefault(imp.target, imp.line)
    return graph


def _cycles(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """One cycle through each group of modules that import each other, as the path that
    closes it."""
    return [_path_through(graph, set(g)) for g in _groups(graph)]


def _groups(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """The groups of modules that import each other, directly or not (Tarjan's strongly
    connected components of more than one module)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []

    def visit(m: str) -> None:  # the graph is a few hundred modules deep at most
        index[m] = low[m] = len(index)
        stack.append(m)
        on_stack.add(m)
        for t in sorted(graph[m]):
            if t not in index:
                visit(t)
                low[m] = min(low[m], low[t])
            elif t in on_stack:
                low[m] = min(low[m], index[t])
        if low[m] == index[m]:
            group = []
            while True:
                t = stack.pop()
                on_stack.discard(t)
                group.append(t)
                if t == m:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for m in sorted(graph):
        if m not in index:
            visit(m)
    return groups


def _path_through(graph: dict[str, dict[str, int]], group: set[str]) -> list[str]:
    """A shortest cycle from the group's first module back to it, within the group."""
    start = min(group)
    came: dict[str, str] = {}
    frontier = [start]
    while frontier:
        nxt = []
        for m in frontier:
            for t in sorted(graph[m]):
                if t not in group:
                    continue
                if t == start:
                    path = [m]
                    while path[-1] != start:
                        path.append(came[path[-1]])
                    return [start, *reversed(path[:-1]), start]
                if t not in came:
                    came[t] = m
                    nxt.append(t)
        frontier = nxt
    raise AssertionError(f"no cycle through {sorted(group)}")


def _describe(graph: dict[str, dict[str, int]], cycle: list[str]) -> str:
    return " -> ".join(f"{a} (line {graph[a][b]})" for a, b in pairwise(cycle)) + f" -> {cycle[-1]}"


def test_no_module_imports_itself_back_through_others() -> None:
    graph = _graph()
    found = [f"{_describe(graph, _path_through(graph, set(g)))} (the group: {', '.join(g)})" for g in _groups(graph)]
    assert found == []


def test_a_type_only_a_local_and_a_relative_import_are_edges_too() -> None:
    source = (
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n"
        "    from elasticd.daemon.journal import Journal\n"
        "def f() -> None:\n"
        "    import elasticd.core.events\n"
        "from . import clock\n"
        "from .metrics import DaemonMetrics\n"
        "from ..core import actions\n"
    )
    got = {(i.target, i.line) for i in _imports_in(source, "elasticd.daemon.example", is_package=False)}
    assert got >= {("elasticd.daemon.journal", 3), ("elasticd.core.events", 5), ("elasticd.daemon.clock", 6),
                   ("elasticd.daemon.metrics", 7), ("elasticd.core.actions", 8)}
    assert ("typing", 1) in got


def test_the_cycle_finder_names_a_cycle_and_its_lines() -> None:
    graph = {"a": {"b": 3}, "b": {"c": 5}, "c": {"a": 7, "d": 1}, "d": {}}
    assert _cycles(graph) == [["a", "b", "c", "a"]]
    assert _describe(graph, ["a", "b", "c", "a"]) == "a (line 3) -> b (line 5) -> c (line 7) -> a"
    assert _cycles({"a": {"b": 1}, "b": {}}) == []


# Who may import whom: cli -> daemon / sim / experiments -> core / policies -> protocol.
# The core and the policies are pure: no event loop, no clock, no sockets, no processes.
PURE_BANS = ("elasticd.daemon", "elasticd.sim", "elasticd.cli", "elasticd.launch", "elasticd.experiments",
             "asyncio", "socket", "time", "subprocess", "threading")
FORBIDDEN = {
    "elasticd.core": PURE_BANS,
    "elasticd.policies": PURE_BANS,
    "elasticd.daemon": ("elasticd.cli", "elasticd.sim", "elasticd.experiments"),
    "elasticd.sim": ("elasticd.cli", "elasticd.daemon", "elasticd.launch"),
    "elasticd.experiments": ("elasticd.cli",),
    "elasticd.launch": ("elasticd.cli", "elasticd.daemon", "elasticd.sim", "elasticd.core"),
    "elastic_protocol": ("elasticd", "elastic_apps"),
    "elastic_apps": ("elasticd",),
}


def _within(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


def test_layers_point_one_way() -> None:
    wrong = []
    for m in MODULES:
        for layer, banned in FORBIDDEN.items():
            if _within(m, layer):
                wrong += [f"{MODULES[m].relative_to(ROOT)}:{imp.line}: {m} imports {imp.target}"
                          for imp in _imports(m) if any(_within(imp.target, b) for b in banned)]
    assert wrong == []

