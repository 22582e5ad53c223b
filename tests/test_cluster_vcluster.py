"""Cluster mode on a real cluster: deploy/vcluster.sh's network namespaces, each with its
own address, sshd and slurmd; munge and slurmctld on this machine.

The cluster comes up once for the module (with the project's own script) and is always
torn down at the end if this module brought it up. Everything here needs root and the
Debian packages; without them the tests skip and say why (CI runs them for real: .ci/run
installs the packages first).

Where a process runs is checked from the outside: its network namespace
(/proc/PID/ns/net against /run/netns/ec-nN) and the host name it printed (`hostname`).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest

from conftest import BIN, RunningDaemon, alive, read_pid, stop_daemon, wait_until, write_job
from elasticd.daemonctl import start_detached
from elasticd.statedir import read_record, state_tag
from sigterm_support import assert_one_sigterm_each, counter_job, started

ROOT = Path(__file__).resolve().parent.parent
VCLUSTER = ROOT / "deploy" / "vcluster.sh"
RECORDER = Path(__file__).parent / "apps" / "recorder.py"
STATE = Path(os.environ.get("VCLUSTER_STATE", "/run/elastic-vcluster"))
NODES = ("node1", "node2", "node3")


@dataclass(frozen=True)
class VCluster:
    state: Path

    @property
    def ssh_config(self) -> Path:
        return self.state / "ssh_config"

    @property
    def slurm_conf(self) -> Path:
        return self.state / "slurm.conf"

    def env(self, **extra: str) -> dict[str, str]:
        path = f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"
        return {**os.environ, "SLURM_CONF": str(self.slurm_conf), "ELASTIC_SSH_CONFIG": str(self.ssh_config),
                "PATH": path, **extra}


def _skip_reason() -> str | None:
    if os.geteuid() != 0:
        return "needs root: network namespaces and the cluster's daemons need CAP_NET_ADMIN/CAP_SYS_ADMIN"
    if shutil.which("ip") is None or shutil.which("nsenter") is None:
        return "needs `ip` (iproute2) and `nsenter` (util-linux)"
    probe = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, timeout=10, check=False)
    if probe.returncode != 0:
        return f"`ip netns` does not work here: {probe.stderr.strip()}"
    missing = [b for b in ("salloc", "slurmctld", "slurmd", "munged", "sshd") if not _which_any(b)]
    if missing:
        r = subprocess.run([str(VCLUSTER), "install"], capture_output=True, text=True, timeout=600, check=False)
        if r.returncode != 0:
            return f"packages not installable ({', '.join(missing)} missing): {r.stderr.strip()[-300:]}"
    return None


def _which_any(name: str) -> bool:
    return shutil.which(name) is not None or Path("/usr/sbin", name).exists()


def _status_ok() -> bool:
    return subprocess.run([str(VCLUSTER), "status"], capture_output=True, timeout=30, check=False).returncode == 0


@pytest.fixture(scope="module")
def vcluster() -> Iterator[VCluster]:
    reason = _skip_reason()
    if reason:
        pytest.skip(reason)
    was_up = _status_ok()
    try:
        if not was_up:
            r = subprocess.run([str(VCLUSTER), "up"], capture_output=True, text=True, timeout=120, check=False)
            assert r.returncode == 0, f"vcluster up failed:\n{r.stdout}\n{r.stderr}"
        yield VCluster(STATE)
    finally:
        for i in range(1, 4):  # a failed test may have left a link down
            subprocess.run(["ip", "link", "set", f"veth-n{i}", "up"], capture_output=True, timeout=10, check=False)
        # A failed test may have left job processes on the nodes (a daemon killed before
        # it could end them): end their groups, found by namespace and job environment.
        for pid, node, cmd in job_processes():
            print(f"ending leftover job process {pid} on {node}: {cmd}", file=sys.stderr)
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(os.getpgid(pid), signal.SIGKILL)
        if not was_up:
            subprocess.run([str(VCLUSTER), "down"], capture_output=True, text=True, timeout=120, check=False)


# ---- where processes are -------------------------------------------------------------------
def netns_inode(node: str) -> int:
    return os.stat(f"/run/netns/ec-n{node.removeprefix('node')}").st_ino


def node_of(pid: int) -> str | None:
    """Which namespace node the process runs in (None: not one of them, or gone)."""
    try:
        ino = os.stat(f"/proc/{pid}/ns/net").st_ino
    except OSError:
        return None
    return next((n for n in NODES if netns_inode(n) == ino), None)


def job_processes() -> list[tuple[int, str, str]]:
    """Every live process of an elastic job on a namespace node: (pid, node, command)."""
    found = []
    for p in psutil.process_iter(["pid", "cmdline", "status"]):
        try:
            if p.info["status"] == psutil.STATUS_ZOMBIE:
                continue
            node = node_of(p.pid)
            if node is not None and "ELASTIC_JOB_ID" in p.environ():
                found.append((p.pid, node, " ".join(p.info["cmdline"] or [])))
        except (psutil.Error, OSError):
            continue
    return found


def pid_file(folder: Path, name: str, timeout: float = 20) -> int:
    return read_pid(folder / name, timeout)


def set_link(node: str, up: bool) -> None:
    subprocess.run(["ip", "link", "set", f"veth-n{node.removeprefix('node')}", "up" if up else "down"],
                   check=True, timeout=10)


def recorder_job(folder: Path, nodes: str, name: str = "rec") -> Path:
    # `hostname` first: the job's output then names the host each process ran on.
    return write_job(folder, name, f'''
        name = "{name}"
        command = ["sh", "-c", "hostname; exec {sys.executable} {RECORDER}"]
        nodes = {nodes}
        kind = "malleable"
        working_dir = "."
        output = "{name}-%N.out"
        time_limit = "3"
    ''')


def rigid_job(folder: Path, nodes: int, name: str = "rigid") -> Path:
    return write_job(folder, name, f'''
        name = "{name}"
        command = ["sh", "-c", "hostname; echo $$ > pid-{name}-$ELASTIC_HOST; exec sleep 600"]
        nodes = {nodes}
        working_dir = "."
        output = "{name}-%N.out"
        time_limit = "3"
    ''')


def node_states(d: RunningDaemon) -> dict[str, str]:
    r = d.cli("elasticd", "status", "--json")
    assert r.returncode == 0, r.stderr
    return {n["name"]: n["state"] for n in json.loads(r.stdout)["nodes"]}


def first_line(path: Path) -> str:
    assert wait_until(lambda: path.exists() and path.read_text().strip() != "", 30), f"{path} stays empty"
    return path.read_text().splitlines()[0].strip()


def status_dir(state: Path) -> Path:
    """Where the node monitors of the daemon on STATE record its jobs' processes (a folder per
    node; the nodes share this machine's /tmp)."""
    return Path(f"/tmp/elastic-{os.getuid()}-{state_tag(state)}")


def records(state: Path, node: str, job: int) -> list[str]:
    """The monitor records of JOB's processes on NODE (what a restart takes them over by)."""
    folder = status_dir(state) / node
    return sorted(p.name for p in folder.glob(f"{job}.*")) if folder.exists() else []


def assert_no_job_process_left(timeout: float = 30) -> None:
    assert wait_until(lambda: not job_processes(), timeout), f"job processes left: {job_processes()}"


def cluster_daemon(vc: VCluster, state_dir: Path, hosts: str, ssh_config: Path | None = None,
                   extra: list[str] | None = None) -> RunningDaemon:
    args = ["--hosts", hosts, "--ssh-config", str(ssh_config or vc.ssh_config), *(extra or [])]
    rec = start_detached(state_dir, None, "easy", 2.0, extra=args, timeout=40)
    return RunningDaemon(state_dir, rec, len(NODES))


# ---- the user's path: salloc, elasticd start, jobs across the nodes --------------------------
@pytest.mark.timeout(175)
@pytest.mark.parametrize("launcher", ["ssh", "srun"])
def test_salloc_elasticd_start_rigid_and_malleable_jobs_across_nodes(vcluster: VCluster, tmp_path: Path,
                                                                     launcher: str) -> None:
    t0 = time.monotonic()
    state = tmp_path / "state"
    work = tmp_path / "work"
    work.mkdir()
    env = vcluster.env(ELASTIC_STATE_DIR=str(state))
    # Inside the allocation: start the daemon (cluster mode from SLURM_JOB_NODELIST; the
    # processes started over SSH, or as job steps with srun), then hold the allocation
    # until the daemon is stopped.
    script = (f"elasticd start --kill-wait 2 --launcher {launcher} && "
              "while elasticd status >/dev/null 2>&1; do sleep 0.3; done")
    log = open(tmp_path / "salloc.log", "w")  # noqa: SIM115 - closed once salloc has exited
    salloc = subprocess.Popen(["salloc", "-N3", "-t", "5", "-J", "elastic-e2e", "sh", "-c", script],
                              env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                              start_new_session=True)
    d: RunningDaemon | None = None
    try:
        assert wait_until(lambda: read_record(state) is not None or salloc.poll() is not None, 60), \
            "the daemon did not start inside the allocation"
        rec = read_record(state)
        assert rec is not None, (tmp_path / "salloc.log").read_text()
        d = RunningDaemon(state, rec, 3)
        # Applications reach the daemon on the bridge, not on loopback.
        assert rec.app_host == "10.200.0.1"
        status = d.cli("elasticd", "status")
        assert status.returncode == 0, status.stderr
        assert "mode cluster" in status.stdout
        assert node_states(d) == {n: "idle" for n in NODES}
        started = (tmp_path / "salloc.log").read_text()
        assert "nodes from Slurm job" in started and "node[1-3]" in started and f"launcher {launcher}" in started

        rigid = d.submit(rigid_job(work, 1))
        assert wait_until(lambda: d.job(rigid)["state"] == "RUNNING", 60)
        rigid_node = d.job(rigid)["hosts"][0]
        rigid_pid = pid_file(work, f"pid-rigid-{rigid_node}")
        assert node_of(rigid_pid) == rigid_node
        assert first_line(work / f"rigid-{rigid_node}.out") == rigid_node

        mall = d.submit(recorder_job(work, "{ min = 1, max = 2, preferred = 1 }"))
        info = d.wait_event(mall, "registered", timeout=30)
        first = info["hosts"][0]
        leader = pid_file(work, f"pid-{first}")
        assert node_of(leader) == first != rigid_node
        assert first_line(work / f"rec-{first}.out") == first
        (third,) = [n for n in NODES if n not in (first, rigid_node)]
        shrinks = 0

        def shrink_off_third(pid: int) -> None:
            # The process there is verified gone; the leader runs on.
            nonlocal shrinks
            shrinks += 1
            assert d.cli("elasticd", "resize", str(mall), "1").returncode == 0
            info = d.wait_event(mall, "shrunk", count=shrinks, timeout=30)
            assert info["hosts"] == [first]
            assert not alive(pid), "a process of the job is left on the released node"
            assert alive(leader)
            assert [p for p in job_processes() if p[1] == third] == []

        if info["hosts"] == [first, third]:  # the policy started it at its maximum
            worker = pid_file(work, f"pid-{third}")
            assert node_of(worker) == third
            shrink_off_third(worker)

        # Grow onto the third node: a new process there, in that node's namespace.
        assert d.cli("elasticd", "resize", str(mall), "2").returncode == 0
        info = d.wait_event(mall, "grown", timeout=30)
        assert info["hosts"] == [first, third]
        joined = pid_file(work, f"pid-{third}-joining")
        assert node_of(joined) == third
        assert third in (work / f"rec-{third}.out").read_text().split()
        assert node_states(d) == {n: "allocated" for n in NODES}

        # And shrink off it again.
        shrink_off_third(joined)

        # Cancel both: CANCELLED, and no process of any job is left anywhere.
        r = d.cli("ecancel", str(rigid), str(mall))
        assert r.returncode == 0, r.stderr
        d.wait([rigid, mall], timeout=30)
        assert d.job(rigid)["state"] == "CANCELLED" and d.job(mall)["state"] == "CANCELLED"
        assert not alive(rigid_pid) and not alive(leader)
        assert_no_job_process_left()
    finally:
        if d is not None:
            stop_daemon(d.record)
        try:
            salloc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(salloc.pid, signal.SIGTERM)
            salloc.wait(timeout=30)
        log.close()
    # The allocation is released with the daemon gone; nothing of it is left.
    assert salloc.returncode == 0, (tmp_path / "salloc.log").read_text()
    assert_no_job_process_left()
    squeue = subprocess.run(["squeue", "-h", "-n", "elastic-e2e", "-t", "R,PD,CG"], env=vcluster.env(),
                            capture_output=True, text=True, timeout=30, check=False)
    assert squeue.stdout.strip() == "", squeue.stdout
    assert time.monotonic() - t0 < 170


# ---- nodes that cannot be reached --------------------------------------------------------------
@pytest.mark.timeout(120)
def test_unreachable_nodes_start_down_and_one_that_comes_back_is_used(vcluster: VCluster, tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    # node4 names an address on the bridge where nothing answers.
    cfg = tmp_path / "ssh_config"
    cfg.write_text("Host node4\n    HostName 10.200.0.14\n" + vcluster.ssh_config.read_text())
    set_link("node3", False)
    d = None
    try:
        d = cluster_daemon(vcluster, tmp_path / "state", "node[1-4]", cfg,
                           ["--connect-timeout", "2", "--node-retry", "1"])
        assert node_states(d) == {"node1": "idle", "node2": "idle", "node3": "down", "node4": "down"}
        jid = d.submit(rigid_job(work, 3, "wide"))
        time.sleep(1.0)
        assert d.job(jid)["state"] == "PENDING"
        set_link("node3", True)
        assert wait_until(lambda: d.job(jid)["state"] == "RUNNING", 30), d.job(jid)
        assert d.job(jid)["hosts"] == ["node1", "node2", "node3"]
        for n in ("node1", "node2", "node3"):
            assert node_of(pid_file(work, f"pid-wide-{n}")) == n
            assert first_line(work / f"wide-{n}.out") == n
        assert node_states(d)["node4"] == "down"
        assert d.cli("ecancel", str(jid)).returncode == 0
        d.wait([jid], timeout=30)
        assert d.job(jid)["state"] == "CANCELLED"
        assert_no_job_process_left()
    finally:
        set_link("node3", True)
        if d is not None:
            stop_daemon(d.record)
    assert_no_job_process_left()


@pytest.mark.timeout(120)
def test_a_job_whose_output_is_a_fifo_nobody_reads_holds_neither_the_daemon_nor_its_node(
        vcluster: VCluster, tmp_path: Path) -> None:
    """The node agent opens the job's files without waiting; the job's own process waits
    for the FIFO's reader (a spawn that waited would hold the node's SSH calls until it
    timed out, and the node would be taken for down)."""
    work = tmp_path / "work"
    work.mkdir()
    os.mkfifo(work / "job.fifo")
    d = None
    try:
        d = cluster_daemon(vcluster, tmp_path / "state", "node[1-2]")
        waiting = d.submit(write_job(work, "waiting", '''
            name = "waiting"
            command = ["sh", "-c", "hostname"]
            nodes = 1
            working_dir = "."
            output = "job.fifo"
            time_limit = "3"
        '''))
        assert d.wait_event(waiting, "launched", timeout=30)["hosts"] == ["node1"]
        other = d.submit(rigid_job(work, 1, "other"))
        assert wait_until(lambda: d.job(other)["state"] == "RUNNING", 30), d.job(other)
        assert first_line(work / "other-node2.out") == "node2"
        assert d.cli("ecancel", str(other)).returncode == 0
        d.wait([other], timeout=30)
        assert d.job(waiting)["state"] == "RUNNING" and node_states(d)["node1"] == "allocated"
        with open(work / "job.fifo") as f:
            assert f.read() == "node1\n"
        d.wait([waiting], timeout=30)
        assert d.job(waiting)["state"] == "COMPLETED", d.job(waiting)
        assert_no_job_process_left()
    finally:
        if d is not None:
            stop_daemon(d.record)
    assert_no_job_process_left()


@pytest.mark.timeout(150)
def test_node_that_drops_mid_job_fails_rigid_jobs_shrinks_malleable_ones_and_is_cleaned_on_return(
    vcluster: VCluster, tmp_path: Path
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    d = None
    try:
        d = cluster_daemon(vcluster, tmp_path / "state", "node[1-3]",
                           extra=["--node-timeout", "4", "--node-retry", "1", "--connect-timeout", "2"])
        rigid = d.submit(rigid_job(work, 1))
        assert wait_until(lambda: d.job(rigid)["state"] == "RUNNING", 60)
        assert d.job(rigid)["hosts"] == ["node1"]
        rigid_pid = pid_file(work, "pid-rigid-node1")
        mall = d.submit(recorder_job(work, "{ min = 1, max = 2 }"))
        info = d.wait_event(mall, "registered", timeout=30)
        assert info["hosts"] == ["node2", "node3"]
        worker = pid_file(work, "pid-node3")
        assert node_of(worker) == "node3"

        # node3's link goes down: the malleable job goes on without it.
        set_link("node3", False)
        info = d.wait_event(mall, "node_failed", timeout=60)
        info = d.wait_event(mall, "released", timeout=60)
        assert info["hosts"] == ["node2"] and info["state"] == "RUNNING"
        assert node_states(d)["node3"] == "down"

        # node1's link goes down: its rigid job fails as NODE_FAIL.
        set_link("node1", False)
        d.wait([rigid], timeout=30)
        info = d.job(rigid)
        assert info["state"] == "NODE_FAIL" and "node1" in info["reason"]
        # Cut off, both processes still run: the daemon could not reach them.
        assert alive(rigid_pid) and alive(worker)

        # Back: the processes of the lost jobs are ended there before the nodes are used.
        set_link("node1", True)
        set_link("node3", True)
        assert wait_until(lambda: not alive(rigid_pid) and not alive(worker), 30)
        assert wait_until(lambda: node_states(d) == {"node1": "idle", "node2": "allocated", "node3": "idle"}, 30), \
            node_states(d)
        assert d.cli("ecancel", str(mall)).returncode == 0
        d.wait([mall], timeout=30)
        assert d.job(mall)["state"] == "CANCELLED"
        assert_no_job_process_left()
    finally:
        set_link("node1", True)
        set_link("node3", True)
        if d is not None:
            stop_daemon(d.record)
    assert_no_job_process_left()


@pytest.mark.timeout(170)
def test_the_node_agent_gives_each_process_one_sigterm_on_shrink_cancel_time_limit_and_stop(
        vcluster: VCluster, tmp_path: Path) -> None:
    """The SSH launcher's ends (tests/sigterm_support.py): a shrink, then a cancel of the rest
    of that job (the released host's processes had theirs: none again), a time limit, a stop.
    Each process runs on a while after its SIGTERM, well within the kill-wait; the first
    process of each job ends before its child, so the job's own end (one more `end` call on
    the node) finds the child there, SIGTERMed already: it must not be signalled again."""
    dirs = {name: tmp_path / name for name in ("mall", "limited", "stopped")}
    for folder in dirs.values():
        folder.mkdir()
    rec = start_detached(tmp_path / "state", None, "easy", 10.0, timeout=40,
                         extra=["--hosts", "node[1-3]", "--ssh-config", str(vcluster.ssh_config)])
    d = RunningDaemon(tmp_path / "state", rec, len(NODES))
    try:
        early = {"LINGER": "0.2", "CHILD_LINGER": "2.5"}
        mall = d.submit(counter_job(dirs["mall"], "{ min = 1, max = 2 }", kind="malleable",
                                    env={"REGISTER": "1", **early}))
        mall_pids = started(dirs["mall"], 4)
        assert wait_until(lambda: (dirs["mall"] / "registered").exists(), 30)
        limited = d.submit(counter_job(dirs["limited"], "1", time_limit="0:05", env=early))
        limited_pids = started(dirs["limited"], 2)

        hosts = d.job(mall)["hosts"]
        r = d.cli("elasticd", "resize", str(mall), "1", "--hold")
        assert r.returncode == 0, r.stdout + r.stderr
        released = {pid: h for pid, h in mall_pids.items() if h == hosts[1]}
        assert wait_until(lambda: d.job(mall)["hosts"] == hosts[:1], 30), d.job(mall)
        assert_one_sigterm_each(dirs["mall"], released)

        assert d.cli("ecancel", str(mall)).returncode == 0
        d.wait([mall, limited], timeout=40)
        assert d.job(mall)["state"] == "CANCELLED" and d.job(limited)["state"] == "TIMEOUT"
        assert_one_sigterm_each(dirs["mall"], mall_pids)
        assert_one_sigterm_each(dirs["limited"], limited_pids)

        d.submit(counter_job(dirs["stopped"], "2"))
        stopped_pids = started(dirs["stopped"], 4)
        r = d.cli("elasticd", "stop", timeout=60)
        assert r.returncode == 0, r.stderr
        assert_one_sigterm_each(dirs["stopped"], stopped_pids)
    finally:
        stop_daemon(d.record)
    assert_no_job_process_left()


# ---- deploy/: the sbatch template and the fabric checks ----------------------------------------
@pytest.mark.timeout(150)
def test_sbatch_template_runs_a_batch_through_elasticd_and_writes_the_report(
    vcluster: VCluster, tmp_path: Path
) -> None:
    jobs = tmp_path / "jobs"
    (jobs / "out").mkdir(parents=True)
    write_job(jobs, "01-hello", '''
        name = "hello"
        command = ["sh", "-c", "echo hello from $(hostname) as $ELASTIC_HOST; sleep 1"]
        nodes = 1
        working_dir = "."
        output = "out/%x-%j.out"
    ''')
    write_job(jobs, "02-synthetic", '''
        name = "synthetic"
        command = ["python3", "-m", "elastic_apps.synthetic", "--work", "4"]
        nodes = { min = 1, max = 3 }
        kind = "malleable"
        working_dir = "."
        output = "out/%x-%j.out"
        submit_offset = 0.5
    ''')
    env = vcluster.env(ELASTIC_VENV=str(BIN.parent), ELASTIC_REPORT=str(tmp_path / "report"),
                       ELASTIC_STATE_DIR=str(tmp_path / "state"))
    log = tmp_path / "batch.log"
    r = subprocess.run(["sbatch", "-N3", "-t", "5", "--parsable", "-o", str(log),
                        str(ROOT / "deploy" / "sbatch-elastic.sh"), "jobs", "--kill-wait", "2"],
                       cwd=tmp_path, env=env, capture_output=True, text=True, timeout=30, check=False)
    assert r.returncode == 0, r.stderr
    job_id = r.stdout.strip().split(";")[0]
    try:
        def finished() -> bool:
            q = subprocess.run(["squeue", "-h", "-j", job_id], env=env, capture_output=True, text=True,
                               timeout=30, check=False)
            return q.stdout.strip() == ""

        assert wait_until(finished, 120, step=0.5), log.read_text() if log.exists() else "no log"
    finally:
        subprocess.run(["scancel", job_id], env=env, capture_output=True, timeout=30, check=False)
    text = log.read_text()
    assert "nodes from Slurm job" in text and "submitted 2 jobs" in text, text
    assert "elasticd stopped" in text, text
    report = json.loads((tmp_path / "report.json").read_text())
    states = {j["name"]: j["state"] for j in report["jobs"]}
    assert states == {"hello": "COMPLETED", "synthetic": "COMPLETED"}, report
    assert (tmp_path / "report.txt").read_text().strip() in text
    (hello,) = (jobs / "out").glob("hello-*.out")
    host = hello.read_text().split()
    assert host[2] in NODES and host[2] == host[4]  # `hostname` is the node it was started on
    assert_no_job_process_left()


@pytest.mark.timeout(90)
def test_fabric_check_finds_every_node_ready_and_names_the_unreachable(vcluster: VCluster, tmp_path: Path) -> None:
    fab = subprocess.run([str(BIN / "fab"), "-r", str(ROOT / "deploy"), "--ssh-config", str(vcluster.ssh_config),
                          "-H", ",".join(NODES), "check"], capture_output=True, text=True, timeout=60, check=False)
    assert fab.returncode == 0, fab.stdout + fab.stderr
    for n in NODES:
        assert f"is {n}; Python" in fab.stdout
    cfg = tmp_path / "ssh_config"
    cfg.write_text("Host node4\n    HostName 10.200.0.14\n" + vcluster.ssh_config.read_text())
    r = subprocess.run([sys.executable, str(ROOT / "deploy" / "fabfile.py"), "--hosts", "node[1-4]",
                        "--ssh-config", str(cfg)], capture_output=True, text=True, timeout=60, check=False)
    assert r.returncode == 1, r.stdout + r.stderr
    lines = {line.split()[0]: line for line in r.stdout.splitlines() if line.startswith("node")}
    assert all(" ok " in lines[n] for n in NODES), r.stdout
    assert "FAILED" in lines["node4"] and "unreachable" in lines["node4"]
    assert "3 of 4 nodes ready; not ready: node4" in r.stdout


# ---- the application is told what the daemon decided alone ---------------------------------------
@pytest.mark.timeout(150)
def test_after_a_node_fails_under_a_registered_job_the_app_is_told_its_hosts_and_can_grow_again(
    vcluster: VCluster, tmp_path: Path
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    d = None
    try:
        d = cluster_daemon(vcluster, tmp_path / "state", "node[1-3]",
                           extra=["--node-timeout", "4", "--node-retry", "1", "--connect-timeout", "2"])
        mall = d.submit(recorder_job(work, "{ min = 1, max = 3 }"))
        info = d.wait_event(mall, "registered", timeout=30)
        assert info["hosts"] == ["node1", "node2", "node3"]
        d.wait_event(mall, "launched", timeout=30)  # started on every node, not only registered
        set_link("node3", False)
        d.wait_event(mall, "released", timeout=60)
        events = work / "events.log"
        # The library learnt it from the daemon, and told the handler.
        assert wait_until(lambda: "hosts_changed node_failed node1,node2 lost=node3" in events.read_text(), 30), \
            events.read_text()
        set_link("node3", True)
        assert wait_until(lambda: node_states(d)["node3"] == "idle", 30), node_states(d)
        # A grow onto the returned node is accepted: the library's host list was true.
        r = d.cli("elasticd", "resize", str(mall), "3")
        assert r.returncode == 0, r.stderr
        assert d.job(mall)["hosts"] == ["node1", "node2", "node3"]
        assert "post_grow 1 node1,node2 node3" in events.read_text()
        assert d.cli("ecancel", str(mall)).returncode == 0
        d.wait([mall], timeout=30)
    finally:
        set_link("node3", True)
        if d is not None:
            stop_daemon(d.record)
    assert_no_job_process_left()


# ---- a job ended while a grow's processes are being started ----------------------------------
def cancel_while_a_grow_starts(d: RunningDaemon, job: Path) -> tuple[int, str, str]:
    """Start the malleable `job` on one of node1/node2 and order its grow onto the other with
    that node's network gone, so the grow's spawn call waits there; cancel the job meanwhile.
    (job, its first node, the grow's node); the link is left down."""
    mall = d.submit(job)
    info = d.wait_event(mall, "registered", timeout=30)
    d.wait_event(mall, "launched", timeout=30)
    first = info["hosts"][0]
    (other,) = [n for n in ("node1", "node2") if n != first]
    if other in info["hosts"]:  # the policy started it at its maximum: make room for the grow
        assert d.cli("elasticd", "resize", str(mall), "1").returncode == 0
        d.wait_event(mall, "shrunk", timeout=30)
    set_link(other, False)
    assert d.cli("elasticd", "resize", "--no-wait", str(mall), "2").returncode == 0
    d.wait_event(mall, "grow_ordered", timeout=30)
    assert d.cli("ecancel", str(mall)).returncode == 0
    # Not declared down yet: the grow's start was still waiting on it when the cancel came.
    assert node_states(d)[other] != "down", "the node was declared down before the cancel; raise --node-timeout"
    return mall, first, other


@pytest.mark.timeout(150)
def test_a_job_cancelled_while_its_grow_is_starting_on_a_node_that_then_fails_ends_and_frees_its_nodes(
    vcluster: VCluster, tmp_path: Path
) -> None:
    """The cancel ends the job's running processes while the grow's start on its new node is
    still on its way; then that node is declared down (no heartbeat) and the start fails.
    The launcher heard the ended processes' exits while the start was pending, when the job
    could not be over yet: the failed start must settle the job, or it stays ending for
    ever and holds its nodes."""
    work = tmp_path / "work"
    work.mkdir()
    d = None
    other = ""
    try:
        d = cluster_daemon(vcluster, tmp_path / "state", "node[1-2]",
                           extra=["--node-timeout", "20", "--node-retry", "1", "--connect-timeout", "2"])
        mall, first, other = cancel_while_a_grow_starts(d, recorder_job(work, "{ min = 1, max = 2, preferred = 1 }"))
        leader = pid_file(work, f"pid-{first}")
        assert wait_until(lambda: not alive(leader), 30), "the cancel did not end the leader"
        assert wait_until(lambda: node_states(d)[other] == "down", 40), node_states(d)
        d.wait([mall], timeout=30)
        info = d.job(mall)
        assert info["state"] == "CANCELLED", (info["state"], d.events(mall))
        assert node_states(d)[first] == "idle"
        set_link(other, True)
        assert wait_until(lambda: node_states(d)[other] == "idle", 30), node_states(d)
        assert_no_job_process_left()
    finally:
        if other:
            set_link(other, True)
        if d is not None:
            stop_daemon(d.record)
    assert_no_job_process_left()


@pytest.mark.timeout(150)
def test_a_grows_process_whose_start_completes_after_the_job_was_cancelled_is_ended(
    vcluster: VCluster, tmp_path: Path
) -> None:
    """The same cancel, but the node's network comes back and the grow's start goes through
    after it: the launcher ends the process it started for a job already ending (here one
    that would sleep 300 s), and the job is CANCELLED without waiting for it."""
    work = tmp_path / "work"
    work.mkdir()
    job = write_job(work, "rec", f'''
        name = "rec"
        command = ["sh", "-c", "hostname; if [ $ELASTIC_JOINING = 1 ]; then echo $$ > pid-joining; exec sleep 300; fi; exec {sys.executable} {RECORDER}"]
        nodes = {{ min = 1, max = 2, preferred = 1 }}
        kind = "malleable"
        working_dir = "."
        output = "rec-%N.out"
        time_limit = "3"
    ''')
    d = None
    other = ""
    try:
        d = cluster_daemon(vcluster, tmp_path / "state", "node[1-2]",
                           extra=["--node-timeout", "30", "--node-retry", "1", "--connect-timeout", "2"])
        mall, _, other = cancel_while_a_grow_starts(d, job)
        set_link(other, True)
        d.wait([mall], timeout=60)
        info = d.job(mall)
        assert info["state"] == "CANCELLED", (info["state"], d.events(mall))
        log = (d.state_dir / "daemon.log").read_text()
        # The start went through (the node was never taken for down): the ended process was its.
        assert "could not start on new hosts" not in log and f"node {other} down" not in log, log[-2000:]
        assert node_states(d) == {"node1": "idle", "node2": "idle"}
        assert_no_job_process_left()
    finally:
        if other:
            set_link(other, True)
        if d is not None:
            stop_daemon(d.record)
    assert_no_job_process_left()
