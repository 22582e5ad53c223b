"""A policy whose second decision is invalid, in a running daemon: nothing of its pass is
applied (the first job is not left RUNNING with no launch), the daemon carries on, and the
next pass of a policy that behaves starts the job."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from daemon_support import inprocess_daemon, settle
from elastic_protocol.jobspec import JobSpec
from elasticd.policies.base import Decision, Snapshot, Start


class Broken:
    name = "broken"

    def __init__(self) -> None:
        self.broken = True

    def decide(self, snap: Snapshot) -> list[Decision]:
        if not snap.pending:
            return []
        first = Start(snap.pending[0].job_id, 1)
        return [first, Start(999, 1)] if self.broken else [first]


async def test_a_pass_whose_second_decision_is_invalid_applies_nothing_and_the_daemon_goes_on(tmp_path: Path) -> None:
    async with inprocess_daemon(tmp_path / "state", nodes=2) as (d, clock, launcher):
        policy = Broken()
        d.core.policy = policy
        jid = d.submit(JobSpec(name="a", command=["true"], nodes=1))
        await settle()
        job = d.core.job(jid)
        assert job.state.value == "PENDING" and job.hosts == [] and launcher.launches == []
        assert d.core.nodes.free_count == 2
        policy.broken = False
        await clock.advance(d.config.schedule_interval)  # the periodic pass asks again
        assert job.state.value == "RUNNING" and [r.job_id for r in launcher.launches] == [jid]
