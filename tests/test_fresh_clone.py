"""The README's first command, and the commands that follow it in the README that need no
root, in a fresh clone of this repository with a fresh virtualenv and a fresh HOME, nothing
beside it: what a new user does first."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _sh(command: str, cwd: Path, env: dict[str, str], timeout: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", "-c", command], cwd=cwd, env=env, check=False, capture_output=True, text=True,
                          timeout=timeout)


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_the_readme_first_command_and_the_simulator_commands_work_in_a_fresh_clone(tmp_path: Path) -> None:
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("needs git and a git checkout to clone from")
    clone = tmp_path / "elastic"
    r = subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=False, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    home = tmp_path / "home"
    home.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ELASTIC_", "VIRTUAL_ENV", "PYTHON"))}
    env["HOME"] = str(home)
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep) if ".venv" not in p)
    first = re.findall(r"```sh\n(.*?)\n```", (ROOT / "README.md").read_text(), re.DOTALL)[0].strip()
    r = _sh(first, clone, env, 600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "elasticd run: 7 jobs on 4 local nodes" in r.stdout
    assert "jobs                    7 (7 started, 7 completed)" in r.stdout
    # The simulator section's commands, on a smaller grid than the README's (same options).
    r = _sh(".venv/bin/elasticd sim examples/traces/theta-2023.swf.gz --policy easy --policy malleable "
            "--malleable 0,100 --seeds 1 --out sim-theta && .venv/bin/elasticd report sim-theta", clone, env, 300)
    # Without the [plots] extra: the tables, and what to install for the plots.
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "malleable  100" in r.stdout and "pip install 'elastic-hpc[plots]'" in r.stderr
    r = _sh(".venv/bin/pip install -q '.[plots]' && .venv/bin/elasticd report sim-theta && "
            ".venv/bin/elasticd policies", clone, env, 600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert (clone / "sim-theta" / "grid.png").exists() and "payoff" in r.stdout
    # Nothing was written beside the clone.
    assert sorted(p.name for p in tmp_path.iterdir()) == ["elastic", "home"]
