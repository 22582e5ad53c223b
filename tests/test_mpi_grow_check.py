"""The check that a spawn-mode MPI grow's ranks appeared on its new hosts, when those hosts
are taken back before it ends (a node lost under the open grow voids it, and the daemon
reclaims every host the grow named). Found on the virtual cluster: the check raised
KeyError for the host no longer in the run, as an unretrieved task exception in the log,
and never recorded what it saw. Runs the launcher's own code in local mode (its rank scan
reads this machine's /proc); no MPI needed."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from elastic_protocol.jobspec import JobSpec
from elasticd.launch.base import LaunchRequest
from elasticd.launch.mpi import MpiLauncher, _MpiRun


class _NoBase:
    """A host launcher with nothing to do: the check never reaches it."""

    async def launch(self, req: LaunchRequest) -> None:
        raise AssertionError("nothing is launched here")

    async def reclaim(self, job_id: int, hosts: tuple[str, ...], grace: float) -> None:
        pass

    async def terminate(self, job_id: int, hosts: tuple[str, ...], passes_on: bool = False) -> None:
        pass

    async def close(self) -> None:
        pass


@pytest.mark.timeout(30)
def test_a_grow_check_whose_new_hosts_were_taken_back_meanwhile_ends_and_records_what_it_saw(tmp_path: Path) -> None:
    async def scenario() -> dict[str, int]:
        launcher = MpiLauncher(lambda on_exit, on_gone: _NoBase(), lambda *a: None, lambda *a: None,
                               kill_wait=1.0, cluster=False)
        launcher.nodes = ["node1", "node2", "node3"]
        spec = JobSpec.model_validate({"name": "m", "command": ["true"], "nodes": {"min": 1, "max": 3},
                                      "kind": "malleable", "launcher": "mpi"})
        req = LaunchRequest(1, spec, ("node1",), ("node1",), "127.0.0.1:1", "s", tmp_path)
        # The grow to node2 and node3 was voided: reclaim took them out of the run already.
        run = _MpiRun(1, req, ["node1"], "1-nosuchrun", tmp_path / "tmp")
        launcher.runs[1] = run
        await asyncio.wait_for(launcher._verify_grow(run, ["node2", "node3"], timeout=20), 10)
        return launcher.verified[1]

    counts = asyncio.run(scenario())
    assert counts == {"node1": 0, "node2": 0, "node3": 0}
