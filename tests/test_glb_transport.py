"""The GLB place-to-place transport on real loopback sockets: messages arrive in order
per sender, large bags survive framing, and a connection that does not prove it knows
the job's secret never gets a message (a pickle) through."""

from __future__ import annotations

import hmac
import pickle
import queue
import socket
import struct
import subprocess
import sys
from collections.abc import Iterator
from hashlib import sha256
from typing import Any

import pytest

from elastic_apps.glb import messages as M
from elastic_apps.glb.transport import PeerGone, Transport, split_address

SECRET = b"job-secret"


@pytest.fixture
def pair() -> Iterator[tuple[Transport, Transport, queue.SimpleQueue[Any]]]:
    inbox_a: queue.SimpleQueue[Any] = queue.SimpleQueue()
    inbox_b: queue.SimpleQueue[Any] = queue.SimpleQueue()
    a = Transport(SECRET, "127.0.0.1", inbox_a)
    b = Transport(SECRET, "127.0.0.1", inbox_b)
    a.start()
    b.start()
    try:
        yield a, b, inbox_b
    finally:
        a.close()
        b.close()


def test_messages_arrive_in_order_with_large_payloads(pair: tuple[Transport, Transport, queue.SimpleQueue[Any]]) -> None:
    a, b, inbox = pair
    big = [bytes([i % 256]) * 20 for i in range(200_000)]  # a ~6 MB bag: many reads per frame
    for i in range(50):
        a.send(b.address, (M.STEAL, 7, i))
    a.send(b.address, (M.DELIVER, 7, big))
    got = [inbox.get(timeout=10) for _ in range(51)]
    assert [m[2] for m in got[:50]] == list(range(50))
    assert got[50][2] == big


def test_a_closed_connection_is_reported_with_its_sender(pair: tuple[Transport, Transport, queue.SimpleQueue[Any]]) -> None:
    a, b, inbox = pair
    a.send(b.address, (M.IDLE, 3))
    assert inbox.get(timeout=10) == (M.IDLE, 3)
    a.forget(b.address)
    assert inbox.get(timeout=10) == (M.EOF, 3)


def test_sending_to_a_gone_place_raises_peer_gone() -> None:
    inbox: queue.SimpleQueue[Any] = queue.SimpleQueue()
    t = Transport(SECRET, "127.0.0.1", inbox)
    t.start()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = f"127.0.0.1:{s.getsockname()[1]}"  # bound, not listening: refused
    with pytest.raises(PeerGone):
        t.send(dead, (M.IDLE, 1))
    t.close()


def _raw_connect(address: str) -> tuple[socket.socket, bytes]:
    s = socket.create_connection(split_address(address), timeout=5)
    nonce = b""
    while len(nonce) < 16:
        nonce += s.recv(16 - len(nonce))
    return s, nonce


def _frame(msg: tuple[Any, ...]) -> bytes:
    data = pickle.dumps(msg)
    return struct.pack(">I", len(data)) + data


def test_a_connection_without_the_secret_gets_nothing_through(pair: tuple[Transport, Transport, queue.SimpleQueue[Any]]) -> None:
    _a, b, inbox = pair
    s, nonce = _raw_connect(b.address)
    s.sendall(hmac.new(b"wrong secret", nonce, sha256).digest() + _frame((M.IDLE, 9)))
    s.settimeout(5)
    assert s.recv(1) == b""  # closed by the place
    s.close()
    # A correct peer still gets through, and the forged message never arrived.
    s, nonce = _raw_connect(b.address)
    s.sendall(hmac.new(SECRET, nonce, sha256).digest() + _frame((M.IDLE, 4)))
    assert inbox.get(timeout=10) == (M.IDLE, 4)
    s.close()
    assert inbox.get(timeout=10) == (M.EOF, 4)
    with pytest.raises(queue.Empty):
        inbox.get(timeout=0.2)


def test_sequential_mode_runs_without_a_daemon() -> None:
    r = subprocess.run([sys.executable, "-m", "elastic_apps.glb.apps.uts", "--tree", "default", "--sequential"],
                       check=False, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert '"nodes": 1732' in r.stdout and '"leaves": 1050' in r.stdout
