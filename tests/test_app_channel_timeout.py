"""An application connection whose peer stops answering TCP (its host reset or cut off) is
closed with one WARNING line naming the job and the peer: the peer went away, the daemon did
nothing wrong, so no ERROR and no traceback.

The timeout is the kernel's own: the daemon (in-process, in a network namespace of its own
made with `unshare -n`) keeps a registered application connection over loopback, the
namespace's loopback goes down, and the daemon's TCP keepalive probes go unanswered until the
socket fails with ETIMEDOUT. The keepalive's timing is shortened (1 s idle, 1 s between 2
probes) so that this takes seconds, not the 25 s of the daemon's own setting.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(90)


def _can_unshare() -> str | None:
    if shutil.which("unshare") is None or shutil.which("ip") is None:
        return "needs unshare and ip (util-linux, iproute2)"
    probe = subprocess.run(["unshare", "-n", "ip", "link", "set", "lo", "up"], capture_output=True, text=True,
                           timeout=10, check=False)
    return None if probe.returncode == 0 else f"cannot make a network namespace here: {probe.stderr.strip()}"


def test_a_tcp_timeout_on_the_application_channel_is_one_warning_naming_the_job_and_peer() -> None:
    why = _can_unshare()
    if why is not None:
        pytest.skip(why)
    r = subprocess.run(["unshare", "-n", sys.executable, __file__], capture_output=True, text=True, timeout=80,
                       check=False, cwd=Path(__file__).parent)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout.strip().splitlines()[-1])
    records = out["records"]
    assert out["lost"], f"the connection was not seen to close: {records}"
    assert [x for x in records if x["level"] >= logging.ERROR or x["traceback"]] == []
    timed_out = [x["message"] for x in records if "timed out" in x["message"]]
    peer = out["peer"]
    assert len(timed_out) == 1, records
    assert f"job {out['job']}" in timed_out[0] and peer in timed_out[0], timed_out
    assert [x["level"] for x in records if "timed out" in x["message"]] == [logging.WARNING]


# ---- inside the network namespace --------------------------------------------------------------
class _Keep(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[dict[str, object]] = []

    def emit(self, record: logging.LogRecord) -> None:
        if record.levelno >= logging.WARNING:
            self.records.append({"level": record.levelno, "message": record.getMessage(),
                                 "traceback": record.exc_info is not None})


async def _ip_link(state: str) -> None:
    """The namespace's loopback up or down."""
    proc = await asyncio.create_subprocess_exec("ip", "link", "set", "lo", state)
    assert await asyncio.wait_for(proc.wait(), 10) == 0


async def _inside() -> dict[str, object]:
    from daemon_support import inprocess_daemon, settle
    from elastic_protocol.jobspec import JobSpec
    from elastic_protocol.version import PROTOCOL_VERSION
    from elasticd.daemon import app_server

    app_server.KEEPALIVE_IDLE, app_server.KEEPALIVE_INTERVAL, app_server.KEEPALIVE_PROBES = 1, 1, 2
    keep = _Keep()
    logging.getLogger("elasticd").addHandler(keep)
    with tempfile.TemporaryDirectory() as tmp:
        async with inprocess_daemon(Path(tmp) / "state", nodes=2) as (d, _clock, _launcher):
            jid = d.submit(JobSpec.model_validate({"name": "m", "command": ["true"], "kind": "malleable",
                                                   "nodes": {"min": 1, "max": 2}}))
            await settle()
            host, port = d.status().app_address.rsplit(":", 1)
            reader, writer = await asyncio.open_connection(host, int(port))
            writer.write(f"hello {PROTOCOL_VERSION} {jid} {d.job_secret(jid)}\nregister\n".encode())
            replies = [await asyncio.wait_for(reader.readline(), 10) for _ in range(2)]
            assert replies == [f"ok hello {PROTOCOL_VERSION}\n".encode(), b"ok register\n"], replies
            assert d.leader(jid) is not None
            local = writer.get_extra_info("sockname")
            keep.records.clear()  # what the connection's end logs, nothing before
            await _ip_link("down")
            for _ in range(300):  # the probes: 1 s idle, then 2 of them 1 s apart
                if d.leader(jid) is None:
                    break
                await asyncio.sleep(0.05)
            lost = d.leader(jid) is None
            writer.transport.abort()
            await _ip_link("up")
            await settle()
    return {"job": jid, "peer": f"{local[0]}:{local[1]}", "lost": lost, "records": keep.records}


if __name__ == "__main__":
    subprocess.run(["ip", "link", "set", "lo", "up"], check=True, timeout=10)
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    print(json.dumps(asyncio.run(_inside())))
