"""A state directory belongs to the Slurm allocation it was first used in (cluster name, job
id, start time): job ids restart when a cluster's state is reset, and a daemon must never
recover another allocation's jobs. The vcluster test does it with real allocations
(tests/test_cluster_environment.py); these pin the rules, and the CLI's answer, fast."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from conftest import BIN
from elasticd.allocation import ALLOCATION_FILE, Allocation, OtherAllocation, bind, current_allocation

A = Allocation("vc", "7", "2026-11-25T10:00:00")
B = Allocation("vc", "7", "2026-11-25T12:00:00")  # the same id, after the controller's state was reset


def test_the_allocation_comes_from_slurms_environment_and_none_outside_it() -> None:
    env = {"SLURM_JOB_ID": "7", "SLURM_CLUSTER_NAME": "vc", "SLURM_JOB_START_TIME": "2026-11-25T10:00:00"}
    assert current_allocation(env) == A
    assert current_allocation({}) is None


def test_first_start_records_the_allocation_and_the_same_one_is_accepted_again(tmp_path: Path) -> None:
    assert bind(tmp_path, A, movable=False) is None
    assert json.loads((tmp_path / ALLOCATION_FILE).read_text()) == {
        "cluster": "vc", "job_id": "7", "start_time": "2026-11-25T10:00:00"}
    assert bind(tmp_path, A, movable=False) is None


def test_an_explicit_directory_of_another_allocation_is_refused_naming_whose_it_is(tmp_path: Path) -> None:
    bind(tmp_path, A, movable=False)
    with pytest.raises(OtherAllocation, match="belongs to Slurm job 7 on cluster vc, started 2026-11-25T10:00:00"):
        bind(tmp_path, B, movable=False)
    with pytest.raises(OtherAllocation, match="runs in no Slurm allocation"):
        bind(tmp_path, None, movable=False)


def test_the_default_directory_of_another_allocation_is_set_aside_whole_and_a_fresh_one_started(
    tmp_path: Path
) -> None:
    state = tmp_path / "slurm-7"
    state.mkdir()
    bind(state, A, movable=True)
    (state / "journal.db").write_bytes(b"the old allocation's jobs")
    aside = bind(state, B, movable=True)
    assert aside is not None and aside.name.startswith("slurm-7.other-vc-7-2026-11-25T10_00_00-")
    assert (aside / "journal.db").read_bytes() == b"the old allocation's jobs"
    assert sorted(p.name for p in state.iterdir()) == [ALLOCATION_FILE]
    assert json.loads((state / ALLOCATION_FILE).read_text())["start_time"] == B.start_time


def test_an_unreadable_record_is_refused_not_guessed(tmp_path: Path) -> None:
    (tmp_path / ALLOCATION_FILE).write_text("{not json")
    with pytest.raises(OtherAllocation, match="which allocation this state directory belongs to is unknown"):
        bind(tmp_path, A, movable=True)


@pytest.mark.timeout(60)
def test_elasticd_start_in_another_allocation_refuses_the_directory_and_leaves_it_untouched(tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    bind(state, A, movable=False)
    env = {**os.environ, "ELASTIC_STATE_DIR": str(state), "SLURM_JOB_ID": "7", "SLURM_CLUSTER_NAME": "vc",
           "SLURM_JOB_START_TIME": B.start_time}
    r = subprocess.run([str(BIN / "elasticd"), "start", "--local", "1"], env=env, check=False, capture_output=True, text=True,
                       timeout=50)
    assert r.returncode == 1
    assert r.stderr.count("belongs to Slurm job 7 on cluster vc") == 1, r.stderr
    assert "use another --state-dir" in r.stderr
    assert not (state / "daemon.json").exists()
    assert json.loads((state / ALLOCATION_FILE).read_text())["start_time"] == A.start_time
