"""The conformance exchanges of protocol/conformance/app_channel.txt, as data: the `daemon`
scenarios played against a real daemon over real sockets, the `client` ones against the
Python client library and the C client (run_client.py plays the daemon), and a check that
the file covers every message and every error code PROTOCOL.md documents."""

from __future__ import annotations

import re
import shutil
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from conftest import RunningDaemon, start_daemon, stop_daemon, wait_until, write_job
from elastic_protocol.appchannel import APP_VERBS, DAEMON_VERBS
from elastic_protocol.control import Cancel, Resize, Wait
from elasticd.errors import DaemonError

ROOT = Path(__file__).resolve().parent.parent
CONFORMANCE = ROOT / "protocol" / "conformance"
sys.path.insert(0, str(CONFORMANCE))
from scenarios import Scenario, ScenarioError, fill, load, match

SCENARIOS = load()
DAEMON_FLAGS = ["--order-deadline", "1.5", "--hello-timeout", "1"]


@pytest.fixture(scope="module")
def conformance_daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningDaemon]:
    d = start_daemon(tmp_path_factory.mktemp("conformance") / "state", nodes=4, extra=DAEMON_FLAGS)
    try:
        yield d
    finally:
        stop_daemon(d.record)


def _job(d: RunningDaemon, folder: Path, sc: Scenario) -> dict[str, str]:
    """Submit the scenario's job (its processes only sleep: the test is its application)."""
    nodes, kind = sc.job.rsplit(" ", 1)
    nodes = nodes.replace(",", ", ").replace("=", " = ")
    more = '\nevolution = [{ duration = "5", nodes = 3 }]' if kind == "evolving" else ""
    path = write_job(folder, "conf", f'''
        name = "conf"
        command = ["sh", "-c", "[ $ELASTIC_NODE_INDEX = 0 ] && [ $ELASTIC_JOINING = 0 ] && echo $ELASTIC_JOB_SECRET > secret-$ELASTIC_JOB_ID; exec sleep 300"]
        nodes = {nodes}
        kind = "{kind}"
        working_dir = "."
        time_limit = "5"{more}
    ''')
    jid = d.submit(path)
    secret = folder / f"secret-{jid}"
    assert wait_until(lambda: secret.exists() and secret.read_text().strip() != "", 30), d.job(jid)
    hosts = d.job(jid)["hosts"]
    return {"job": str(jid), "secret": secret.read_text().strip(), **{f"h{i}": h for i, h in enumerate(hosts, 1)}}


def _resize(d: RunningDaemon, job_id: int, nodes: int) -> None:
    """Order it as soon as the job can take an order (a previous one may still be settling)."""
    errors: list[str] = []

    def order() -> bool:
        try:
            with d.client() as c:
                c.request(Resize(job_id=job_id, nodes=nodes))
            return True
        except DaemonError as exc:
            errors.append(str(exc))
            return False

    assert wait_until(order, 30), errors[-1:]


def _play(d: RunningDaemon, sc: Scenario, values: dict[str, str]) -> None:
    conns: dict[str, tuple[socket.socket, object]] = {}

    def conn(name: str) -> tuple[socket.socket, object]:
        if name not in conns:
            s = socket.create_connection((d.record.app_host, d.record.app_port), timeout=10)
            conns[name] = (s, s.makefile("rb"))
        return conns[name]

    try:
        for step in sc.steps:
            where = f"app_channel.txt:{step.lineno}"
            try:
                if step.kind == "send":
                    conn(step.conn)[0].sendall(fill(step.text, values).encode() + b"\n")
                elif step.kind == "expect":
                    raw = conn(step.conn)[1].readline()  # type: ignore[attr-defined]
                    if step.text == "closed":
                        assert raw == b"", f"{where}: expected the daemon to close, got {raw!r}"
                        continue
                    assert raw, f"{where}: the daemon closed the connection; expected {step.text!r}"
                    match(step.text, raw.decode().rstrip("\n"), values)
                elif step.text.startswith("resize "):
                    _resize(d, int(values["job"]), int(step.text.split()[1]))
                elif step.text == "cancel":
                    with d.client() as c:
                        c.request(Cancel(job_ids=[int(values["job"])]))
                        c.request(Wait(job_ids=[int(values["job"])], timeout=20), timeout=25)
                else:
                    raise ScenarioError(f"unknown action {step.text!r}")
            except ScenarioError as exc:
                raise AssertionError(f"{where}: {exc}") from None
    finally:
        for s, f in conns.values():
            f.close()  # type: ignore[attr-defined]
            s.close()
        with d.client() as c:  # ended before the next scenario's job is placed
            c.request(Cancel(job_ids=[int(values["job"])]))
            c.request(Wait(job_ids=[int(values["job"])], timeout=20), timeout=25)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("sc", [s for s in SCENARIOS if s.role == "daemon"], ids=lambda s: s.name)
def test_the_daemon_answers_as_the_scenario_says(conformance_daemon: RunningDaemon, tmp_path: Path,
                                                 sc: Scenario) -> None:
    _play(conformance_daemon, sc, _job(conformance_daemon, tmp_path, sc))


def _run_client(command: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(CONFORMANCE / "run_client.py"), "--", *command],
                          check=False, capture_output=True, text=True, timeout=120)


@pytest.mark.timeout(130)
def test_the_python_client_library_passes_the_client_scenarios() -> None:
    r = _run_client([sys.executable, str(ROOT / "tests" / "apps" / "conformance_client.py"), "{orders}"])
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.count("ok    ") == sum(1 for s in SCENARIOS if s.role == "client")


@pytest.mark.timeout(130)
def test_the_c_client_passes_the_client_scenarios(tmp_path: Path) -> None:
    if shutil.which("gcc") is None:
        pytest.skip("needs gcc to build apps/c/elastic_client.c")
    exe = tmp_path / "elastic_client"
    subprocess.run(["gcc", "-O2", "-Wall", "-Werror", "-o", str(exe), str(ROOT / "apps" / "c" / "elastic_client.c")],
                   check=True, timeout=60)
    r = _run_client([str(exe), "{orders}"])
    assert r.returncode == 0, r.stdout + r.stderr


def test_every_documented_message_and_error_code_has_a_scenario() -> None:
    protocol = (ROOT / "protocol" / "PROTOCOL.md").read_text()
    app = protocol.split("## Application channel", 1)[1]
    codes = set(re.findall(r"^\| `([a-z_]+)` \|", app.split("### Errors (application)", 1)[1], re.MULTILINE))
    assert {"auth_failed", "expired", "already_registered"} <= codes
    lines = [s.text for sc in SCENARIOS for s in sc.steps if s.kind in ("send", "expect")]
    seen_codes = {ln.split()[1] for ln in lines if ln.startswith("error ")}
    # `internal` is a daemon bug by definition: there is no exchange that should produce it.
    assert codes - seen_codes == {"internal"}
    sent = {ln.split()[0] for sc in SCENARIOS for s in sc.steps if s.kind == "send" for ln in [s.text] if ln.split()}
    received = {s.text.split()[0] for sc in SCENARIOS for s in sc.steps if s.kind == "expect"} - {"closed"}
    assert APP_VERBS - {"resume"} <= sent | {"resume"} and "resume" in sent
    assert DAEMON_VERBS <= received
