"""Cluster discovery and node failure in the core: pure code, no cluster needed."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from core_support import submit
from elastic_protocol.jobspec import JobSpec
from elasticd.cluster import (
    default_app_host,
    discover,
    expand_hostlist,
    node_address,
    parse_cpus_per_node,
    read_hostfile,
    route_source,
)
from elasticd.core.actions import Reclaim, Terminate
from elasticd.core.engine import Core
from elasticd.core.events import (
    CancelRequested,
    Exited,
    HostsGone,
    NodeDown,
    NodeUp,
    PassDue,
    Registered,
    ResizeRequested,
)
from elasticd.core.nodes import NodeTable
from elasticd.core.states import JobState
from elasticd.errors import ElasticError
from elasticd.policies import make_policy


# ---- discovery ------------------------------------------------------------------------------
def test_slurm_allocation_gives_nodes_and_cores() -> None:
    env = {"SLURM_JOB_NODELIST": "node[1-3],gpu[07-08]", "SLURM_JOB_CPUS_PER_NODE": "72(x2),36,4(x2)",
           "SLURM_JOB_ID": "42"}
    c = discover(environ=env)
    assert c.mode == "cluster"
    assert c.nodes == ("gpu07", "gpu08", "node1", "node2", "node3")
    assert c.cpus == (72, 72, 36, 4, 4)
    assert "Slurm job 42" in c.source
    assert c.folded in ("gpu[07-08],node[1-3]", "node[1-3],gpu[07-08]")


def test_local_wins_over_slurm_and_hosts_over_slurm() -> None:
    env = {"SLURM_JOB_NODELIST": "node[1-3]"}
    assert discover(local=2, environ=env).nodes == ("node1", "node2")
    assert discover(local=2, environ=env).mode == "local"
    assert discover(hosts="c[1-2]", environ=env).nodes == ("c1", "c2")


def test_without_any_source_the_error_says_what_to_do() -> None:
    with pytest.raises(ElasticError, match="--hosts node\\[1-4\\]"):
        discover(environ={})


def test_cpus_per_node_must_match_the_node_list() -> None:
    assert parse_cpus_per_node("2(x3)", 3) == (2, 2, 2)
    with pytest.raises(ElasticError, match="describes 2 nodes"):
        parse_cpus_per_node("1(x2)", 3)
    with pytest.raises(ElasticError, match="cannot read"):
        parse_cpus_per_node("2(y3)", 3)


def test_hostfile_lines_lists_slots_and_comments(tmp_path: Path) -> None:
    f = tmp_path / "hosts"
    f.write_text("# the nodes\nn[1-2] slots=4\n\nn7 slots=2  # spare\n")
    names, slots = read_hostfile(f)
    assert names == ["n1", "n2", "n7"] and slots == [4, 4, 2]
    assert discover(hostfile=f).cpus == (4, 4, 2)
    f.write_text("n1\nn1\n")
    with pytest.raises(ElasticError, match="named twice: n1"):
        discover(hostfile=f)
    f.write_text("n1 cores=3\n")
    with pytest.raises(ElasticError, match=":1: unexpected 'cores=3'"):
        read_hostfile(f)


def test_unreadable_host_list_is_an_error_not_a_guess(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("shutil.which", lambda name: None)
    with pytest.raises(ElasticError, match="cannot read the host list"):
        expand_hostlist("node[1-")


def test_node_address_from_ssh_config_then_the_resolver(tmp_path: Path) -> None:
    cfg = tmp_path / "ssh_config"
    cfg.write_text("Host node1\n    HostName 10.200.0.11\nHost *\n    User root\n")
    assert node_address("node1", cfg) == "10.200.0.11"
    assert node_address("localhost", cfg) == "127.0.0.1"
    assert node_address("no-such-node.invalid", cfg) is None


def test_app_address_is_the_interface_that_routes_to_the_first_node(tmp_path: Path) -> None:
    cfg = tmp_path / "ssh_config"
    cfg.write_text("Host n1\n    HostName 127.0.0.5\n")
    assert route_source("127.0.0.5") in ("127.0.0.1", "127.0.0.5")
    c = discover(hosts="n[1-2]")
    assert default_app_host(c, cfg) == route_source("127.0.0.5")
    assert default_app_host(discover(local=2)) == "127.0.0.1"
    socket.inet_aton(default_app_host(c, cfg))


def test_srun_launcher_needs_an_allocation(monkeypatch: pytest.MonkeyPatch) -> None:
    from elasticd.launch.choose import make_launcher

    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    with pytest.raises(ElasticError, match="inside a Slurm allocation"):
        make_launcher("srun", on_exit=print, on_hosts_gone=print, on_host_down=print, on_host_up=print,
                      kill_wait=1.0)
    with pytest.raises(ElasticError, match="unknown launcher 'rsh'"):
        make_launcher("rsh", on_exit=print, on_hosts_gone=print, on_host_down=print, on_host_up=print,
                      kill_wait=1.0)


# ---- the node table -------------------------------------------------------------------------
def test_a_down_node_is_never_allocated_and_comes_back_when_up() -> None:
    t = NodeTable([f"n{i}" for i in range(1, 6)])
    t.mark_down("n2")
    assert t.free_count == 4 and "n2" not in t.free_hosts()
    got = t.allocate(1, 4)
    assert "n2" not in got and t.free_count == 0
    t.mark_down("n4")  # owned by job 1: the job keeps it until it lets go
    t.release(1, got)
    assert t.free_hosts() == ["n1", "n3", "n5"] and t.free_count == 3
    assert t.state_of("n4").value == "down"
    t.mark_up("n2")
    t.mark_up("n4")
    assert t.free_hosts() == ["n1", "n2", "n3", "n4", "n5"] and t.free_count == 5


# ---- the core -------------------------------------------------------------------------------
def _core(n: int = 4) -> Core:
    return Core([f"node{i}" for i in range(1, n + 1)], make_policy("easy"))


def _start(core: Core, spec: JobSpec) -> int:
    job = submit(core, spec, 0.0)
    core.handle(PassDue(0.0))
    assert core.job(job.job_id).state is JobState.RUNNING
    return job.job_id


def test_rigid_job_on_a_failed_node_ends_as_node_fail() -> None:
    core = _core()
    jid = _start(core, JobSpec(name="r", command=["true"], nodes=2))
    actions = core.handle(NodeDown(1.0, "node2"))
    assert actions == [Terminate(jid, ("node1", "node2"), JobState.NODE_FAIL)]
    core.handle(Exited(2.0, jid, 0, 15))
    job = core.job(jid)
    assert job.state is JobState.NODE_FAIL and job.reason == "node node2 failed"
    assert "node_failed" in [e.event for e in job.events]
    assert core.nodes.free_hosts() == ["node1", "node3", "node4"]
    core.handle(NodeUp(3.0, "node2"))
    assert core.nodes.free_count == 4


def test_registered_malleable_job_goes_on_without_the_node() -> None:
    core = _core()
    jid = _start(core, JobSpec(name="m", command=["true"], nodes={"min": 1, "max": 4}, kind="malleable"))
    core.handle(Registered(0.5, jid))
    assert core.handle(NodeDown(1.0, "node3")) == [Reclaim(jid, ("node3",), 0.0)]
    core.handle(HostsGone(1.1, jid, ("node3",)))
    job = core.job(jid)
    assert job.state is JobState.RUNNING and job.hosts == ["node1", "node2", "node4"]
    assert core.nodes.free_count == 0 and core.nodes.state_of("node3").value == "down"
    # Its first host runs the leader: losing it ends the job.
    assert core.handle(NodeDown(2.0, "node1"))[0] == Terminate(jid, ("node1", "node2", "node4"), JobState.NODE_FAIL)


def test_malleable_job_at_its_minimum_or_unregistered_fails() -> None:
    core = _core(2)
    jid = _start(core, JobSpec(name="m", command=["true"], nodes={"min": 2, "max": 2}, kind="malleable"))
    core.handle(Registered(0.5, jid))
    assert isinstance(core.handle(NodeDown(1.0, "node2"))[0], Terminate)
    core2 = _core(2)
    _start(core2, JobSpec(name="m", command=["true"], nodes={"min": 1, "max": 2}, kind="malleable"))
    assert isinstance(core2.handle(NodeDown(1.0, "node2"))[0], Terminate)  # never registered


def test_failed_node_of_an_open_grow_drops_the_order() -> None:
    core = _core(3)
    rigid = _start(core, JobSpec(name="r", command=["true"], nodes=2))
    jid = _start(core, JobSpec(name="m", command=["true"], nodes={"min": 1, "max": 3}, kind="malleable"))
    assert core.job(jid).hosts == ["node3"]
    core.handle(Registered(0.5, jid))
    core.handle(CancelRequested(0.6, rigid))
    core.handle(Exited(0.7, rigid, 0, 15))
    core.handle(ResizeRequested(1.0, jid, 3))
    assert core.job(jid).order.new_hosts == ("node1", "node2")
    assert core.handle(NodeDown(1.5, "node2")) == [Reclaim(jid, ("node1", "node2"), 0.0)]
    core.handle(HostsGone(1.6, jid, ("node1", "node2")))
    job = core.job(jid)
    assert job.hosts == ["node3"] and job.order is None and job.state is JobState.RUNNING
    assert core.nodes.free_hosts() == ["node1"]


def test_idle_node_down_and_up_changes_only_the_free_pool() -> None:
    core = _core(2)
    assert core.handle(NodeDown(0.0, "node1")) == []
    assert core.handle(NodeDown(0.0, "node1")) == []
    job = submit(core, JobSpec(name="w", command=["true"], nodes=2), 0.0)
    assert core.handle(PassDue(0.0)) == [] and core.job(job.job_id).state is JobState.PENDING
    core.handle(NodeUp(1.0, "node1"))
    assert len(core.handle(PassDue(1.0))) == 1
