"""A complete malleable application (docs/APP_GUIDE.md walks through it).

It sums i*i for i < ITEMS in rounds; the leader (index 0) owns the work and the channel, the
other processes keep their host busy until the job ends. Run as a job's command:
`python3 malleable_app.py ITEMS` (malleable_app.toml).
"""

from __future__ import annotations

import sys
import threading
import time
from pathlib import Path

from elastic_apps import Defer, JobChannel, MalleableHandler, Refuse, job_env, on_leaving


class Work(MalleableHandler):
    """Handlers run on the library's order thread, one at a time: share state under a lock."""

    def __init__(self, job: JobChannel, items: int) -> None:
        self.job, self.lock = job, threading.Lock()
        self.next_item, self.items, self.total = 0, items, 0
        self.width = len(job.hosts)  # hosts the rounds are spread over
        self.final_phase = False

    def pre_shrink(self, n: int) -> list[str]:
        with self.lock:
            if self.final_phase:
                raise Refuse("in the final phase")     # the policy asks again later
            if self.items - self.next_item < 10 * n:
                raise Defer(30)                        # nearly done: no order for 30 s
            leaving = self.job.hosts[-n:]              # the list before the shrink; never
            self.width -= n                            # hosts[0], where the leader runs
            return leaving                             # answered as `shrunk` on return

    def post_grow(self, n: int, continued_hosts: list[str], new_hosts: list[str]) -> None:
        with self.lock:                                # `grown` is answered on return
            self.width = len(continued_hosts) + len(new_hosts)

    def on_hosts_changed(self, hosts: list[str], lost_hosts: list[str], reason: str) -> None:
        with self.lock:                                # a node failed, or a deadline passed
            self.width = len(hosts)

    def round(self) -> bool:
        with self.lock:
            start, self.next_item = self.next_item, min(self.items, self.next_item + 100 * self.width)
        self.total += sum(i * i for i in range(start, self.next_item))
        time.sleep(0.05)                               # a round's worth of computing
        return self.next_item < self.items


def main() -> int:
    items = int(sys.argv[1]) if len(sys.argv) > 1 else 100_000
    env = job_env()
    done = Path(f"done-{env.job_id}")
    if not env.is_leader:                              # a worker: busy until the job ends
        on_leaving(lambda reason: print(f"{env.host}: leaving ({reason})", flush=True))
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
    print(f"sum {work.total} on {len(job.hosts)} hosts", flush=True)
    done.touch()
    job.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
