"""An asyncio application whose handler methods are coroutines; they must run on its loop."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

from elastic_apps import JobChannel, MalleableHandler, job_env

here = Path.cwd()


class AsyncHandler(MalleableHandler):
    def __init__(self, job: JobChannel, loop_thread: int) -> None:
        self.job = job
        self.loop_thread = loop_thread

    async def pre_shrink(self, n: int) -> list[str]:
        await asyncio.sleep(0.01)
        same = threading.get_ident() == self.loop_thread
        (here / "events.log").open("a").write(f"pre_shrink {n} on_loop={same}\n")
        return [h for h in self.job.hosts if h != self.job.env.host][-n:]

    async def post_shrink(self, n: int, removed_hosts: list[str]) -> None:
        (here / "events.log").open("a").write(f"post_shrink {n} {','.join(removed_hosts)}\n")


async def main() -> None:
    env = job_env()
    if not env.is_leader:
        while not (here / "finish").exists():
            await asyncio.sleep(0.02)
        return
    job = JobChannel(env)
    await asyncio.to_thread(job.open)
    await job.aregister(AsyncHandler(job, threading.get_ident()))
    while not (here / "finish").exists():
        await asyncio.sleep(0.02)
    await asyncio.to_thread(job.disable)


asyncio.run(main())
