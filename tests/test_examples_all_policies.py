"""Every policy finishes the example batches on 4 local nodes: a job the daemon accepted is a
job its policy will start (sizes are fitted to the machine at submission, by the same rule
the simulator converts trace jobs with). Under KeepPref, the two jobs of examples/malleable
whose maximum (and so preferred) size is beyond 4 nodes used to wait forever.

The real runs play the batch at a quarter of its time scale (work, submit offsets and the
daemon's intervals alike): what is pinned is that every job, fitted to 4 nodes, is started
and completes under every policy, which depends on the jobs' sizes and not on how long they
last; the 20 daemons then finish in a quarter of the time."""

from __future__ import annotations

import json
import re
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
SCALE = 0.25
# The times in an example job file: the synthetic application's work, in its command and in
# its model (which must agree), and the submit offset.
_TIMES = [re.compile(r'(?<="--work", ")[0-9.]+(?=")'), re.compile(r"(?<=\bwork = )[0-9.]+"),
          re.compile(r"(?<=^submit_offset = )[0-9.]+", re.MULTILINE)]


def scaled_batch(batch: str, out: Path, scale: float = SCALE) -> Path:
    """A copy of examples/BATCH with every time in it multiplied by `scale`; sizes, kinds,
    order and everything else as they are."""
    folder = out / f"{batch}-x{scale:g}"
    (folder / "out").mkdir(parents=True)
    for f in job_files(EXAMPLES / batch):
        text, spec = f.read_text(), load_job_file(f)
        for pattern in _TIMES:
            text, n = pattern.subn(lambda m: f"{float(m.group()) * scale:g}", text)
            # A change of the examples' format fails here, not by running them at full length.
            assert n == 1, f"{f.name}: {n} matches of {pattern.pattern}"
        (folder / f.name).write_text(text)
        copy = load_job_file(folder / f.name)
        assert copy.model is not None and spec.model is not None, f
        assert copy.model.work == spec.model.work * scale and copy.submit_offset == spec.submit_offset * scale, f
        assert copy.model_copy(update={"model": spec.model, "submit_offset": spec.submit_offset, "command": spec.command,
                                       "working_dir": spec.working_dir}) == spec, f"{f.name}: more than times changed"
    return folder


def _run(policy: str, batch: Path, out: Path) -> tuple[str, int, dict[str, object] | None, str]:
    report = out / f"{policy}-{batch.name}.json"
    r = subprocess.run([str(BIN / "elasticd"), "run", str(batch), "--local", "4", "--policy", policy,
                        "--min-resize-interval", str(2 * SCALE), "--schedule-interval", str(5 * SCALE),
                        "--timeout", "240", "--json", str(report)],
                       check=False, capture_output=True, text=True, timeout=330, cwd=out)
    doc = json.loads(report.read_text()) if report.exists() else None
    return policy, r.returncode, doc, r.stdout[-400:] + r.stderr[-400:]


def test_every_policy_finishes_the_malleable_examples_on_four_real_local_nodes(tmp_path: Path) -> None:
    batch = scaled_batch("malleable", tmp_path)
    with ThreadPoolExecutor(len(RUN_POLICIES)) as pool:
        results = list(pool.map(lambda p: _run(p, batch, tmp_path), RUN_POLICIES))
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
