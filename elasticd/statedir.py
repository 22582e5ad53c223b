"""Where a daemon leaves its address and secret for the tools of the same user.

The directory is 0700 and the file 0600: holding the secret is what lets a tool act, so
nobody else on a shared login node may read it.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import logging
import os
import secrets
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import psutil

from elasticd import defaults
from elasticd.errors import DaemonNotRunning, ElasticError, InsecureSecret

DAEMON_FILE = "daemon.json"
LOG_FILE = "daemon.log"


def default_state_dir() -> Path:
    """One daemon per allocation: inside Slurm the directory is named after the job."""
    env = os.environ.get("ELASTIC_STATE_DIR")
    if env:
        return Path(env).expanduser()
    base = Path.home() / ".elastic"
    slurm_job = os.environ.get("SLURM_JOB_ID")
    return base / (f"slurm-{slurm_job}" if slurm_job else "local")


def prepare(path: Path) -> Path:
    path = path.expanduser().resolve()
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    os.chmod(path, 0o700)
    return path


def state_tag(state_dir: Path) -> str:
    """A short name for a state directory, the same across daemon restarts: what its jobs'
    processes carry (ELASTIC_TAG) and its cgroups are named by."""
    return hashlib.sha256(str(state_dir.resolve()).encode()).hexdigest()[:12]


def new_secret() -> str:
    return secrets.token_hex(32)


@dataclass(frozen=True)
class DaemonRecord:
    pid: int
    control_host: str
    control_port: int
    app_host: str
    app_port: int
    secret: str
    version: str
    started_at: float
    kill_wait: float = defaults.KILL_WAIT  # what `elasticd stop` waits on: kill-wait + 5 s at most

    @property
    def control_address(self) -> str:
        return f"{self.control_host}:{self.control_port}"

    @property
    def app_address(self) -> str:
        return f"{self.app_host}:{self.app_port}"


def write_record(path: Path, rec: DaemonRecord) -> None:
    """Write atomically, never readable by others even for an instant."""
    target = path / DAEMON_FILE
    tmp = path / (DAEMON_FILE + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump(asdict(rec), f)
    os.replace(tmp, target)


def read_record(path: Path) -> DaemonRecord | None:
    try:
        data = json.loads((path / DAEMON_FILE).read_text())
        return DaemonRecord(**data)
    except (OSError, ValueError, TypeError):
        return None


def remove_record(path: Path, pid: int) -> None:
    rec = read_record(path)
    if rec is not None and rec.pid == pid:
        (path / DAEMON_FILE).unlink(missing_ok=True)


def move_aside(files: list[Path], why: str) -> list[Path]:
    """Keep files of the state directory that must not be read again, but must not be lost
    either (a damaged journal, a file found where the daemon's own was), beside them: each
    that exists renamed NAME.WHY-STAMP, one stamp for all (a journal and its WAL stay a
    pair). The new paths, in order; OSError from the first rename that fails."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    kept = []
    for f in files:
        if os.path.lexists(f):
            dest = f.with_name(f"{f.name}.{why}-{stamp}")
            os.rename(f, dest)
            kept.append(dest)
    return kept


def hold(path: Path) -> int:
    """Take the state directory for this process (an exclusive lock on the directory
    itself, held until the process ends: a killed daemon leaves no stale lock). The file
    descriptor is returned, to be kept open; ElasticError when another process holds it.

    Why not daemon.json alone: that file can be removed (by hand, a cleanup script) while its
    daemon runs. A second daemon started on the same directory then took over the journal
    and the running jobs of the first: each ended the other's jobs, and a job the second
    reported cancelled was started again by the first. The lock needs no room on the disk
    (nothing is written), so a full or read-only file system does not keep a daemon from it."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)  # not inherited by job processes (O_CLOEXEC)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        holder = holder_pid(path)
        who = f"pid {holder}" if holder is not None else "its pid unknown"
        raise ElasticError(
            f"a daemon is already running for {path} ({who}), though its {DAEMON_FILE} "
            f"{'is gone' if read_record(path) is None else 'names another process'}; "
            f"stop that one first (`kill -TERM {holder if holder is not None else 'PID'}` ends its jobs and exits; "
            "it also writes the file again within its schedule interval), or use another --state-dir"
        ) from None
    except OSError as exc:
        # A file system that cannot lock a directory (NFS turns flock into a POSIX lock,
        # which a directory opened for reading cannot take: EBADF; ENOLCK without a lock
        # daemon): no worse than before the lock, daemon.json alone says who runs.
        logging.getLogger("elasticd").debug("state directory %s cannot be locked (%s)", path, exc.strerror or exc)
    return fd


def holder_pid(path: Path) -> int | None:
    """The pid holding `hold`'s lock on the state directory (Linux: /proc/locks), if any."""
    try:
        st = os.stat(path)
        lines = Path("/proc/locks").read_text().splitlines()
    except OSError:
        return None
    inode = f":{st.st_ino}"
    for line in lines:
        parts = line.split()
        # "1: FLOCK  ADVISORY  WRITE 14476 00:2f:12345 0 EOF" ("->" marks a waiter)
        if len(parts) >= 6 and parts[1] == "FLOCK" and parts[5].endswith(inode):
            major, minor = (int(x, 16) for x in parts[5].split(":")[:2])
            if os.makedev(major, minor) == st.st_dev and parts[4].isdigit():
                return int(parts[4])
    return None


def pid_alive(pid: int) -> bool:
    try:
        p = psutil.Process(pid)
        return p.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def running_daemon(path: Path) -> DaemonRecord:
    """The live daemon of this state directory, or DaemonNotRunning saying how to start one."""
    path = path.expanduser()
    rec = read_record(path)
    if rec is None or not pid_alive(rec.pid):
        raise DaemonNotRunning(
            f"no elastic daemon is running for state directory {path}; "
            "start one with `elasticd start --local N` (or inside a Slurm allocation, "
            "`elasticd start`)"
        )
    check_private(path / DAEMON_FILE)
    return rec


def check_private(file: Path) -> None:
    """Refuse a secret others could read or another user wrote (as ssh refuses an open key):
    using it would hide that anyone on the machine may already act as this user."""
    st = file.stat()
    if st.st_uid != os.getuid():
        raise InsecureSecret(f"{file} belongs to user id {st.st_uid}, not to you; refusing to use its secret")
    if st.st_mode & 0o077:
        raise InsecureSecret(
            f"{file} is readable by others (mode {st.st_mode & 0o777:o}), so its secret may have leaked; "
            f"refusing to use it. Run `chmod 600 {file}`, then restart the daemon "
            "(`elasticd stop`, `elasticd start`) for a new secret"
        )
