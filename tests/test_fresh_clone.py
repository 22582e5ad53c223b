"""The README's first command, and the commands that follow it in the README that need no
root, in a fresh clone of this repository with a fresh virtualenv and a fresh HOME, nothing
beside it: what a new user does first.

The first command ends with a half-minute run of examples/mixed that mostly sleeps: once its
`pip install .` has said it installed the package, the simulator's commands run beside that
run, in the same clone and virtualenv, rather than after it. The `[plots]` install comes
after both: it reinstalls the package that the running jobs use."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import threading
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _sh(command: str, cwd: Path, env: dict[str, str], timeout: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", "-c", command], cwd=cwd, env=env, check=False, capture_output=True, text=True,
                          timeout=timeout)


class _Background:
    """`bash -c COMMAND` running while the test goes on; its output read as it comes."""

    def __init__(self, command: str, cwd: Path, env: dict[str, str]) -> None:
        self.proc = subprocess.Popen(["bash", "-c", command], cwd=cwd, env=env, stdin=subprocess.DEVNULL,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.out: list[str] = []
        self.err: list[str] = []
        self.changed = threading.Condition()
        self.readers = [threading.Thread(target=self._read, args=(f, lines), daemon=True)
                        for f, lines in ((self.proc.stdout, self.out), (self.proc.stderr, self.err))]
        for t in self.readers:
            t.start()

    def _read(self, stream, lines: list[str]) -> None:  # type: ignore[no-untyped-def]
        for line in stream:
            with self.changed:
                lines.append(line)
                self.changed.notify_all()
        with self.changed:
            self.changed.notify_all()

    def wait_for_line(self, prefix: str, timeout: float) -> bool:
        """Until a line of its output starts with PREFIX (True) or it ended without one."""
        with self.changed:
            return self.changed.wait_for(lambda: any(x.startswith(prefix) for x in self.out) or
                                         not any(t.is_alive() for t in self.readers), timeout) and \
                any(x.startswith(prefix) for x in self.out)

    def wait(self, timeout: float) -> int:
        try:
            rc = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            rc = self.proc.wait()
        for t in self.readers:
            t.join(10)
        return rc

    @property
    def stdout(self) -> str:
        return "".join(self.out)

    @property
    def stderr(self) -> str:
        return "".join(self.err)


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
    readme_run = _Background(first, clone, env)
    try:
        # pip's last line: the virtualenv is complete, the example run starts (a first command
        # without it would only make the simulator's commands wait for its end).
        readme_run.wait_for_line("Successfully installed ", 600)
        # The simulator section's commands, on a smaller grid than the README's (same options).
        r = _sh(".venv/bin/elasticd sim examples/traces/theta-2023.swf.gz --policy easy --policy malleable "
                "--malleable 0,100 --seeds 1 --out sim-theta && .venv/bin/elasticd report sim-theta", clone, env, 300)
    finally:
        first_rc = readme_run.wait(300)
    assert first_rc == 0, readme_run.stdout[-3000:] + readme_run.stderr[-3000:]
    assert "elasticd run: 7 jobs on 4 local nodes" in readme_run.stdout
    assert "jobs                    7 (7 started, 7 completed)" in readme_run.stdout
    # Without the [plots] extra: the tables, and what to install for the plots.
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "malleable  100" in r.stdout and "pip install 'elastic-hpc[plots]'" in r.stderr
    r = _sh(".venv/bin/pip install -q '.[plots]' && .venv/bin/elasticd report sim-theta && "
            ".venv/bin/elasticd policies", clone, env, 600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert (clone / "sim-theta" / "grid.png").exists() and "payoff" in r.stdout
    # Nothing was written beside the clone.
    assert sorted(p.name for p in tmp_path.iterdir()) == ["elastic", "home"]
