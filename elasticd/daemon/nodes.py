"""The nodes under the daemon: one found down or up again, and the allocation that grows and
shrinks (cluster mode).

The launcher reports a node it cannot reach, or reaches again (`node_down`, `node_up`); the
allocation's driver (elasticd.daemon.allocation_resize, with `--release-idle` or
`--grow-allocation`) reports nodes added to or removed from the Slurm allocation. Each is
handed to the core as an event, which decides what it means for the jobs there. This part
holds that driver, and tells it of hosts a job gave back before a pass could lend them
again. It never starts or ends a job's processes itself.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from elasticd.core import events as ev
from elasticd.core.engine import Core
from elasticd.daemon.allocation_resize import AllocationResizer, run_every
from elasticd.daemon.clock import Clock
from elasticd.daemon.config import DaemonConfig
from elasticd.daemon.feed import CoreFeed
from elasticd.daemon.tasks import LoopTasks

log = logging.getLogger("elasticd")


class Nodes:
    def __init__(self, config: DaemonConfig, core: Core, clock: Clock, feed: CoreFeed, launcher: object) -> None:
        self.config = config
        self.core = core
        self.clock = clock
        self.feed = feed
        self.launcher = launcher
        self.allocation: AllocationResizer | None = None

    # ---- what the launcher finds -------------------------------------------------------------
    def node_down(self, host: str, why: str) -> None:
        """The launcher cannot reach the node: its job ends (NODE_FAIL) or goes on without it."""
        owner = self.core.nodes.owner_of(host)
        log.warning("node %s down (%s)%s", host, why, "" if owner is None else f"; it runs job {owner}")
        self.feed.do(ev.NodeDown(self.clock.now(), host))
        self.feed.changed()
        self.feed.pass_soon()

    def node_up(self, host: str) -> None:
        log.info("node %s is up again", host)
        self.feed.do(ev.NodeUp(self.clock.now(), host))
        self.feed.changed()
        self.feed.pass_soon()

    # ---- the allocation ----------------------------------------------------------------------
    def nodes_added(self, hosts: list[str], refused: bool = False) -> None:
        """The allocation grew: these nodes (connected by the launcher) take jobs; or
        (`refused`) the batch system refused to take them back and they are used again."""
        self.feed.do(ev.NodesAdded(self.clock.now(), tuple(hosts), refused))
        self.feed.changed()
        self.feed.pass_soon()

    def nodes_removed(self, hosts: list[str]) -> None:
        """Idle nodes leave the allocation."""
        self.feed.do(ev.NodesRemoved(self.clock.now(), tuple(hosts)))
        self.feed.changed()

    async def start_allocation(self, resize: Callable[[int, int], None], tasks: LoopTasks) -> None:
        """Drive the Slurm allocation's size, when this daemon runs in one and was asked to;
        `resize` shrinks a job to give nodes back (--release-policy shrink)."""
        cfg = self.config
        if cfg.allocation_rules is None or not cfg.slurm_job:
            return
        self.allocation = AllocationResizer(
            self.core, self.launcher, cfg.allocation_rules, cfg.slurm_job, cfg.state_dir,
            self.nodes_added, self.nodes_removed, self.clock.now, sbatch_args=cfg.sbatch_args, resize=resize,
            node_down=self.node_down)
        await self.allocation.start()
        tasks.spawn(run_every(1.0, self.allocation.tick), "allocation")

    async def close_allocation(self) -> None:
        """The daemon stops: the companion allocations are given back."""
        if self.allocation is None:
            return
        try:
            await asyncio.wait_for(self.allocation.close(), 10.0)
        except TimeoutError:
            log.error("stopping: giving back the companion allocations took more than 10 s; going on")

    def hosts_freed(self, job_id: int, hosts: list[str]) -> None:
        """A job gave hosts back: told before a pass could lend them again."""
        if self.allocation is not None:
            self.allocation.hosts_freed(job_id, hosts)

    def forget(self, job_id: int) -> None:
        if self.allocation is not None:
            self.allocation.job_ended(job_id)

    def allocation_status(self) -> dict[str, Any] | None:
        return None if self.allocation is None else self.allocation.status()
