"""Fixtures that start real daemons on loopback and clean up every process they started."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest

from elastic_protocol.control import Queue, QueueDocument, Stop, Wait
from elasticd.client import ControlClient
from elasticd.daemonctl import start_detached
from elasticd.statedir import DaemonRecord

BIN = Path(sys.executable).parent


# ---- two tests at a time (pytest-xdist) -----------------------------------------------------
# pyproject's addopts run the suite on two workers (-n 2 --dist loadgroup): most tests wait on
# real daemons, jobs and sockets, each in its own tmp_path, state directory and ports. The
# tests on the virtual cluster (the modules test_cluster_*) share one cluster, brought up and
# down by their modules, and must never overlap: the scheduler below makes them one unit of
# work, which one worker runs one after another while the other takes the rest. It goes out
# first (xdist hands out the largest unit first). The group is found from the test's id, not
# from an xdist_group mark: on pytest 9.2 xdist's loadgroup loses those marks silently
# (pytest-xdist issue 1386).
CLUSTER_GROUP = "vcluster"


def _cluster_module(nodeid: str) -> bool:
    return Path(nodeid.split("::", 1)[0]).name.startswith("test_cluster_")


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log):  # type: ignore[no-untyped-def]
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadGroupScheduling

    class ClusterGroupScheduling(LoadGroupScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return CLUSTER_GROUP if _cluster_module(nodeid) else super()._split_scope(nodeid)

    return ClusterGroupScheduling(config, log)


# ---- nothing written into the repository -------------------------------------------------
# A job file without `working_dir` runs in the submitter's directory, and its default output
# (`elastic-%j.out`) lands there: from a test, in the repository root, where a later `git
# add` would take it. The run fails if a test left a new file or folder there.
_REPO = Path(__file__).resolve().parent.parent
_ROOT_KEY = pytest.StashKey[set[str]]()


def _root_entries() -> set[str]:
    return {p.name for p in _REPO.iterdir() if not p.name.startswith(".")}


def pytest_sessionstart(session: pytest.Session) -> None:
    if not hasattr(session.config, "workerinput"):  # the controller (or the only process)
        session.config.stash[_ROOT_KEY] = _root_entries()


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    before = session.config.stash.get(_ROOT_KEY, None)
    if before is None:
        return
    left = sorted(_root_entries() - before)
    if left:
        session.config.get_terminal_writer().line(
            f"tests left files in the repository root {_REPO}: {left} (give job files a working_dir)", red=True)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    misplaced = [i.nodeid for i in items if "vcluster" in getattr(i, "fixturenames", ()) and not _cluster_module(i.nodeid)]
    if misplaced:
        raise pytest.UsageError(f"tests on the virtual cluster belong in a tests/test_cluster_*.py module (they run "
                                f"one at a time there): {misplaced}")


@dataclass
class RunningDaemon:
    state_dir: Path
    record: DaemonRecord
    nodes: int

    def client(self) -> ControlClient:
        return ControlClient(self.record, "pytest")

    def cli(self, tool: str, *args: str, timeout: float = 30) -> subprocess.CompletedProcess[str]:
        """Run a real console script against this daemon."""
        env = {**os.environ, "ELASTIC_STATE_DIR": str(self.state_dir)}
        return subprocess.run([str(BIN / tool), *args], check=False, capture_output=True, text=True, env=env, timeout=timeout)

    def submit(self, path: Path) -> int:
        """`esubmit` one job file; its job id."""
        r = self.cli("esubmit", "--parsable", str(path))
        assert r.returncode == 0, r.stderr
        return int(r.stdout)

    def resize(self, job_id: int, nodes: int) -> None:
        """`elasticd resize`, which must be accepted."""
        r = self.cli("elasticd", "resize", str(job_id), str(nodes))
        assert r.returncode == 0, r.stderr

    def wait(self, job_ids: list[int], timeout: float = 60) -> None:
        with self.client() as c:
            assert c.request(Wait(job_ids=job_ids, timeout=timeout), timeout=timeout + 5)["done"], \
                f"jobs {job_ids} did not end within {timeout} s"

    def job(self, job_id: int) -> dict:
        return self.jobs(job_id)[job_id]

    def events(self, job_id: int) -> list[str]:
        return [e["event"] for e in self.job(job_id)["events"]]

    def wait_event(self, job_id: int, event: str, count: int = 1, timeout: float = 60) -> dict:
        """Poll the job's event log until `event` has happened `count` times."""
        deadline = time.monotonic() + timeout
        while True:
            info = self.job(job_id)
            if [e["event"] for e in info["events"]].count(event) >= count:
                return info
            if time.monotonic() > deadline:
                raise AssertionError(f"job {job_id}: no {event!r} x{count} within {timeout} s; events {[e['event'] for e in info['events']]}")
            time.sleep(0.02)

    def jobs(self, *job_ids: int) -> dict[int, dict]:
        with self.client() as c:
            doc = QueueDocument.model_validate(c.request(Queue(job_ids=list(job_ids) or None, all=True)))
        return {j.job_id: j.model_dump() for j in doc.jobs}


def stop_daemon(rec: DaemonRecord) -> None:
    """Stop by request; if that fails, end that one pid (never by name)."""
    try:
        with ControlClient(rec, "pytest-teardown", timeout=15) as c:
            c.request(Stop(), timeout=30)
    except Exception:  # noqa: BLE001, S110 - gone already, or unresponsive: ended by pid below
        pass
    try:
        p = psutil.Process(rec.pid)
        p.wait(timeout=30)
    except psutil.NoSuchProcess:
        return
    except psutil.TimeoutExpired:
        p.kill()
        pytest.fail(f"daemon {rec.pid} did not exit after stop")


def start_daemon(
    state_dir: Path, nodes: int = 4, policy: str = "easy", kill_wait: float = 1.0, extra: list[str] | None = None
) -> RunningDaemon:
    rec = start_detached(state_dir, nodes, policy, kill_wait, timeout=60, extra=extra)  # 20 s: short on a loaded CI
    return RunningDaemon(state_dir, rec, nodes)


@pytest.fixture
def daemon(tmp_path: Path) -> Iterator[RunningDaemon]:
    d = start_daemon(tmp_path / "state")
    try:
        yield d
    finally:
        stop_daemon(d.record)


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    w = tmp_path / "work"
    w.mkdir()
    return w


def write_job(folder: Path, name: str, body: str) -> Path:
    path = folder / f"{name}.toml"
    path.write_text(textwrap.dedent(body).lstrip())
    return path


def hosts_shown_free(state_dir: Path, job_id: int) -> list[list[str]]:
    """The hosts the daemon on STATE_DIR has given back from the job, each time it did (its
    log's `job JOB: hosts H1,H2 free`, written as it frees them), in order."""
    mark = f"job {job_id}: hosts "
    frees = []
    for line in (state_dir / "daemon.log").read_text().splitlines():
        at = line.find(mark)
        if at >= 0 and line.endswith(" free"):
            frees.append(line[at + len(mark):-len(" free")].split(","))
    return frees


def of_job(environ: dict[str, str], state_dir: Path, job_id: int) -> bool:
    """Whether a process's environment is that of job JOB_ID of the daemon on STATE_DIR. Job
    ids start at 1 in every daemon and two tests run at a time (pytest-xdist): the id alone
    may be another test's job. A process whose ELASTIC_HOSTFILE is under another state
    directory is another daemon's; one with the id and no hostfile counts."""
    if environ.get("ELASTIC_JOB_ID") != str(job_id):
        return False
    hostfile = environ.get("ELASTIC_HOSTFILE")
    return hostfile is None or Path(os.path.realpath(hostfile)).is_relative_to(state_dir.resolve() / "jobs")


def alive(pid: int) -> bool:
    """Whether the process runs (a zombie, ended and not yet reaped, does not)."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def wait_until(pred, timeout: float = 30.0, step: float = 0.05) -> bool:
    """Whether `pred` came true within `timeout`: a condition, never a measure of speed. The
    defaults here (and wait_event's, read_pid's, wait_gone's) leave room for a loaded 2-core CI
    machine, where a daemon or a Python process takes seconds to start."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(step)
    return pred()


def wait_gone(pid: int, timeout: float = 30.0) -> None:
    """Until the process is gone and reaped; one that went before we looked is gone too
    (psutil.Process raises for it: a killed daemon is detached, and init may reap it first)."""
    try:
        psutil.Process(pid).wait(timeout)
    except psutil.NoSuchProcess:
        pass


def read_pid(f: Path, timeout: float = 30.0) -> int:
    """The pid a test process wrote to `f`, once it is there whole.

    Test processes write their pid with a plain `echo $$ > f` or `write_text`: the file exists,
    empty, before the number is in it, so waiting for the file alone reads '' now and then.
    """
    def whole() -> bool:
        try:
            return f.read_text().strip().isdigit()
        except FileNotFoundError:
            return False
    assert wait_until(whole, timeout), f"no pid in {f}"
    return int(f.read_text())


# ---- the core's invariants, after every event --------------------------------------------
# Core tests drive the pure core by hand; each event they feed it is followed by the one
# check of every invariant (tests/core_support.check_invariants), so no test can leave the
# core inconsistent unnoticed, whatever it asserts itself; in the test_core_* modules each
# event is also applied once in a transaction and rolled back first, which must leave the
# core exactly as it was.
_CORE_TEST_MODULES = ("test_core_", "test_polic", "test_cluster_discovery")


@pytest.fixture(autouse=True)
def _core_invariants_after_every_event(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    module = request.module.__name__.rsplit(".", 1)[-1]
    if not module.startswith(_CORE_TEST_MODULES) or module in ("test_policy_sd_lookahead", "test_policy_baselines"):
        return
    from core_support import check_invariants, fingerprint
    from elasticd.core.engine import Core

    handle = Core.handle
    undo = module.startswith("test_core_")

    def checked(self: Core, event):  # type: ignore[no-untyped-def]
        if undo and self._tx is None and getattr(self.policy, "replayable", True):
            # Every event is first applied in a transaction and rolled back: the core must be
            # exactly as it was (the daemon's rollback when a journal commit fails).
            before = fingerprint(self)
            self.begin()
            try:
                handle(self, event)
            except Exception:  # noqa: BLE001, S110 - the event's own error is checked when applied for real
                pass
            self.rollback()
            assert fingerprint(self) == before, f"rollback of {event!r} left the core changed"
        actions = handle(self, event)
        check_invariants(self, event.time)
        return actions

    monkeypatch.setattr(Core, "handle", checked)


# ---- fault fixtures (tests/faults) --------------------------------------------------------
@pytest.fixture
def tiny_fs(tmp_path: Path) -> Iterator[Path]:
    """A 4 MiB tmpfs to put a state directory on (needs root: mount)."""
    import contextlib
    import shutil

    mnt = tmp_path / "tiny"
    mnt.mkdir()
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("needs root to mount a small file system (the RLIMIT_FSIZE tests cover the rest)")
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m,mode=0700", "tmpfs", str(mnt)], check=True, timeout=10)
    try:
        yield mnt
    finally:
        for p in psutil.process_iter():
            with contextlib.suppress(psutil.Error):
                if any(str(mnt) in (f.path or "") for f in p.open_files()):
                    p.kill()
        subprocess.run(["umount", "-l", str(mnt)], check=False, timeout=10)


@dataclass
class FreezableFs:
    """An 8 MiB ext4 file system that `freeze` makes hang like an NFS mount whose server is
    gone: whatever writes to it, a new file's open included, waits (uninterruptibly) until
    `thaw`."""

    mount: Path

    def freeze(self) -> None:
        subprocess.run(["fsfreeze", "--freeze", str(self.mount)], check=True, timeout=10)

    def thaw(self) -> None:
        subprocess.run(["fsfreeze", "--unfreeze", str(self.mount)], check=False, capture_output=True, timeout=10)


@pytest.fixture
def freezable_fs(tmp_path: Path) -> Iterator[FreezableFs]:
    """Needs root (mount, a loop device) and e2fsprogs, util-linux; thawed and unmounted at the
    end, before the daemons a test started are stopped (request it after `daemons`)."""
    import shutil

    if os.geteuid() != 0 or not all(shutil.which(t) for t in ("mount", "mkfs.ext4", "fsfreeze")):
        pytest.skip("needs root, mkfs.ext4 and fsfreeze to make a file system hang")
    image, mnt = tmp_path / "fs.img", tmp_path / "frozen"
    mnt.mkdir()
    with open(image, "wb") as f:
        f.truncate(8 << 20)
    subprocess.run(["mkfs.ext4", "-q", str(image)], check=True, timeout=30)
    r = subprocess.run(["mount", "-o", "loop", str(image), str(mnt)], check=False, capture_output=True, text=True,
                       timeout=30)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a loop device here: {r.stderr.strip()}")
    fs = FreezableFs(mnt)
    try:
        yield fs
    finally:
        fs.thaw()
        subprocess.run(["umount", "-l", str(mnt)], check=False, timeout=30)


@pytest.fixture
def daemons() -> Iterator[list[RunningDaemon]]:
    """Daemons a test starts (append them): each stopped, or its pid ended, at the end, and
    the processes of their jobs too."""
    import contextlib
    import signal

    started: list[RunningDaemon] = []
    yield started
    for d in started:
        if psutil.pid_exists(d.record.pid):
            with contextlib.suppress(Exception):
                stop_daemon(d.record)
        for f in (d.state_dir / "jobs").glob("*/proc-*.pid"):
            with contextlib.suppress(ValueError, OSError):
                os.killpg(int(f.read_text()), signal.SIGKILL)
