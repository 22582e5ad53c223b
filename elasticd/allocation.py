"""Which Slurm allocation a state directory belongs to.

Job ids are not unique over a cluster's life: they restart when the controller's state is
reset, and the default state directory is named after the job id. A daemon that recovered
the journal of an earlier allocation with the same id would restart its jobs on nodes it
does not hold. So the directory records its allocation (cluster name, job id, start time)
at the first start, and a daemon in another allocation never recovers it.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path

from elasticd.errors import ElasticError, StateWriteError

ALLOCATION_FILE = "allocation.json"


class OtherAllocation(ElasticError):
    """The state directory belongs to another Slurm allocation than the daemon's."""

    code = "other_allocation"


@dataclass(frozen=True)
class Allocation:
    cluster: str
    job_id: str
    start_time: str  # as Slurm reports it; "" where it could not be learnt

    def describe(self) -> str:
        start = f", started {self.start_time}" if self.start_time else ""
        return f"Slurm job {self.job_id} on cluster {self.cluster or '?'}{start}"

    def same_as(self, other: Allocation) -> bool:
        # An unknown start time matches nothing but itself: a daemon that cannot tell must
        # not recover a journal that may be another allocation's.
        return (self.cluster, self.job_id, self.start_time) == (other.cluster, other.job_id, other.start_time)


def current_allocation(environ: Mapping[str, str] | None = None) -> Allocation | None:
    """The allocation this process runs in, or None outside Slurm."""
    env = os.environ if environ is None else environ
    job = env.get("SLURM_JOB_ID") or env.get("SLURM_JOBID")
    if not job:
        return None
    start = env.get("SLURM_JOB_START_TIME") or _start_time(job, env)
    return Allocation(env.get("SLURM_CLUSTER_NAME", ""), job, start)


def _start_time(job: str, env: Mapping[str, str]) -> str:
    """StartTime from `scontrol show job` (Slurm before 23.02 sets no SLURM_JOB_START_TIME)."""
    try:
        r = subprocess.run(["scontrol", "show", "job", "-o", job], capture_output=True, text=True, timeout=15,
                           env=dict(env), check=False)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    m = re.search(r"\bStartTime=(\S+)", r.stdout)
    return m.group(1) if r.returncode == 0 and m else ""


def held_nodes(job: str, env: Mapping[str, str] | None = None) -> str | None:
    """The allocation's NodeList as Slurm has it now (SLURM_JOB_NODELIST is the one at its
    start: stale once the daemon gave nodes back); None when scontrol cannot tell."""
    try:
        r = subprocess.run(["scontrol", "show", "job", "-o", job], capture_output=True, text=True, timeout=15,
                           env=dict(os.environ if env is None else env), check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    m = re.search(r"(?:^|\s)NodeList=(\S+)", r.stdout)
    return m.group(1) if r.returncode == 0 and m and m.group(1) != "(null)" else None


def recorded_allocation(state_dir: Path) -> Allocation | None:
    path = state_dir / ALLOCATION_FILE
    try:
        data = json.loads(path.read_text())
        return Allocation(str(data["cluster"]), str(data["job_id"]), str(data["start_time"]))
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise OtherAllocation(f"{path} is unreadable ({exc}): which allocation this state directory "
                              "belongs to is unknown; remove the directory or use another --state-dir") from None


def bind(state_dir: Path, current: Allocation | None, *, movable: bool) -> Path | None:
    """Check that `state_dir` is this allocation's, recording it at the first start.

    A directory of another allocation is refused (OtherAllocation) — or, when it is the
    default directory (`movable`), set aside under a name that says whose it was, and its
    path returned so that the caller can say so; the daemon then starts in a fresh one.
    """
    recorded = recorded_allocation(state_dir)
    if recorded is None:
        if current is not None:
            _write(state_dir, current)
        return None
    if current is not None and recorded.same_as(current):
        return None
    here = current.describe() if current is not None else "no Slurm allocation"
    if not movable:
        raise OtherAllocation(
            f"{state_dir} belongs to {recorded.describe()}, and this daemon runs in {here}: "
            "its jobs are not this allocation's to recover; use another --state-dir (or remove that one)")
    aside = state_dir.with_name(f"{state_dir.name}.other-{_slug(recorded)}-{int(time.time())}")
    state_dir.rename(aside)
    state_dir.mkdir(mode=0o700)
    if current is not None:
        _write(state_dir, current)
    return aside


def _slug(a: Allocation) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", f"{a.cluster or 'cluster'}-{a.job_id}-{a.start_time or 'unknown'}")


def _write(state_dir: Path, a: Allocation) -> None:
    path = state_dir / ALLOCATION_FILE
    tmp = path.with_suffix(".tmp")
    try:
        tmp.write_text(json.dumps(asdict(a)) + "\n")
        os.replace(tmp, path)
    except OSError as exc:
        raise StateWriteError(f"cannot record the allocation in {path}: {exc.strerror or exc}") from None
