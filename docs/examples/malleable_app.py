"""A complete malleable application (docs/APP_GUIDE.md walks through it).

It sums f(i) for i < ITEMS, one block of items per host and round; the leader (index 0)
owns the work and the channel, the other processes only keep their host busy until the
job ends. Run as a job's command: `python3 malleable_app.py ITEMS`.
"""

from __future__ import annotations

import sys
import threading
import time
from pathlib import Path

from elastic_apps import Defer, JobChannel, MalleableHandler, Refuse, job_env


class Work(MalleableHandler):
    """Handlers run on the library's order thread, one at a time: share state under a lock."""

    def __init__(self, job: JobChannel, items: int) -> None:
        self.job, self.lock = job, threading.Lock()
        self.next_item, self.items, self.total = 0, items, 0
        self.hosts = list(job.hosts)  # where blocks go, from the next round on
        self.final_phase = False

    def pre_shrink(self, n: int) -> list[str]:
        with self.lock:
            if self.final_phase:
                raise Refuse("in the final phase")   # the daemon asks again later
            if self.items - self.next_item < 10 * n:
                raise Defer(30)                        # nearly done: ask again in 30 s
            leaving = self.hosts[-n:]                  # never the leader's host, hosts[0]
            self.hosts = self.hosts[:-n]
            return leaving                             # answered as `shrunk` on return

    def post_grow(self, n: int, continued_hosts: list[str], new_hosts: list[str]) -> None:
        with self.lock:
            self.hosts = continued_hosts + new_hosts   # used from the next round

    def on_hosts_changed(self, hosts: list[str], lost_hosts: list[str], reason: str) -> None:
        with self.lock:                                # a node failed, or a deadline passed
            self.hosts = list(hosts)

    def round(self) -> bool:
        with self.lock:
            width = len(self.hosts)
            start, self.next_item = self.next_item, min(self.items, self.next_item + 100 * width)
        self.total += sum(i * i for i in range(start, self.next_item))
        time.sleep(0.05)                               # a round's worth of computing
        return self.next_item < self.items


def main() -> int:
    items = int(sys.argv[1]) if len(sys.argv) > 1 else 100_000
    env = job_env()
    done = Path(f"done-{env.job_id}")
    if not env.is_leader:                              # a worker: busy until the job ends
        while not done.exists():
            time.sleep(0.1)
        return 0
    job = JobChannel.connect(env)
    work = Work(job, items)
    job.register(work)                                 # malleable from here on
    while work.round():
        pass
    work.final_phase = True
    job.disable()                                      # no more orders; never fails a finished job
    Path(f"result-{env.job_id}").write_text(f"{work.total}\n")
    done.touch()
    job.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
