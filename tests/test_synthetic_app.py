"""The synthetic application runs as long as its model says, whatever its resizes."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from conftest import RunningDaemon, write_job
from elastic_protocol.models import (
    Amdahl,
    ReconfigCost,
    Rho,
    parse_speedup,
    predicted_runtime,
)
from test_malleability import resize


def synthetic_job(folder: Path, work: float, speedup: str, nodes: str, extra: str = "") -> Path:
    return write_job(folder, "syn", f'''
        name = "synthetic"
        command = ["{sys.executable}", "-m", "elastic_apps.synthetic", "--work", "{work}", "--speedup", "{speedup}", "--step", "0.2"{extra}]
        nodes = {nodes}
        kind = "malleable"
        working_dir = "."
        time_limit = "1"
    ''')


def test_amdahl_and_rho_speedups() -> None:
    assert Amdahl(0.0).speedup(8) == pytest.approx(8)
    assert Amdahl(0.5).speedup(2) == pytest.approx(1 / (0.5 + 0.25))
    assert Rho(0.0).speedup(8) == pytest.approx(8)
    assert Rho(0.2).speedup(8) == pytest.approx(8 ** 0.8)
    assert parse_speedup("amdahl:0.1") == Amdahl(0.1)
    with pytest.raises(ValueError, match="unknown speedup model"):
        parse_speedup("gustafson:1")


def test_predicted_runtime_follows_size_history_and_reconfiguration_cost() -> None:
    lin = Amdahl(0.0)
    # 100 s of work: 50 s on 1 node (50 done), then 2 nodes for the other 50 -> 25 s.
    assert predicted_runtime(100, lin, [(0, 1), (50, 2)]) == pytest.approx(75)
    # A grow 1 -> 3 costs alpha*2 + beta/4 + b*2 = 2 + 1 + 0.4 s of no progress.
    cost = ReconfigCost(alpha=1.0, beta=4.0, b=0.2)
    assert cost.seconds(1, 3) == pytest.approx(3.4)
    assert predicted_runtime(100, lin, [(0, 1), (40, 3)], cost) == pytest.approx(40 + 3.4 + 60 / 3)
    # A change after the job would have ended is ignored.
    assert predicted_runtime(10, lin, [(0, 1), (50, 2)]) == pytest.approx(10)


# Work for 13 s on 4 nodes (amdahl:0.1): the two `elasticd resize` round trips (a CLI start-up
# each, the grow also a new worker's) must land while the job still works. They take ~1 s
# unloaded and were seen up to 7 s with two busy loops per core; 6 s of work (2 s on 4 nodes)
# ended before the first one arrived under such load.
RESIZED_WORK = 40.0


@pytest.mark.timeout(90)
def test_synthetic_job_run_time_matches_its_model_across_resizes(daemon: RunningDaemon, workdir: Path) -> None:
    jid = daemon.submit(synthetic_job(workdir, RESIZED_WORK, "amdahl:0.1", "{ min = 1, max = 4 }", ', "--alpha", "0.2"'))
    daemon.wait_event(jid, "registered")
    shrink = resize(daemon, jid, 2)
    assert shrink.returncode == 0, shrink.stderr
    daemon.wait_event(jid, "shrunk")
    grow = resize(daemon, jid, 3)
    assert grow.returncode == 0, grow.stderr
    daemon.wait_event(jid, "grown")
    daemon.wait([jid], timeout=60)
    info = daemon.job(jid)
    assert info["state"] == "COMPLETED", info
    report = json.loads((workdir / f"elastic-{jid}.out").read_text().strip().splitlines()[-1])
    history = [(t, n) for t, n in report["history"]]
    assert [n for _, n in history] == [4, 2, 3]
    expected = predicted_runtime(RESIZED_WORK, Amdahl(0.1), history, ReconfigCost(alpha=0.2))
    assert report["elapsed"] == pytest.approx(expected, abs=0.05)


def test_synthetic_job_costs_almost_no_cpu(daemon: RunningDaemon, workdir: Path) -> None:
    import psutil

    jid = daemon.submit(synthetic_job(workdir, 8.0, "linear", "4"))
    daemon.wait_event(jid, "registered", timeout=60)
    procs = []
    for p in psutil.process_iter(["cwd", "environ"]):
        try:
            if p.info["cwd"] == str(workdir) and (p.info["environ"] or {}).get("ELASTIC_JOB_ID") == str(jid) \
                    and p.cmdline()[:2] != ["/bin/sh", "-c"]:  # not the launcher's exit-status wrapper
                procs.append(p)
        except psutil.Error:
            continue
    assert len(procs) == 4
    before = sum(p.cpu_times().user + p.cpu_times().system for p in procs)
    import time

    time.sleep(1.0)
    after = sum(p.cpu_times().user + p.cpu_times().system for p in procs)
    assert after - before < 0.05, f"4 synthetic processes used {after - before:.3f} s CPU in 1 s"
    daemon.cli("ecancel", str(jid))
