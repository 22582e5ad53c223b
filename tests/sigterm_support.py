"""Jobs that count the SIGTERMs each of their processes gets (tests/apps/sigterm_counter.py),
for the local tests (test_sigterm_once.py) and the SSH node agent's on the virtual cluster
(test_cluster_vcluster.py)."""

from __future__ import annotations

import collections
import sys
from pathlib import Path

from conftest import wait_until, write_job

COUNTER = Path(__file__).parent / "apps" / "sigterm_counter.py"


def counter_job(folder: Path, nodes: str, *, kind: str = "rigid", time_limit: str = "2",
                env: dict[str, str] | None = None, launcher: str = "host") -> Path:
    """A job of the counter in `folder` (each process writes `starts` and `terms` there)."""
    env_toml = ", ".join(f'{k} = "{v}"' for k, v in (env or {}).items())
    return write_job(folder, "counter", f'''
        name = "counter"
        command = ["{sys.executable}", "{COUNTER}"]
        nodes = {nodes}
        kind = "{kind}"
        launcher = "{launcher}"
        working_dir = "{folder}"
        output = "counter-%N.out"
        time_limit = "{time_limit}"
        env = {{ {env_toml} }}
    ''')


def lines(folder: Path, name: str) -> list[tuple[int, str]]:
    path = folder / name
    if not path.exists():
        return []
    return [(int(w[1]), w[2]) for w in (ln.split() for ln in path.read_text().splitlines())]


def started(folder: Path, count: int) -> dict[int, str]:
    """pid -> host of the job's processes, once `count` of them said they run."""
    assert wait_until(lambda: len(lines(folder, "starts")) >= count, 30), lines(folder, "starts")
    return dict(lines(folder, "starts"))


def assert_one_sigterm_each(folder: Path, pids: dict[int, str]) -> None:
    terms = collections.Counter(pid for pid, _ in lines(folder, "terms"))
    assert terms == dict.fromkeys(pids, 1), (
        f"SIGTERMs per process {dict(terms)}, wanted one for each of {pids}")
