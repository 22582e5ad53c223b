"""A flood of malformed traffic on both of a daemon's channels, from its own process.

Usage: fuzz_flood.py CONFIG_JSON  (control/app host+port, the daemon secret, one rigid
job's id and secret, the message count, concurrency, seed). Prints one JSON line of counts.

Every line sent is malformed or refused somewhere: before the hello (garbage, wrong or
missing secrets, another job's claim, over-long or half lines, connections that say
nothing) and after it (authenticated tools sending broken requests, an authenticated job
sending broken or foreign orders). It never sends a request that would change a job.
Every reply must be a typed error: a JSON error object on the control channel, an `error
CODE` line on the application channel (or `ok`/`pong` for the few harmless valid lines).
"""

from __future__ import annotations

import asyncio
import json
import random
import sys
from dataclasses import dataclass, field

LONG = 70 * 1024


@dataclass
class Counts:
    sent: int = 0
    replies: int = 0
    typed_errors: int = 0
    harmless_ok: int = 0
    untyped: list[str] = field(default_factory=list)
    connections: int = 0
    refused_connect: int = 0


def garbage(rng: random.Random) -> bytes:
    kind = rng.randrange(6)
    if kind == 0:
        return bytes(rng.randrange(256) for _ in range(rng.randrange(1, 200))).replace(b"\n", b"")
    if kind == 1:
        return rng.choice([b"[" * 5000, b'{"op":' * 3000, b"1" * 6000, b'{"op": null}', b"null", b"{}", b'""'])
    if kind == 2:
        return "".join(chr(rng.randrange(1, 0x3000)) for _ in range(rng.randrange(1, 60))).encode("utf-8", "replace").replace(b"\n", b"")
    if kind == 3:
        return b"\x00" * rng.randrange(1, 50)
    if kind == 4:
        return b"hello " + str(rng.randrange(-5, 10**30)).encode() + b" \t x"
    return rng.choice([b"", b" ", b"\r", b"\t\t"])


def mutate(rng: random.Random, base: bytes) -> bytes:
    b = bytearray(base)
    for _ in range(rng.randrange(1, 4)):
        op = rng.randrange(3)
        if op == 0 and b:
            i = rng.randrange(len(b))
            b[i] = rng.randrange(256)
        elif op == 1 and b:
            del b[rng.randrange(len(b)):]
        else:
            b.insert(rng.randrange(len(b) + 1), rng.randrange(256))
    return bytes(b).replace(b"\n", b"")


class Flood:
    def __init__(self, cfg: dict) -> None:
        self.cfg = cfg
        self.rng = random.Random(cfg["seed"])
        self.left = cfg["messages"]
        self.counts = Counts()
        self.idle: list[asyncio.StreamWriter] = []

    def take(self, n: int = 1) -> int:
        n = min(n, self.left)
        self.left -= n
        return n

    def check(self, channel: str, line: bytes) -> None:
        c = self.counts
        c.replies += 1
        text = line.decode("ascii", "replace")
        if "Traceback" in text:
            c.untyped.append(text[:200])
            return
        if channel == "control":
            try:
                doc = json.loads(line)
                ok = doc["ok"]
                code = None if ok else doc["error"]["code"]
            except (ValueError, KeyError, TypeError):
                c.untyped.append(text[:200])
                return
            if ok:
                c.harmless_ok += 1
            elif isinstance(code, str) and code:
                c.typed_errors += 1
            else:
                c.untyped.append(text[:200])
            return
        parts = text.split()
        if parts[:1] == ["error"] and len(parts) >= 2:
            c.typed_errors += 1
        elif parts[:1] in (["ok"], ["pong"]):
            c.harmless_ok += 1
        else:
            c.untyped.append(text[:200])

    async def open(self, channel: str) -> tuple[asyncio.StreamReader, asyncio.StreamWriter] | None:
        host, port = self.cfg[channel]
        try:
            r, w = await asyncio.open_connection(host, port, limit=1 << 22)
        except OSError:
            self.counts.refused_connect += 1
            return None
        self.counts.connections += 1
        return r, w

    async def exchange(self, channel: str, r: asyncio.StreamReader, w: asyncio.StreamWriter, line: bytes,
                       expect_reply: bool = True) -> bool:
        """Send one line; read its reply if one is due. False once the daemon closed."""
        self.counts.sent += 1
        try:
            w.write(line + b"\n")
            await w.drain()
            if not expect_reply:
                return True
            reply = await asyncio.wait_for(r.readline(), 20)
        except (ConnectionError, TimeoutError, asyncio.LimitOverrunError, ValueError):
            return False
        if not reply:
            return False
        self.check(channel, reply.rstrip(b"\n"))
        return True

    async def close(self, w: asyncio.StreamWriter) -> None:
        w.close()
        try:
            await w.wait_closed()
        except (ConnectionError, OSError):
            pass

    # ---- flows ------------------------------------------------------------------------
    async def preauth(self, channel: str) -> None:
        """One bad first line (or a half one, or none): the daemon answers and closes."""
        conn = await self.open(channel)
        if conn is None:
            return
        r, w = conn
        rng = self.rng
        kind = rng.randrange(8)
        if kind == 0 and self.take():
            self.counts.sent += 1
            w.write(b"x" * rng.randrange(1, 500))  # half a line, then gone
        elif kind == 1 and self.take():
            await self.exchange(channel, r, w, b"y" * LONG)
        elif kind == 2 and self.take():
            secret = rng.choice(["0" * 64, self.cfg["job_secret"], "", "x y"])
            if channel == "control":
                line = json.dumps({"op": "hello", "version": 1, "secret": secret, "client": "fuzz"}).encode()
            else:
                line = f"hello 1 {self.cfg['job_id'] + rng.choice([0, 1, 1000])} {secret or self.cfg['secret']}".encode()
                if line.endswith(self.cfg["job_secret"].encode()):
                    line += b"0"
            await self.exchange(channel, r, w, line)
        elif kind == 3 and self.take():
            await self.exchange(channel, r, w, mutate(rng, b'{"op":"hello","version":1,"secret":"ab"}'))
        elif self.take():
            await self.exchange(channel, r, w, garbage(rng))
        await self.close(w)

    async def signed_in(self, channel: str, hello: bytes) -> tuple[asyncio.StreamReader, asyncio.StreamWriter] | None:
        """A connection past a well-formed hello (not counted as fuzz), or None."""
        conn = await self.open(channel)
        if conn is None:
            return None
        r, w = conn
        if not await self.exchange(channel, r, w, hello):
            await self.close(w)
            return None
        self.counts.sent -= 1  # the hello itself is well-formed
        return r, w

    async def control_authenticated(self) -> None:
        hello = json.dumps({"op": "hello", "version": 1, "secret": self.cfg["secret"], "client": "fuzz"}).encode()
        conn = await self.signed_in("control", hello)
        if conn is None:
            return
        r, w = conn
        rng = self.rng
        bad_specs = [
            {"name": "x", "command": ["true"], "nodes": 0},
            {"name": "x y", "command": [], "nodes": {"min": 3, "max": 1}, "bogus": 1},
            {"name": "x", "command": ["a\u0000"], "nodes": 99},
            {"name": "x", "command": ["true"], "nodes": 1, "time_limit": "1:2:3:4:5"},
        ]
        for _ in range(rng.randrange(5, 60)):
            if not self.take():
                break
            k = rng.randrange(6)
            if k == 0:
                line = json.dumps({"op": "submit", "spec": rng.choice(bad_specs)}).encode()
            elif k == 1:
                line = mutate(rng, rng.choice([b'{"op":"status"}', b'{"op":"queue","job_ids":[1]}']))
            elif k == 2:
                line = json.dumps({"op": rng.choice(["cancel", "resize", "wait"]), "job_ids": "x", "job_id": "y"}).encode()
            elif k == 3:
                line = json.dumps({"op": "queue", "job_ids": [10**9 + rng.randrange(1000)]}).encode()
            else:
                line = garbage(rng)
            if not await self.exchange("control", r, w, line):
                break
        await self.close(w)

    async def app_authenticated(self) -> None:
        conn = await self.signed_in("app", f"hello 1 {self.cfg['job_id']} {self.cfg['job_secret']}".encode())
        if conn is None:
            return
        r, w = conn
        rng = self.rng
        other = self.cfg["other_job_id"]
        lines = [b"shrunk node1 order=1", b"grown node1 node2 order=7", b"refuse order=x", b"defer nan order=1",
                 b"defer 1e9 order=1", b"request 0", b"request -1", b"request 2", b"release node1",
                 f"release node2 job={other}".encode(), b"put", b"get", b"get nothing", b"put a b c",
                 b"register now", b"hello 1 1 1", b"SHRUNK", b"ping", b"bogus verb"]
        for _ in range(rng.randrange(3, 30)):
            if not self.take():
                break
            line = rng.choice(lines) if rng.random() < 0.7 else garbage(rng)
            if not await self.exchange("app", r, w, line):
                break
        await self.close(w)

    async def worker(self) -> None:
        rng = self.rng
        while self.left > 0:
            k = rng.random()
            if k < 0.35:
                await self.preauth(rng.choice(["control", "app"]))
            elif k < 0.7:
                await self.control_authenticated()
            else:
                await self.app_authenticated()

    async def hold_idle(self, n: int) -> None:
        """Connections that open and send nothing, held for the whole flood."""
        for i in range(n):
            conn = await self.open("control" if i % 2 else "app")
            if conn is not None:
                self.idle.append(conn[1])

    async def run(self) -> None:
        await self.hold_idle(self.cfg["idle"])
        await asyncio.gather(*(self.worker() for _ in range(self.cfg["concurrency"])))
        for w in self.idle:
            await self.close(w)


def main() -> None:
    cfg = json.loads(sys.argv[1])
    flood = Flood(cfg)
    asyncio.run(flood.run())
    c = flood.counts
    print(json.dumps({"sent": c.sent, "replies": c.replies, "typed_errors": c.typed_errors,
                      "harmless_ok": c.harmless_ok, "untyped": c.untyped[:10], "untyped_count": len(c.untyped),
                      "connections": c.connections, "refused_connect": c.refused_connect}))


if __name__ == "__main__":
    main()
