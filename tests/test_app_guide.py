"""docs/APP_GUIDE.md's runnable examples are what the guide shows, and they run as written.

Each block the guide marks `<!-- runnable: PATH -->` must be the file PATH verbatim; the
job files and programs then run from a copy of docs/examples/ (their output goes to its
out/, not into the repository) against a real local daemon: the malleable app shrunk and
grown by hand sums right, the evolving app grows on its own request and releases, the
mpi4py program is grown by spawning and shrunk, and the C client's commands pass the
conformance suite."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import mpi_support
from conftest import RunningDaemon, write_job

ROOT = Path(__file__).resolve().parent.parent
GUIDE = ROOT / "docs" / "APP_GUIDE.md"
EXAMPLES = ROOT / "docs" / "examples"
mpi_daemon = mpi_support.mpi_daemon  # a fixture, shared with test_mpi_malleable
RUNNABLE = re.compile(r"<!-- runnable: (\S+) -->\n```\w*\n(.*?)^```$", re.DOTALL | re.MULTILINE)


def runnable_blocks() -> dict[str, str]:
    return {path: text for path, text in RUNNABLE.findall(GUIDE.read_text())}


def test_every_runnable_block_of_the_guide_is_its_file_verbatim() -> None:
    blocks = runnable_blocks()
    assert sorted(blocks) == sorted([
        "docs/examples/malleable_app.py", "docs/examples/malleable_app.toml",
        "docs/examples/evolving_app.py", "docs/examples/evolving_app.toml",
        "docs/examples/mpi_app.py", "docs/examples/mpi_app.toml",
        "apps/c/elastic_client.c", "docs/examples/c_client_conformance.sh",
    ])
    for path, text in blocks.items():
        assert text == (ROOT / path).read_text(), f"the guide's block for {path} is not the file"


@pytest.fixture
def examples(tmp_path: Path) -> Path:
    """docs/examples/ as it is, with an empty out/: the job files' working directory."""
    folder = tmp_path / "examples"
    folder.mkdir()
    for f in EXAMPLES.iterdir():
        if f.suffix in (".py", ".toml", ".sh"):
            shutil.copy(f, folder / f.name)
    (folder / "out").mkdir()
    return folder


def output(examples: Path, job_id: int) -> str:
    return (examples / "out" / f"elastic-{job_id}.out").read_text()


def squares(n: int) -> int:
    """sum(i * i for i in range(n))"""
    return (n - 1) * n * (2 * n - 1) // 6


@pytest.mark.timeout(90)
def test_the_guides_malleable_app_is_shrunk_and_grown_and_sums_right(daemon: RunningDaemon, examples: Path) -> None:
    jid = daemon.submit(examples / "malleable_app.toml")
    daemon.wait_event(jid, "registered")
    # Each `elasticd resize` is a CLI start-up and a round trip (~4 s each with 8 busy loops
    # on 2 cores); the app's 100 000 items take ~12 s of rounds on 4 nodes.
    shrink = daemon.cli("elasticd", "resize", str(jid), "2")
    assert shrink.returncode == 0 and f"job {jid}: shrunk to 2 nodes (node1, node2)" in shrink.stdout, shrink.stderr
    grow = daemon.cli("elasticd", "resize", str(jid), "3")
    assert grow.returncode == 0 and f"job {jid}: grown to 3 nodes" in grow.stdout, grow.stderr
    daemon.wait([jid], timeout=60)
    assert daemon.job(jid)["state"] == "COMPLETED"
    assert int((examples / "out" / f"result-{jid}").read_text()) == squares(100_000)
    out = output(examples, jid)
    # The shrunk workers' last word, and none of the shell's `Terminated`.
    assert "node3: leaving (removed)" in out and "node4: leaving (removed)" in out, out
    assert f"sum {squares(100_000)} on 3 hosts" in out, out
    assert "Terminated" not in out and "Traceback" not in out, out


@pytest.mark.timeout(90)
def test_the_guides_evolving_app_grows_on_request_and_releases(daemon: RunningDaemon, examples: Path) -> None:
    jid = daemon.submit(examples / "evolving_app.toml")
    daemon.wait([jid], timeout=60)
    info = daemon.job(jid)
    assert info["state"] == "COMPLETED", (info["state"], info["reason"], output(examples, jid))
    events = [e["event"] for e in info["events"]]
    assert events.index("requested") < events.index("grown") < events.index("released"), events
    grown = next(e for e in info["events"] if e["event"] == "grown")
    out = output(examples, jid)
    assert f"wide phase on {' '.join(grown['hosts'])}" in out, out
    assert "narrow phase on node1" in out, out
    for host in grown["hosts"][1:]:
        assert f"{host}: leaving (removed)" in out, out
    assert "Terminated" not in out and "Traceback" not in out, out



@pytest.mark.timeout(150)
def test_the_guides_mpi_app_grows_by_spawning_shrinks_and_sums_right(mpi_daemon: RunningDaemon,
                                                                     examples: Path) -> None:
    d = mpi_daemon
    # A filler holds two of the four nodes, so that the job starts on two and can grow. Both
    # resizes were done 6 s into the job's ~23 s here (measured: grown at 4.5 s, shrunk 6.2 s).
    filler = d.submit(write_job(examples, "filler", 'name = "filler"\ncommand = ["sleep", "300"]\nnodes = 2\n'
                                'working_dir = "out"\n'))
    d.wait_event(filler, "started")
    jid = d.submit(examples / "mpi_app.toml")
    d.wait_event(jid, "registered", timeout=60)
    assert d.job(jid)["nodes"] == 2
    assert d.cli("ecancel", str(filler)).returncode == 0
    d.wait([filler], timeout=60)
    grow = d.cli("elasticd", "resize", str(jid), "3", timeout=60)
    assert grow.returncode == 0 and f"job {jid}: grown to 3 nodes" in grow.stdout, grow.stdout + grow.stderr
    shrink = d.cli("elasticd", "resize", str(jid), "2", timeout=60)
    assert shrink.returncode == 0 and f"job {jid}: shrunk to 2 nodes" in shrink.stdout, shrink.stdout + shrink.stderr
    d.wait([jid], timeout=90)
    info = d.job(jid)
    assert info["state"] == "COMPLETED", (info["state"], info["reason"], output(examples, jid))
    out = output(examples, jid)
    assert f"sum {squares(1_000_000)} on 2 ranks after 2 resizes" in out, out


@pytest.mark.timeout(120)
def test_the_guides_c_client_commands_pass_the_conformance_suite(tmp_path: Path) -> None:
    if shutil.which("gcc") is None:
        pytest.skip("no C compiler (gcc) on this machine: apt-get install gcc")
    # "From the repository's root": a folder that has its apps/ and protocol/, so that what
    # the commands build lands in the test's folder.
    for part in ("apps", "protocol"):
        (tmp_path / part).symlink_to(ROOT / part)
    script = runnable_blocks()["docs/examples/c_client_conformance.sh"]
    r = subprocess.run(["bash", "-e", "-c", script], check=False, cwd=tmp_path, capture_output=True, text=True, timeout=110)
    assert r.returncode == 0, r.stdout + r.stderr
    assert (tmp_path / "elastic_client").exists()
    lines = [ln for ln in r.stdout.splitlines() if ln.strip()]
    assert lines and all(ln.startswith("ok ") for ln in lines), r.stdout


def test_the_mpi_helper_without_mpi4py_says_what_to_install() -> None:
    # Found following the guide from a plain `pip install .`: the mpi4py example died of a
    # bare ModuleNotFoundError in every rank.
    r = subprocess.run([sys.executable, "-c", "import sys; sys.modules['mpi4py'] = None; import elastic_apps.mpi"],
                       check=False, capture_output=True, text=True, timeout=60)
    assert r.returncode == 1
    assert r.stderr.splitlines()[-1].startswith("ImportError: elastic_apps.mpi needs mpi4py"), r.stderr
    assert "pip install '.[mpi]'" in r.stderr and "openmpi-bin" in r.stderr, r.stderr
