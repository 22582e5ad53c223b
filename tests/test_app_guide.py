"""The complete malleable application of docs/APP_GUIDE.md runs as a job, is shrunk and grown
by hand, and its result is the one a run without resizes gives."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from conftest import RunningDaemon, write_job

APP = Path(__file__).resolve().parent.parent / "docs" / "examples" / "malleable_app.py"
# The app's own default: 12.5 s of rounds on 4 nodes. Each `elasticd resize` below is a CLI
# start-up and a round trip; with 8 busy loops on 2 cores they took ~4 s each, and with
# 60 000 items the grow landed ~1 s before the job's last round (after it, it is refused).
ITEMS = 100_000


@pytest.mark.timeout(90)
def test_the_guides_app_survives_a_shrink_and_a_grow_and_sums_right(daemon: RunningDaemon, workdir: Path) -> None:
    jid = daemon.submit(write_job(workdir, "guide", f'''
        name = "guide"
        command = ["{sys.executable}", "{APP}", "{ITEMS}"]
        nodes = {{ min = 1, max = 4 }}
        kind = "malleable"
        working_dir = "."
        time_limit = "2"
    '''))
    daemon.wait_event(jid, "registered")
    shrink = daemon.cli("elasticd", "resize", str(jid), "2")
    assert shrink.returncode == 0 and f"job {jid}: shrunk to 2 nodes (node1, node2)" in shrink.stdout, shrink.stderr
    grow = daemon.cli("elasticd", "resize", str(jid), "3")
    assert grow.returncode == 0 and f"job {jid}: grown to 3 nodes" in grow.stdout, grow.stderr
    daemon.wait([jid], timeout=60)
    assert daemon.job(jid)["state"] == "COMPLETED"
    assert int((workdir / f"result-{jid}").read_text()) == sum(i * i for i in range(ITEMS))
