"""Containment: finding every process a job started on a host, however it detached.

A process group is what a polite job keeps; a job may `setsid`, double-fork or `setpgid`
its children away from it. Two ways to keep them anyway, the best the machine allows:

- **cgroup** (cgroup v2, where the daemon may create cgroups: root, or a delegated
  subtree): each (job, host) gets its own cgroup under the daemon's, the job's wrapper puts
  itself in before it starts the command, and nothing a process does takes it out. Its
  members are listed by the kernel and ended at once (`cgroup.kill`).
- **sweep** (elsewhere): every job process carries a tag in its environment (ELASTIC_TAG:
  this daemon's tag, the job and the host), found by a scan of /proc; and the daemon is a
  child subreaper (PR_SET_CHILD_SUBREAPER), so a double-forked orphan becomes the daemon's
  child, not init's, and stays findable even if it rewrote its environment — as long as
  the daemon runs (and is collected once it ends: elasticd.launch.reap). What a process
  that both detaches and clears its environment does after a daemon crash is not
  guaranteed here.

Both are used for ending, beside the process group: one SIGTERM to each process (those in
the group get it as the group), `kill_wait`, SIGKILL.
"""

from __future__ import annotations

import ctypes
import logging
import os
import re
import signal
from pathlib import Path

log = logging.getLogger("elasticd.launch.contain")

PR_SET_CHILD_SUBREAPER = 36
PR_GET_CHILD_SUBREAPER = 37


def _cgroup2_mount() -> Path | None:
    try:
        for line in Path("/proc/self/mountinfo").read_text().splitlines():
            parts = line.split(" - ")
            if len(parts) == 2 and parts[1].split()[0] == "cgroup2":
                return Path(parts[0].split()[4])
    except OSError:
        return None
    return None


def _own_cgroup2() -> str | None:
    try:
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            if line.startswith("0::"):
                return line[3:]
    except OSError:
        return None
    return None


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", name)


class Containment:
    """Where a job's processes on a host are: create, list, end, forget."""

    def __init__(self, tag: str) -> None:
        self.tag = tag
        self.mode = "sweep"
        self.base: Path | None = None
        mount, own = _cgroup2_mount(), _own_cgroup2()
        if mount is not None and own is not None and os.environ.get("ELASTIC_NO_CGROUP") != "1":
            base = mount / own.lstrip("/") / f"elastic-{_safe(tag)}"
            try:
                base.mkdir(exist_ok=True)
                if (base / "cgroup.procs").exists():
                    self.base, self.mode = base, "cgroup"
            except OSError:
                pass
        if self.mode == "sweep":
            _become_subreaper()
        log.info("containment of job processes: %s%s", self.mode, f" ({self.base})" if self.base else "")

    # ---- per (job, host) ------------------------------------------------------------------
    def env_tag(self, job_id: int, host: str) -> str:
        return f"{self.tag}/{job_id}/{host}"

    def prepare(self, job_id: int, host: str) -> str:
        """The cgroup the job's wrapper joins before it starts the command ('' for sweep)."""
        if self.base is None:
            return ""
        cg = self.base / f"job-{job_id}-{_safe(host)}"
        try:
            cg.mkdir(exist_ok=True)
        except OSError as exc:
            log.warning("cannot create %s (%s); the job's processes are found by sweep", cg, exc.strerror)
            return ""
        return str(cg)

    def members(self, job_id: int, host: str) -> set[int]:
        """Live processes of the job on that host, by cgroup and by tag."""
        pids: set[int] = set()
        if self.base is not None:
            try:
                text = (self.base / f"job-{job_id}-{_safe(host)}" / "cgroup.procs").read_text()
                pids.update(int(x) for x in text.split())
            except (OSError, ValueError):
                pass
        pids.update(_tagged(self.env_tag(job_id, host).encode()))
        pids.discard(os.getpid())
        return {p for p in pids if _alive(p)}

    def signal(self, job_id: int, host: str, sig: int) -> None:
        if sig == signal.SIGKILL and self.base is not None:
            try:
                (self.base / f"job-{job_id}-{_safe(host)}" / "cgroup.kill").write_text("1")
            except OSError:
                pass
        for pid in self.members(job_id, host):
            try:
                os.kill(pid, sig)
            except (ProcessLookupError, PermissionError):
                pass

    def forget(self, job_id: int, host: str) -> None:
        if self.base is not None:
            try:
                (self.base / f"job-{job_id}-{_safe(host)}").rmdir()
            except OSError:
                pass  # still has members (then it is swept again later) or already gone

    def live_jobs(self) -> dict[int, set[str]]:
        """(job -> hosts) with live processes, by tag and by cgroup."""
        out = tagged_jobs(self.tag)
        if self.base is not None:
            for cg in self.base.glob("job-*"):
                job, _, host = cg.name[len("job-"):].partition("-")
                try:
                    if job.isdigit() and (cg / "cgroup.procs").read_text().split():
                        out.setdefault(int(job), set()).add(host)
                except OSError:
                    continue
        return out

    def close(self) -> None:
        if self.base is not None:
            for cg in self.base.glob("job-*"):
                try:
                    cg.rmdir()
                except OSError:
                    pass
            try:
                self.base.rmdir()
            except OSError:
                pass


def tagged_jobs(tag: str) -> dict[int, set[str]]:
    """Every (job, host) of this daemon's tag that still has a live process: one scan of
    /proc (and of the cgroups), for a start-up sweep over any number of old jobs."""
    prefix = b"ELASTIC_TAG=" + tag.encode() + b"/"
    out: dict[int, set[str]] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/environ", "rb") as f:
                env = f.read()
        except OSError:
            continue
        i = env.find(prefix)
        if i < 0 or not _alive(int(entry.name)):
            continue
        value = env[i + len(prefix): env.find(b"\0", i) if env.find(b"\0", i) >= 0 else None].decode(errors="replace")
        job, _, host = value.partition("/")
        if job.isdigit():
            out.setdefault(int(job), set()).add(host)
    return out


def _become_subreaper() -> None:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
            log.warning("cannot become a child subreaper (errno %d)", ctypes.get_errno())
    except (OSError, AttributeError):
        log.warning("cannot become a child subreaper (no prctl)")


def is_subreaper() -> bool:
    """Whether this process adopts its descendants' orphans (sweep containment makes it
    one, for good): only then has it children it did not start."""
    flag = ctypes.c_int(0)
    try:
        ok = ctypes.CDLL(None, use_errno=True).prctl(PR_GET_CHILD_SUBREAPER, ctypes.byref(flag), 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False
    return ok and flag.value != 0


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0] != b"Z"
    except (OSError, IndexError):
        return False


def _tagged(tag: bytes) -> set[int]:
    """Processes whose environment has ELASTIC_TAG=<tag>."""
    needle = b"ELASTIC_TAG=" + tag + b"\0"
    found = set()
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/environ", "rb") as f:
                env = f.read() + b"\0"
        except OSError:
            continue
        if needle in env:
            found.add(int(entry.name))
    return found
