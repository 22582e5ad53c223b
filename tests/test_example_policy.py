"""The example policy of docs/ARCHITECTURE.md runs as the guide says: through the core (every
invariant checked after every event by conftest), in the simulator, and the guide shows the
file as it is."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from core_support import submit
from elastic_protocol.jobspec import JobKind, JobSpec
from elasticd.core.actions import Launch, SendOrder
from elasticd.core.engine import Core
from elasticd.core.events import Exited, GrowAnswered, Launched, PassDue, Registered
from elasticd.sim.simulator import simulate
from elasticd.sim.swf import read_swf
from elasticd.sim.workload import build_workload

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "docs" / "examples" / "fill_to_preferred.py"


def load_policy() -> object:
    spec = importlib.util.spec_from_file_location("fill_to_preferred", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.FillToPreferred()


def test_the_guide_shows_the_example_file_as_it_is() -> None:
    guide = (ROOT / "docs" / "ARCHITECTURE.md").read_text()
    block = re.search(r"```python\n(.*?)```", guide, re.DOTALL)
    assert block is not None and block.group(1) == EXAMPLE.read_text()
    assert len(EXAMPLE.read_text().splitlines()) <= 30


def test_the_example_starts_at_preferred_and_grows_registered_jobs_one_node_a_pass() -> None:
    core = Core([f"n{i}" for i in range(6)], load_policy())  # type: ignore[arg-type]
    m = submit(core, JobSpec(name="m", command=["x"], nodes={"min": 1, "max": 6, "preferred": 4},
                             kind=JobKind.MALLEABLE), 0.0)
    r = submit(core, JobSpec(name="r", command=["x"], nodes=3), 0.0)
    assert core.handle(PassDue(0.0)) == [Launch(m.job_id, ("n0", "n1", "n2", "n3"))]  # r waits: 2 free
    core.handle(Launched(0.5, m.job_id))
    core.handle(Registered(1.0, m.job_id))
    assert core.handle(PassDue(1.0)) == []  # at its preferred size: no grow
    core.handle(Exited(5.0, m.job_id, 0, None))
    assert [a.job_id for a in core.handle(PassDue(5.0)) if isinstance(a, Launch)] == [r.job_id]
    x = submit(core, JobSpec(name="x", command=["x"], nodes=1), 6.0)
    n = submit(core, JobSpec(name="n", command=["x"], nodes={"min": 1, "max": 3},
                             kind=JobKind.MALLEABLE), 6.0)
    core.handle(PassDue(6.0))
    assert core.job(n.job_id).size == 2  # what was left
    core.handle(Registered(6.5, n.job_id))
    core.handle(Exited(6.8, x.job_id, 0, None))
    grows = [a for a in core.handle(PassDue(7.0)) if isinstance(a, SendOrder)]
    assert [(a.job_id, a.kind.value, a.count) for a in grows] == [(n.job_id, "grow", 1)]
    core.handle(GrowAnswered(7.5, n.job_id, grows[0].order_id, tuple(core.job(n.job_id).hosts)))
    assert core.job(n.job_id).size == 3


@settings(max_examples=5, deadline=None)
@given(fraction=st.sampled_from([0.0, 0.5, 1.0]), seed=st.integers(1, 3))
def test_the_example_finishes_a_trace_prefix_in_the_simulator(fraction: float, seed: int) -> None:
    trace = read_swf(ROOT / "examples" / "traces" / "hpc2n-2002-subset.swf.gz")
    trace.jobs = trace.jobs[:300]
    outcomes = simulate(build_workload(trace, fraction, seed), trace.nodes, load_policy())  # type: ignore[arg-type]
    assert len(outcomes) == 300 and all(o.state == "COMPLETED" for o in outcomes)
