"""The project as a whole: CI runs what the README says, a clone needs nothing beside it,
optional extras say so when missing (the import graph: tests/test_import_graph.py)."""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from conftest import BIN

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = {"elasticd": ROOT / "elasticd", "elastic_protocol": ROOT / "protocol" / "elastic_protocol",
            "elastic_apps": ROOT / "apps" / "elastic_apps"}


def test_ci_runs_exactly_the_readme_test_command() -> None:
    blocks = re.findall(r"```sh\n(.*?)\n```", (ROOT / "README.md").read_text(), re.DOTALL)
    test_command = blocks[1].strip()
    assert "pytest" in test_command and "ruff check" in test_command and "mypy" in test_command
    ci = [ln.strip() for ln in (ROOT / ".ci" / "run").read_text().splitlines() if ln.strip()]
    assert ci[-1] == test_command


def _project_files() -> list[Path]:
    listed = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=False, timeout=30)
    if listed.returncode == 0 and listed.stdout:
        return [ROOT / p for p in listed.stdout.splitlines() if (ROOT / p).is_file()]
    skip = {".git", ".venv", "__pycache__", ".mypy_cache", ".ruff_cache", ".pytest_cache"}
    return [p for p in ROOT.rglob("*") if p.is_file() and not skip & set(p.relative_to(ROOT).parts)]


def test_no_file_of_the_project_reads_a_path_beside_the_clone() -> None:
    here = Path(__file__).resolve()
    outside = re.compile(r"\.\./shared|/work/shared|\.\./\.library")
    found = []
    for path in _project_files():
        if path.suffix not in {".py", ".sh", ".toml", ".md", ".cfg", ".txt", ""} or path == here:
            continue
        for n, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            if outside.search(line):
                found.append(f"{path.relative_to(ROOT)}:{n}: {line.strip()}")
    assert found == []


# Modules that may import what an optional extra installs (pyproject.toml), beside the core
# dependencies every module may use.
EXTRA_OF = {"apps/elastic_apps/mpi/": "mpi", "elasticd/sim/plots.py": "plots", "elasticd/sim/gantt.py": "plots"}


def _requirement_names(reqs: list[str]) -> set[str]:
    return {re.split(r"[<>=!~\[; ]", r, maxsplit=1)[0].lower().replace("-", "_") for r in reqs}


def test_every_third_party_import_is_a_declared_requirement() -> None:
    # The [mpi] extra once lacked numpy, which elastic_apps.mpi.jacobi imports: the suite
    # passed (the test extra brings numpy with matplotlib) while a user's `pip install
    # '.[mpi]'` ran examples/mpi/jacobi-*.toml into ModuleNotFoundError.
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    core = _requirement_names(project["dependencies"])
    extras = {k: _requirement_names(v) for k, v in project["optional-dependencies"].items()}
    missing = []
    for root in PACKAGES.values():
        for f in sorted(root.rglob("*.py")):
            rel = f.relative_to(ROOT).as_posix()
            allowed = core | {n for prefix, extra in EXTRA_OF.items() if rel.startswith(prefix) for n in extras[extra]}
            for node in ast.walk(ast.parse(f.read_text())):
                names: list[str] = []
                if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                    names = [node.module]
                elif isinstance(node, ast.Import):
                    names = [a.name for a in node.names]
                for name in names:
                    top = name.split(".")[0]
                    if top in sys.stdlib_module_names or top in PACKAGES or top == "__future__":
                        continue
                    if top.lower() not in allowed:
                        missing.append(f"{rel}:{node.lineno}: {top}")
    assert missing == []

@pytest.mark.timeout(120)
def test_without_the_plots_extra_sim_says_what_to_install_and_writes_the_rest(tmp_path: Path) -> None:
    # A matplotlib that cannot be imported, as in an install without the [plots] extra.
    fake = tmp_path / "site" / "matplotlib"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("raise ImportError('No module named matplotlib')\n")
    trace = ROOT / "examples" / "traces" / "hpc2n-2002-subset.swf.gz"
    out = tmp_path / "out"
    env = {**os.environ, "PYTHONPATH": str(tmp_path / "site")}
    r = subprocess.run([str(BIN / "elasticd"), "sim", str(trace), "--policy", "easy", "--malleable", "0",
                        "--seeds", "1", "--workers", "1", "--out", str(out)],
                       check=False, capture_output=True, text=True, env=env, timeout=110)
    assert r.returncode == 0, r.stderr
    assert "no plots: drawing plots needs matplotlib, which comes with an optional extra: " \
           "pip install 'elastic-hpc[plots]'" in r.stderr
    assert (out / "runs.csv").exists() and not list(out.glob("*.png"))


def test_the_readmes_policy_listing_is_what_elasticd_policies_prints() -> None:
    from elasticd.policies import render_policies

    text = (ROOT / "README.md").read_text()
    block = text.split("<!-- BEGIN policies -->\n", 1)[1].split("<!-- END policies -->", 1)[0]
    assert block == f"```text\n{render_policies()}```\n", "regenerate it: elasticd policies --readme README.md"
