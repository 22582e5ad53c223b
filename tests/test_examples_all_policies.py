"""Every policy finishes the example batches on 4 local nodes: a job the daemon accepted is a
job its policy will start (sizes are fitted to the machine at submission, by the same rule
the simulator converts trace jobs with). Under KeepPref, the two jobs of examples/malleable
whose maximum (and so preferred) size is beyond 4 nodes used to wait forever."""

from __future__ import annotations

import json
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from conftest import BIN
from elasticd.jobfile import job_files, load_job_file
from elasticd.policies import POLICIES, make_policy
from elasticd.sim.simulator import simulate
from elasticd.sim.workload import from_specs

pytestmark = [pytest.mark.slow, pytest.mark.timeout(400)]
EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
RUN_POLICIES = sorted(p for p in POLICIES if p != "fit")  # fit schedules declared evolutions only


def _run(policy: str, batch: str, out: Path) -> tuple[str, int, dict[str, object] | None, str]:
    report = out / f"{policy}-{batch}.json"
    r = subprocess.run([str(BIN / "elasticd"), "run", str(EXAMPLES / batch), "--local", "4", "--policy", policy,
                        "--min-resize-interval", "2", "--timeout", "240", "--json", str(report)],
                       check=False, capture_output=True, text=True, timeout=330, cwd=out)
    doc = json.loads(report.read_text()) if report.exists() else None
    return policy, r.returncode, doc, r.stdout[-400:] + r.stderr[-400:]


def test_every_policy_finishes_the_malleable_examples_on_four_real_local_nodes(tmp_path: Path) -> None:
    with ThreadPoolExecutor(len(RUN_POLICIES)) as pool:
        results = list(pool.map(lambda p: _run(p, "malleable", tmp_path), RUN_POLICIES))
    for policy, rc, doc, tail in results:
        assert rc == 0 and doc is not None, f"{policy}: rc {rc}\n{tail}"
        states = {j["name"]: j["state"] for j in doc["jobs"]}  # type: ignore[index, union-attr]
        assert set(states.values()) == {"COMPLETED"}, f"{policy}: {states}"


@pytest.mark.parametrize("batch", ["mixed", "malleable"])
@pytest.mark.parametrize("policy", sorted(POLICIES))
def test_every_policy_finishes_each_example_batch_in_the_simulator(batch: str, policy: str) -> None:
    specs = [load_job_file(f) for f in job_files(EXAMPLES / batch)]
    outcomes = simulate(from_specs(specs), 4, make_policy(policy))
    assert {o.state for o in outcomes} == {"COMPLETED"}
