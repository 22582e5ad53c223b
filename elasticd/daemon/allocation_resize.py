"""The daemon's own Slurm allocation, shrunk and grown (`--release-idle`, `--grow-allocation`).

What it relies on in Slurm (checked on the 22.05 that deploy/vcluster.sh installs):

- **Shrinking** a running job: `scontrol update JobId=ID NodeList=REMAINING` (any user, for
  their own job; select/cons_tres or cons_res). Slurm frees the nodes at once and writes
  `slurm_job_ID_resize.{sh,csh}` in the working directory (here `STATE/slurm/`). Without an
  accounting database (AccountingStorageType=accounting_storage/none, as on the virtual
  cluster) a job can be resized once only: every later update of it is refused ("the DB
  index is being set", after 5 s in the controller). The daemon then keeps those nodes,
  says why (`elasticd status`), and asks again a minute later at the earliest; releases are
  batched (every node idle long enough, in one update) to make the most of that one.
- **Growing**: Slurm has no in-place grow that works without site configuration
  (`--dependency=expand` needs SchedulerParameters=permit_job_expansion), so more nodes
  come as *companion allocations*: ordinary batch jobs (`sbatch --wrap 'exec sleep ...'`,
  named `elastic-grow-MAINID`, no longer than the daemon's own allocation) that hold their
  nodes for the daemon, which runs processes there over SSH (or `srun --jobid=COMPANION`).
  A companion is given back with `scancel` (all its nodes) or shrunk like the main job.
- `squeue -h -t all -j IDS -o '%i|%T|%N'` to learn when a companion starts or ends.

The decisions are elasticd.core.allocation_plan's; the companions asked for are recorded in
`STATE/companions.json`, so a restarted daemon keeps their nodes (the CLI adds the running
ones to its node list) and still knows the pending ones.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
import shlex
import shutil
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol

from elasticd.cluster import expand_hostlist
from elasticd.core.allocation_plan import (
    AllocationRules,
    AllocationUsage,
    Holding,
    Outstanding,
    PendingNeed,
    Release,
    Request,
    ShrinkToRelease,
    Withdraw,
    plan,
    waiting_for_nodes,
)
from elasticd.core.engine import Core
from elasticd.core.states import JobState
from elasticd.errors import ElasticError

log = logging.getLogger("elasticd.allocation")

COMPANIONS_FILE = "companions.json"
_RETRY_AFTER = 60.0
# A shrink ordered to give nodes back that gave none within this long is not waited for.
_SHRINK_FORGOTTEN = 120.0
_SLURM_TIMEOUT = 30.0


class ResizeLauncher(Protocol):
    async def add_hosts(self, hosts: list[str], slurm_job: str | None = None) -> list[str]: ...

    async def remove_hosts(self, hosts: list[str]) -> None: ...


@dataclass
class Companion:
    slurm_id: str
    count: int
    for_job: int
    state: str = "PENDING"  # as squeue says; "GONE" once Slurm no longer lists it
    hosts: list[str] = field(default_factory=list)  # the nodes it holds for the daemon


def load_companions(state_dir: Path) -> list[Companion]:
    path = state_dir / COMPANIONS_FILE
    try:
        data = json.loads(path.read_text())
        return [Companion(str(c["slurm_id"]), int(c["count"]), int(c["for_job"]), str(c["state"]),
                          [str(h) for h in c["hosts"]]) for c in data]
    except FileNotFoundError:
        return []
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ElasticError(f"{path} is unreadable ({exc}): the companion allocations it lists are unknown; "
                           "cancel them (squeue -n elastic-grow-*) and remove the file") from None


def running_companion_hosts(state_dir: Path) -> list[str]:
    """Nodes of the recorded companions that hold nodes now (for the node list at start)."""
    out: list[str] = []
    for c in load_companions(state_dir):
        if c.state == "RUNNING":
            out += [h for h in c.hosts if h not in out]
    return out


async def _slurm(*argv: str, cwd: Path | None = None) -> tuple[int, str, str]:
    exe = shutil.which(argv[0])
    if exe is None:
        return 127, "", f"{argv[0]} not found on PATH"
    proc = await asyncio.create_subprocess_exec(exe, *argv[1:], cwd=cwd, stdin=asyncio.subprocess.DEVNULL,
                                                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    try:
        out, err = await asyncio.wait_for(proc.communicate(), _SLURM_TIMEOUT)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        return 124, "", f"{argv[0]} did not answer within {_SLURM_TIMEOUT:.0f} s"
    return proc.returncode or 0, out.decode(errors="replace"), err.decode(errors="replace").strip()


class AllocationResizer:
    """Drives elasticd.core.allocation_plan against Slurm, every `interval` seconds."""

    def __init__(self, core: Core, launcher: Any, rules: AllocationRules, main_job: str, state_dir: Path,
                 nodes_added: Callable[[list[str], bool], None], nodes_removed: Callable[[list[str]], None],
                 now: Callable[[], float], sbatch_args: list[str] | None = None, interval: float = 1.0,
                 resize: Callable[[int, int], None] | None = None,
                 node_down: Callable[[str, str], None] | None = None) -> None:
        self.core = core
        self.launcher: ResizeLauncher = launcher
        self.rules = rules
        self.main_job = main_job
        self.state_dir = state_dir
        self.work_dir = state_dir / "slurm"
        self.nodes_added = nodes_added
        self.nodes_removed = nodes_removed
        self.now = now
        self.sbatch_args = list(sbatch_args or [])
        self.interval = interval
        self.resize = resize
        self.node_down = node_down
        # Jobs shrunk to give nodes back (--release-policy shrink): the nodes they free leave.
        self.shrinking: dict[int, float] = {}  # job -> when it was ordered
        self._tasks: set[asyncio.Task[None]] = set()
        self.companions: dict[str, Companion] = {}
        self.idle_since: dict[str, float] = {}
        self.usage = AllocationUsage()
        self.last_error: str | None = None
        self._busy = False
        # A Slurm job whose shrink failed is not asked again before then (each refusal can
        # cost the controller seconds).
        self._retry_after: dict[str, float] = {}

    # ---- life cycle ------------------------------------------------------------------------
    async def start(self) -> None:
        self.work_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        for c in load_companions(self.state_dir):
            if c.state in ("PENDING", "RUNNING"):
                self.companions[c.slurm_id] = c
        members = set(self.core.nodes.members)
        for c in self.companions.values():
            if c.state == "RUNNING":
                held = [h for h in c.hosts if h in members]
                if held:
                    await self.launcher.add_hosts(held, c.slurm_id)
        self.account()
        log.info("allocation: Slurm job %s, %d node(s)%s%s", self.main_job, len(members),
                 f"; nodes idle {self.rules.release_idle:g} s are given back" if self.rules.release_idle else "",
                 f"; grows up to {self.rules.grow_max} nodes" if self.rules.grow_max else "")

    async def close(self) -> None:
        """The daemon stops: companion allocations are given back (they hold nodes for it)."""
        for c in list(self.companions.values()):
            await self._cancel(c, "the daemon stops")
        self._save()

    # ---- accounting --------------------------------------------------------------------------
    def account(self) -> None:
        nodes = self.core.nodes
        idle_down = sum(1 for n in nodes.down if nodes.owner_of(n) is None)
        self.usage.advance(self.now(), nodes.total, nodes.total - nodes.free_count - idle_down)

    def companion_hosts(self) -> frozenset[str]:
        return frozenset(h for c in self.companions.values() if c.state == "RUNNING" for h in c.hosts)

    # ---- one round ---------------------------------------------------------------------------
    async def tick(self) -> None:
        if self._busy:
            return
        self._busy = True
        try:
            self.account()
            await self._poll()
            await self._act()
            self.account()
        except ElasticError as exc:
            self._failed(str(exc))
        finally:
            self._busy = False

    def _failed(self, text: str) -> None:
        if text != self.last_error:
            log.error("allocation: %s", text)
        self.last_error = text

    def _idle_times(self) -> None:
        now = self.now()
        free = set(self.core.nodes.free_hosts())
        for h in list(self.idle_since):
            if h not in free:
                del self.idle_since[h]
        for h in free:
            self.idle_since.setdefault(h, now)

    async def _act(self) -> None:
        self._idle_times()
        core = self.core
        pending = []
        for jid in core.pending_ids:
            if jid in core.cannot_start:  # wider than the allocation may grow: nothing to ask for
                continue
            job = core.job(jid)
            pending.append(PendingNeed(jid, job.bounds[0], job.submit_time))
        pending.sort(key=lambda p: (p.submit_time, p.job_id))
        outstanding = [Outstanding(c.slurm_id, c.count, c.for_job) for c in self.companions.values()
                       if c.state == "PENDING"]
        steps = plan(self.now(), core.nodes.members, core.nodes.free_hosts(), self.idle_since,
                     self.companion_hosts(), pending, outstanding, self.rules, self._holding())
        for step in steps:
            if isinstance(step, ShrinkToRelease):
                if self.resize is not None and step.job_id not in self.shrinking:
                    self.shrinking[step.job_id] = self.now()
                    log.info("allocation: job %d shrinks to %d node(s) to give nodes back (--release-policy shrink)",
                             step.job_id, step.nodes)
                    self.resize(step.job_id, step.nodes)
            elif isinstance(step, Release):
                await self._release(list(step.hosts))
            elif isinstance(step, Request):
                await self._request(step.count, step.for_job)
            elif isinstance(step, Withdraw):
                c = self.companions.get(step.request_id)
                if c is not None:
                    await self._cancel(c, f"job {c.for_job} no longer waits for it")

    def _holding(self) -> list[Holding]:
        if not self.rules.shrink_malleable:
            return []
        core, now = self.core, self.now()
        for jid, t in list(self.shrinking.items()):
            if now - t > _SHRINK_FORGOTTEN:  # refused, or settled without giving hosts back
                del self.shrinking[jid]
        out = []
        for jid in core.active_ids:
            job = core.job(jid)
            if (jid not in self.shrinking and job.state is JobState.RUNNING and job.malleable_ready
                    and not job.deregistered and job.order is None and not job.held):
                since = job.last_resize if job.last_resize is not None else (job.start_time or now)
                out.append(Holding(jid, job.size, job.bounds[2], since))
        return out

    def hosts_freed(self, job_id: int, hosts: list[str]) -> None:
        """A job gave hosts back (before any scheduling pass sees them): those of a shrink
        ordered to give nodes back leave the allocation at once, unless work came meanwhile
        that could use them."""
        if self.shrinking.pop(job_id, None) is None:
            return
        core = self.core
        if waiting_for_nodes((core.job(j).bounds[0] for j in core.pending_ids), core.nodes.total, self.rules):
            return
        first = self.core.nodes.members[0] if self.core.nodes.members else None
        by_job = self._take_out([h for h in hosts if h != first and self.core.nodes.owner_of(h) is None])
        if by_job:
            task = asyncio.ensure_future(self._give_back(by_job))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    def job_ended(self, job_id: int) -> None:
        self.shrinking.pop(job_id, None)

    # ---- giving back -------------------------------------------------------------------------
    async def _release(self, hosts: list[str]) -> None:
        by_job = self._take_out(hosts)
        if by_job:
            await self._give_back(by_job)

    def _take_out(self, hosts: list[str]) -> dict[str, list[str]]:
        """The hosts that can be given back now, out of the node table (so that no job is
        placed there meanwhile), by the Slurm job that holds them."""
        now = self.now()
        owner = {h: c for c in self.companions.values() if c.state == "RUNNING" for h in c.hosts}
        by_job: dict[str, list[str]] = {}
        for h in hosts:
            slurm_id = owner[h].slurm_id if h in owner else self.main_job
            if self._retry_after.get(slurm_id, 0.0) <= now:
                by_job.setdefault(slurm_id, []).append(h)
        if by_job:
            self.account()
            self.nodes_removed([h for leaving in by_job.values() for h in leaving])
        return by_job

    async def _give_back(self, by_job: dict[str, list[str]]) -> None:
        since = self.now()
        gone: list[str] = []
        for slurm_id, leaving in by_job.items():
            c = self.companions.get(slurm_id)
            try:
                if c is not None and set(c.hosts) <= set(leaving):
                    await self._scancel(slurm_id)
                    c.state, c.hosts = "GONE", []
                    del self.companions[slurm_id]
                else:
                    held = c.hosts if c is not None else self._main_nodes()
                    await self._shrink(slurm_id, [h for h in held if h not in leaving])
                    if c is not None:
                        c.hosts = [h for h in c.hosts if h not in leaving]
            except ElasticError as exc:
                why = str(exc)
                if "DB index" in why:
                    why += (" (Slurm without an accounting database, AccountingStorageType=accounting_storage/"
                            "none, resizes a job once only)")
                self._failed(f"cannot give back {','.join(leaving)}: {why}; they stay in the allocation, "
                             f"tried again in {_RETRY_AFTER:.0f} s")
                self._retry_after[slurm_id] = self.now() + _RETRY_AFTER
                # Held all along: the node-seconds out of the table meanwhile count as held.
                self.usage.held += len(leaving) * max(0.0, self.now() - since)
                self.nodes_added(leaving, True)
                continue
            gone += leaving
        if gone:
            await self.launcher.remove_hosts(gone)
            self.usage.released_nodes += len(gone)
            self.account()
            self._save()
            log.info("allocation: gave back %s (idle, nothing pending could use them); %d node(s) held",
                     ",".join(gone), self.core.nodes.total)

    def _main_nodes(self) -> list[str]:
        companion = self.companion_hosts()
        return [h for h in self.core.nodes.members if h not in companion]

    async def _shrink(self, slurm_id: str, remaining: list[str]) -> None:
        rc, out, err = await _slurm("scontrol", "update", f"JobId={slurm_id}", f"NodeList={','.join(remaining)}",
                                    cwd=self.work_dir)
        if rc != 0:
            raise ElasticError(f"scontrol update JobId={slurm_id} NodeList=...: {err or out or f'exit {rc}'}")

    async def _scancel(self, slurm_id: str) -> None:
        rc, out, err = await _slurm("scancel", slurm_id)
        if rc != 0:
            raise ElasticError(f"scancel {slurm_id}: {err or out or f'exit {rc}'}")

    async def _cancel(self, c: Companion, why: str) -> None:
        try:
            await self._scancel(c.slurm_id)
        except ElasticError as exc:
            self._failed(str(exc))
            return
        log.info("allocation: cancelled companion allocation %s (%s)", c.slurm_id, why)
        held = [h for h in c.hosts if h in self.core.nodes.index and h not in self.core.nodes.gone]
        if held:
            busy = [h for h in held if self.core.nodes.owner_of(h) is not None]
            if busy:
                log.warning("allocation: companion %s ends under running jobs on %s", c.slurm_id, ",".join(busy))
            else:
                self.nodes_removed(held)
                await self.launcher.remove_hosts(held)
        self.companions.pop(c.slurm_id, None)
        self._save()

    # ---- asking for more ---------------------------------------------------------------------
    async def _request(self, count: int, for_job: int) -> None:
        # Other nodes than those held: Slurm may share a node between jobs (CR_Core).
        held = [*self.core.nodes.members, *(h for c in self.companions.values() for h in c.hosts)]
        argv = ["sbatch", "--parsable", f"--job-name=elastic-grow-{self.main_job}", f"--nodes={count}",
                f"--exclude={','.join(held)}", f"--output={self.work_dir}/companion-%j.out"]
        minutes = await self._minutes_left()
        if minutes is not None:
            argv.append(f"--time={minutes}")
        argv += [*self.sbatch_args, "--wrap", "exec sleep 2147483647"]
        rc, out, err = await _slurm(*argv, cwd=self.work_dir)
        slurm_id = out.strip().split(";")[0]
        if rc != 0 or not slurm_id.isdigit():
            raise ElasticError(f"{shlex.join(argv[:5])} ...: {err or out or f'exit {rc}'}")
        self.companions[slurm_id] = Companion(slurm_id, count, for_job)
        self._save()
        log.info("allocation: asked Slurm for %d more node(s) for job %d: companion allocation %s",
                 count, for_job, slurm_id)

    async def _minutes_left(self) -> int | None:
        """The main allocation's time left, in whole minutes (a companion never outlives it)."""
        rc, out, _ = await _slurm("squeue", "-h", "-j", self.main_job, "-o", "%L")
        text = out.strip()
        if rc != 0 or not text or text in ("UNLIMITED", "NOT_SET", "INVALID"):
            return None
        m = re.fullmatch(r"(?:(\d+)-)?(?:(\d+):)?(\d+):(\d+)", text)
        if m is None:
            return None
        days, hours, mins, secs = (int(g) if g else 0 for g in m.groups())
        return max(1, days * 1440 + hours * 60 + mins + (1 if secs else 0))

    async def _poll(self) -> None:
        if not self.companions:
            return
        ids = ",".join(sorted(self.companions))
        rc, out, err = await _slurm("squeue", "-h", "-t", "all", "-j", ids, "-o", "%i|%T|%N")
        if rc != 0 and "Invalid job id" not in err:
            raise ElasticError(f"squeue -j {ids}: {err or f'exit {rc}'}")
        seen: dict[str, tuple[str, str]] = {}
        for line in out.splitlines():
            sid, state, nodes = (line.strip().split("|") + ["", ""])[:3]
            seen[sid] = (state, nodes)
        for c in list(self.companions.values()):
            state, nodes = seen.get(c.slurm_id, ("GONE", ""))
            if c.state == "PENDING" and state == "RUNNING":
                await self._granted(c, expand_hostlist(nodes))
            elif state not in ("PENDING", "RUNNING", "CONFIGURING"):
                await self._lost(c, state)

    async def _granted(self, c: Companion, hosts: list[str]) -> None:
        new = [h for h in hosts if h not in self.core.nodes.members]
        added = await self.launcher.add_hosts(new, c.slurm_id) if new else []
        c.state, c.hosts = "RUNNING", added
        self._save()
        if not added:
            await self._cancel(c, "none of its nodes could be reached")
            return
        self.account()
        self.nodes_added(added, False)
        self.account()
        log.info("allocation: companion allocation %s started: %s join (%d node(s) held)",
                 c.slurm_id, ",".join(added), self.core.nodes.total)

    async def _lost(self, c: Companion, state: str) -> None:
        """Slurm ended a companion (its time limit, an administrator): its nodes are gone."""
        log.warning("allocation: companion allocation %s ended by Slurm (%s)", c.slurm_id, state)
        held = [h for h in c.hosts if h in self.core.nodes.members]
        idle = [h for h in held if self.core.nodes.owner_of(h) is None]
        if idle:
            self.nodes_removed(idle)
            await self.launcher.remove_hosts(idle)
        busy = [h for h in held if h not in idle]
        if busy:
            # The jobs there lose those nodes, as in a node failure (SSH may still reach
            # them, but they are no longer the daemon's); once idle, they leave (next poll).
            for h in busy:
                if h not in self.core.nodes.down and self.node_down is not None:
                    self.node_down(h, f"companion allocation {c.slurm_id} ended ({state})")
            return
        self.companions.pop(c.slurm_id, None)
        self._save()

    def _save(self) -> None:
        path = self.state_dir / COMPANIONS_FILE
        tmp = path.with_suffix(".tmp")
        try:
            tmp.write_text(json.dumps([asdict(c) for c in self.companions.values()]) + "\n")
            os.replace(tmp, path)
        except OSError as exc:
            self._failed(f"cannot record the companion allocations in {path}: {exc.strerror or exc}")

    def status(self) -> dict[str, Any]:
        self.account()
        return {
            "slurm_job": self.main_job,
            "release_idle": self.rules.release_idle,
            "release_policy": "shrink" if self.rules.shrink_malleable else "idle",
            "grow_max": self.rules.grow_max,
            "companions": [asdict(c) for c in self.companions.values()],
            "node_seconds": self.usage.as_dict(),
            "error": self.last_error,
        }


async def run_every(interval: float, step: Callable[[], Awaitable[None]]) -> None:
    while True:
        await asyncio.sleep(interval)
        try:
            await step()
        except Exception:
            log.exception("allocation: a round failed")
