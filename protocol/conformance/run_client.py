"""Check an application-channel client against the `client` scenarios of app_channel.txt:
this script plays the daemon (on 127.0.0.1), starts the client as a job's leader would be
started, with the job's environment, sends the daemon's lines and checks the client's.

    python3 protocol/conformance/run_client.py -- CLIENT_COMMAND [ARGS...]

`{orders}` in the command is replaced by the number of orders the scenario sends (the
client is to obey that many, then deregister and exit 0). Standard library only.
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from scenarios import Scenario, ScenarioError, fill, load, match

HOSTS = ("node1", "node2", "node3", "node4")
JOB, SECRET = "5", "0123456789abcdef0123456789abcdef"
TIMEOUT = 15.0


def run_one(sc: Scenario, command: list[str]) -> None:
    values = {"job": JOB, "secret": SECRET, **{f"h{i}": h for i, h in enumerate(HOSTS, 1)}}
    with tempfile.TemporaryDirectory() as work, socket.create_server(("127.0.0.1", 0)) as server:
        hostfile = Path(work) / "hostfile"
        hostfile.write_text("".join(f"{h}\n" for h in HOSTS))
        port = server.getsockname()[1]
        env = {**os.environ, "ELASTIC_JOB_ID": JOB, "ELASTIC_JOB_NAME": "conformance", "ELASTIC_JOB_SECRET": SECRET,
               "ELASTIC_JOB_HOSTS": ",".join(HOSTS), "ELASTIC_JOB_NUM_NODES": str(len(HOSTS)),
               "ELASTIC_HOST": HOSTS[0], "ELASTIC_NODE_INDEX": "0", "ELASTIC_JOINING": "0",
               "ELASTIC_HOSTFILE": str(hostfile), "ELASTIC_APP_ADDRESS": f"127.0.0.1:{port}",
               "ELASTIC_RECONNECT_SECONDS": "0"}
        argv = [a.replace("{orders}", str(sc.orders)) for a in command]
        try:
            client = subprocess.Popen(argv, cwd=work, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                      stderr=subprocess.STDOUT, text=True)
        except OSError as exc:
            raise ScenarioError(f"cannot start {argv[0]}: {exc.strerror} (give an absolute path)") from None
        try:
            server.settimeout(TIMEOUT)
            conn, _ = server.accept()
            conn.settimeout(TIMEOUT)
            reader = conn.makefile("r", encoding="ascii", newline="\n")
            for step in sc.steps:
                where = f"app_channel.txt:{step.lineno}"
                if step.kind == "expect":  # the daemon's line: sent to the client
                    conn.sendall((fill(step.text, values) + "\n").encode())
                elif step.kind == "send":  # the client's line: checked
                    line = reader.readline()
                    if not line:
                        raise ScenarioError(f"{where}: the client closed the connection; expected {step.text!r}")
                    try:
                        match(step.text, line.rstrip("\n"), values)
                    except ScenarioError as exc:
                        raise ScenarioError(f"{where}: {exc}") from None
                else:
                    raise ScenarioError(f"{where}: a client scenario has no actions")
            code = client.wait(timeout=TIMEOUT)
            if code != 0:
                raise ScenarioError(f"the client exited {code} at the end of the scenario")
            conn.close()
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise ScenarioError(f"{sc.name}: {type(exc).__name__}: {exc}") from None
        finally:
            if client.poll() is None:
                client.kill()
            out = client.communicate()[0]
        if os.environ.get("CONFORMANCE_VERBOSE"):
            print(out)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("command", nargs=argparse.REMAINDER, help="the client to check, after --")
    args = p.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        p.error("name the client command after --")
    failed = 0
    for sc in load():
        if sc.role != "client":
            continue
        try:
            run_one(sc, command)
            print(f"ok    {sc.name}")
        except ScenarioError as exc:
            failed += 1
            print(f"FAIL  {sc.name}: {exc}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
