"""SD-Policy's look-ahead (elasticd/policies/sd.py) may skip work, never a decision.

The look-ahead decides which queued jobs are only reserved and when a pass may stop; a
wrong bound there would silently change schedules. So real trace prefixes are replayed
with two SD-Policy instances in lockstep -- one with the look-ahead, one walking the plain
way -- and every pass must give the same decisions. The prefixes are the parts of the
traces where queues grow deep, mates are found, promises are kept and nodes go back.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from elasticd.policies.base import Decision, Grow, Shrink, Snapshot, Start
from elasticd.policies.sd import SdPolicy
from elasticd.sim.simulator import simulate
from elasticd.sim.swf import Trace, read_swf
from elasticd.sim.workload import build_workload

TRACES = Path(__file__).resolve().parent.parent / "examples" / "traces"


class Lockstep:
    """A policy that asks both walks and insists they agree."""

    name = "sd"

    def __init__(self) -> None:
        self.fast = SdPolicy()
        self.plain = SdPolicy(look_ahead=False)
        self.min_resize_interval = self.fast.min_resize_interval
        self.passes = 0
        self.kinds: set[type] = set()

    def decide(self, snap: Snapshot) -> list[Decision]:
        fast, plain = self.fast.decide(snap), self.plain.decide(snap)
        self.passes += 1
        assert fast == plain, f"pass {self.passes} at t={snap.now}: look-ahead {fast} != plain {plain}"
        self.kinds.update(type(d) for d in fast)
        return fast


@pytest.mark.timeout(300)
@pytest.mark.parametrize(("trace_name", "jobs", "fraction", "seed"), [
    ("theta-2023.swf.gz", 700, 1.0, 1),
    ("theta-2023.swf.gz", 700, 0.6, 2),
    ("hpc2n-2002-subset.swf.gz", 1500, 1.0, 3),
    ("nasa-ipsc-1993.swf.gz", 4000, 1.0, 4),
])
def test_look_ahead_decides_exactly_as_the_plain_walk(trace_name: str, jobs: int, fraction: float, seed: int) -> None:
    full = read_swf(TRACES / trace_name)
    trace = Trace(full.name, full.nodes, full.jobs[:jobs])
    both = Lockstep()
    simulate(build_workload(trace, fraction, seed), trace.nodes, both)
    assert both.passes > jobs  # every job was scheduled through both walks
    # The replay exercised what the look-ahead has to get right: starts, lending, giving back.
    assert {Start, Shrink, Grow} <= both.kinds
