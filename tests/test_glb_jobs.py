"""GLB applications as real elastic jobs: a real daemon in local mode, real processes
(one per host, plus forked places), real sockets between places.

Rigid runs with 1, 2 and 4 places must give the reference results. Malleable runs get a
scripted sequence of shrink and grow orders from the daemon while every place holds
work: the runtime's pause file (`--pause-file`) stops processing, not stealing or
resizing, and each place marks when it holds work, so the orders always land mid-
computation whatever the machine's speed; removing the file lets the run finish.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from collections.abc import Iterator
from fractions import Fraction
from pathlib import Path
from typing import Any

import psutil
import pytest

from conftest import RunningDaemon, start_daemon, stop_daemon, wait_until, write_job
from elastic_apps.glb import run_sequential
from elastic_apps.glb.apps.bc import rmat_graph
from elastic_apps.glb.apps.pi import PiProblem
from elastic_apps.glb.apps.uts import Tree, UTSProblem
from test_glb_bags import textbook_brandes

UTS_ARGS = ["--tree", "T1", "--depth", "8"]
QUEENS_ARGS = ["-n", "12"]
PI_ARGS = ["--samples", "2000000", "--tasks", "200", "--seed", "3"]
BC_ARGS = ["--scale", "7", "--edge-factor", "8", "--seed", "2", "--print-scores"]


def uts_reference() -> dict[str, int]:
    r, _ = run_sequential(UTSProblem(Tree("fixed", 4.0, 8, 19)))
    return {"nodes": r.nodes, "leaves": r.leaves}


def pi_reference() -> dict[str, Any]:
    r, _ = run_sequential(PiProblem(2_000_000, 200, 3))
    return {"hits": r.hits, "pi_hex": r.pi.hex()}


def bc_reference() -> list[Fraction]:
    return textbook_brandes(rmat_graph(7, 8, 2))


def check(app: str, out: dict[str, Any]) -> None:
    """The job's result equals the reference: published, known, or an independent run."""
    assert out["glb"] == app
    if app == "uts":
        assert {"nodes": out["nodes"], "leaves": out["leaves"]} == uts_reference()
    elif app == "nqueens":
        assert out["solutions"] == 14200
    elif app == "pi":
        assert {"hits": out["hits"], "pi_hex": out["pi_hex"]} == pi_reference()
    else:
        assert [Fraction(x) for x in out["scores"]] == bc_reference()


APP_ARGS = {"uts": UTS_ARGS, "nqueens": QUEENS_ARGS, "pi": PI_ARGS, "bc": BC_ARGS}


def glb_job(folder: Path, app: str, args: list[str], nodes: str, kind: str, name: str | None = None) -> Path:
    command = [sys.executable, "-m", f"elastic_apps.glb.apps.{app}", *args]
    return write_job(folder, name or app, f'''
        name = "{name or app}"
        command = {json.dumps(command)}
        nodes = {nodes}
        kind = "{kind}"
        working_dir = "."
        output = "%x-%j.out"
        time_limit = "2"
    ''')


def output_of(d: RunningDaemon, job_id: int) -> dict[str, Any]:
    info = d.job(job_id)
    text = Path(info["output_path"]).read_text()
    lines = [line for line in text.splitlines() if line.startswith('{"glb"')]
    assert len(lines) == 1, f"job {job_id} ({info['state']}) printed:\n{text}"
    return json.loads(lines[0])


def finished(d: RunningDaemon, job_id: int, timeout: float = 60) -> dict[str, Any]:
    d.wait([job_id], timeout=timeout)
    info = d.job(job_id)
    assert info["state"] == "COMPLETED", (info["state"], info["exit"], Path(info["output_path"]).read_text())
    return output_of(d, job_id)


# ---- rigid runs: 1, 2 and 4 places --------------------------------------------------------
# (hosts, places per host): 4 places as 4 hosts or as 2 hosts with 2 forked places each.
PLACES = {"1": (1, 1), "2": (2, 1), "4": (4, 1), "2x2": (2, 2)}
RIGID_CASES = [(app, p) for app in ("uts", "pi") for p in ("1", "2", "4")] + [
    (app, p) for app in ("nqueens", "bc") for p in ("1", "2", "2x2")
]


@pytest.fixture(scope="module")
def shared_daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningDaemon]:
    d = start_daemon(tmp_path_factory.mktemp("glb") / "state", nodes=4)
    try:
        yield d
    finally:
        stop_daemon(d.record)


@pytest.fixture(scope="module")
def rigid_jobs(shared_daemon: RunningDaemon, tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, str], int]:
    """All rigid jobs submitted at once: they run side by side while the tests check them."""
    folder = tmp_path_factory.mktemp("glb-rigid")
    jobs = {}
    for app, places in RIGID_CASES:
        hosts, per_host = PLACES[places]
        args = [*APP_ARGS[app], "--rigid", "--places-per-host", str(per_host)]
        jobs[(app, places)] = shared_daemon.submit(glb_job(folder, app, args, str(hosts), "rigid", f"{app}-{places}"))
    return jobs


@pytest.mark.parametrize("app,places", RIGID_CASES)
def test_rigid_run_gives_the_reference_result(shared_daemon: RunningDaemon, rigid_jobs: dict[tuple[str, str], int],
                                              app: str, places: str) -> None:
    out = finished(shared_daemon, rigid_jobs[(app, places)])
    hosts, per_host = PLACES[places]
    assert out["places"] == hosts * per_host and out["places_per_host"] == per_host
    assert out["malleable"] is False and out["resizes"] == []
    check(app, out)
    assert "registered" not in shared_daemon.events(rigid_jobs[(app, places)])


def test_uts_t1_has_the_published_node_count_on_two_places(shared_daemon: RunningDaemon, tmp_path: Path) -> None:
    jid = shared_daemon.submit(glb_job(tmp_path, "uts", ["--tree", "T1", "--rigid"], "2", "rigid", "t1"))
    out = finished(shared_daemon, jid)
    assert (out["nodes"], out["leaves"], out["max_depth"]) == (4_130_071, 3_305_118, 10)
    assert out["places"] == 2


# ---- malleable runs under scripted orders -------------------------------------------------
def wait_held(folder: Path, ids: range) -> None:
    """Until every place in `ids` has paused holding work (its marker file exists)."""
    assert wait_until(lambda: all((folder / f"pause.held.{i}").exists() for i in ids), 60), \
        f"places {list(ids)} did not all hold work: {sorted(p.name for p in folder.glob('pause.held.*'))}"


PAUSE_AFTER = {"uts": 5000, "nqueens": 40, "pi": 4, "bc": 8}


@pytest.mark.parametrize("app", ["uts", "nqueens", "pi", "bc"])
def test_malleable_run_survives_shrinks_and_grows_mid_computation(daemon: RunningDaemon, workdir: Path, app: str) -> None:
    pause = workdir / "pause"
    pause.touch()
    args = [*APP_ARGS[app], "--pause-file", str(pause), "--pause-after", str(PAUSE_AFTER[app])]
    jid = daemon.submit(glb_job(workdir, app, args, "{ min = 1, max = 4 }", "malleable"))
    daemon.wait_event(jid, "registered")
    wait_held(workdir, range(4))

    daemon.resize(jid, 2)                      # places 2, 3 hand their work off
    assert daemon.wait_event(jid, "shrunk")["hosts"] == ["node1", "node2"]
    daemon.resize(jid, 4)                      # places 4, 5 join and steal
    assert daemon.wait_event(jid, "grown")["hosts"] == ["node1", "node2", "node3", "node4"]
    wait_held(workdir, range(4, 6))
    daemon.resize(jid, 1)                      # places 1, 4, 5 hand off to place 0
    assert daemon.wait_event(jid, "shrunk", count=2)["hosts"] == ["node1"]
    daemon.resize(jid, 3)                      # places 6, 7 join
    assert daemon.wait_event(jid, "grown", count=2)["hosts"] == ["node1", "node2", "node3"]
    wait_held(workdir, range(6, 8))
    pause.unlink()

    out = finished(daemon, jid)
    check(app, out)
    assert out["places"] == 3 and out["hosts"] == ["node1", "node2", "node3"]
    ops = [(r["op"], r["places"]) for r in out["resizes"]]
    assert ops == [("shrink", 2), ("grow", 2), ("shrink", 3), ("grow", 2)]
    # Every leaving place held work, and handed it over.
    assert [r["moved_bags"] for r in out["resizes"] if r["op"] == "shrink"] == [2, 3]
    # Every place that ever ran contributed its statistics (its partial result came back).
    assert sorted(map(int, out["place_stats"])) == list(range(8))
    events = daemon.events(jid)
    assert events.index("deregistered") > max(i for i, e in enumerate(events) if e in ("shrunk", "grown"))
    # Places asking for values not put yet is routine, not a refusal worth a warning.
    assert "not_found" not in (daemon.state_dir / "daemon.log").read_text()


def test_forked_places_leave_and_join_with_their_host(daemon: RunningDaemon, workdir: Path) -> None:
    pause = workdir / "pause"
    pause.touch()
    args = [*UTS_ARGS, "--places-per-host", "2", "--pause-file", str(pause), "--pause-after", "3000"]
    jid = daemon.submit(glb_job(workdir, "uts", args, "{ min = 1, max = 3 }", "malleable"))
    daemon.wait_event(jid, "registered")
    wait_held(workdir, range(6))
    daemon.resize(jid, 1)                      # 2 hosts = places 2..5 leave
    assert daemon.wait_event(jid, "shrunk")["hosts"] == ["node1"]
    daemon.resize(jid, 2)                      # places 6, 7 on node2
    daemon.wait_event(jid, "grown")
    wait_held(workdir, range(6, 8))
    pause.unlink()
    out = finished(daemon, jid)
    check("uts", out)
    assert out["places"] == 4
    assert [(r["op"], r["places"]) for r in out["resizes"]] == [("shrink", 4), ("grow", 2)]
    assert out["resizes"][0]["moved_bags"] == 4


def _is_place(p: psutil.Process, job_id: int, host: str) -> bool:
    """The job's place on `host`, not the launcher's exit-status wrapper; a process that ended
    since the daemon's children were listed is none (psutil raises for it)."""
    try:
        env = p.environ()
        return (env.get("ELASTIC_JOB_ID") == str(job_id) and env.get("ELASTIC_HOST") == host
                and p.cmdline()[:2] != ["/bin/sh", "-c"])
    except psutil.NoSuchProcess:
        return False


def test_a_lost_place_fails_the_job_instead_of_hanging(daemon: RunningDaemon, workdir: Path) -> None:
    pause = workdir / "pause"
    pause.touch()
    args = [*UTS_ARGS, "--pause-file", str(pause), "--pause-after", "5000"]
    jid = daemon.submit(glb_job(workdir, "uts", args, "{ min = 1, max = 2 }", "malleable"))
    daemon.wait_event(jid, "registered")
    wait_held(workdir, range(2))
    victim = next(p for p in psutil.Process(daemon.record.pid).children(recursive=True)
                  if _is_place(p, jid, "node2"))
    os.kill(victim.pid, signal.SIGKILL)         # its work is lost: the result would be wrong
    daemon.wait([jid], timeout=60)
    info = daemon.job(jid)
    assert info["state"] == "FAILED"
    assert "place 1 on node2 is gone" in Path(info["output_path"]).read_text()
