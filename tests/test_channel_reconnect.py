"""The client library across a daemon that dies in the middle of the very first hello.

A scripted peer on a real loopback socket stands in for the daemon: it reads the hello and
drops the connection without answering (the daemon was killed), then, like a restarted
daemon on the same port, takes a new connection. Found in the 50-job SIGKILL test: the
library's handshake said hello on the new connection, and then sent the interrupted hello
once more, which the daemon refuses as a second hello -- the job failed.
"""

from __future__ import annotations

import socket
import threading

import pytest

from elastic_apps.channel import JobChannel
from elastic_apps.env import JobEnv

pytestmark = pytest.mark.timeout(30)


def _lines(conn: socket.socket, n: int) -> list[str]:
    buf = b""
    while buf.count(b"\n") < n:
        chunk = conn.recv(4096)
        if not chunk:
            break
        buf += chunk
    return buf.decode().splitlines()


def test_a_hello_cut_off_by_a_daemon_crash_is_said_once_on_the_new_connection() -> None:
    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]
    second: list[str] = []

    def daemon() -> None:
        first, _ = server.accept()
        assert _lines(first, 1)[0].startswith("hello ")
        first.close()  # killed before it answered
        conn, _ = server.accept()
        with conn:
            conn.settimeout(5)
            for _ in range(2):  # the handshake: hello, resume
                line = _lines(conn, 1)[0]
                second.append(line)
                conn.sendall(f"ok {line.split()[0]}\n".encode())
            conn.settimeout(1)
            try:
                second.extend(_lines(conn, 1))  # anything else sent on this connection
            except TimeoutError:
                pass

    peer = threading.Thread(target=daemon, daemon=True)
    peer.start()
    env = JobEnv(job_id=7, name="j", hosts=("n1",), host="n1", index=0, app_address=("127.0.0.1", port),
                 secret="s3cret", joining=False, hostfile=None)
    ch = JobChannel(env, timeout=5.0)
    try:
        ch.open()
        peer.join(10)
        assert not peer.is_alive()
        assert [line.split()[0] for line in second] == ["hello", "resume"]
        assert ch.reconnects == 1
    finally:
        ch.close()
        server.close()
