"""The Python client library as a conformance client (protocol/conformance/run_client.py):
obeys N orders (a shrink gives back the job's last hosts), then deregisters and exits 0."""

from __future__ import annotations

import sys
import threading

from elastic_apps import JobChannel, MalleableHandler

ORDERS = int(sys.argv[1])
done = threading.Semaphore(0)


class LastHostsFirst(MalleableHandler):
    def __init__(self, job: JobChannel) -> None:
        self.job = job

    def pre_shrink(self, n: int) -> list[str]:
        return self.job.hosts[-n:]

    def post_shrink(self, n: int, removed_hosts: list[str]) -> None:
        done.release()

    def post_grow(self, n: int, continued_hosts: list[str], new_hosts: list[str]) -> None:
        # The grow is confirmed when this returns; counted once the answer is on its way.
        threading.Timer(0.05, done.release).start()


def main() -> int:
    job = JobChannel.connect()
    job.register(LastHostsFirst(job))
    for _ in range(ORDERS):
        if not done.acquire(timeout=15):
            return 3
    job.wait_idle(5)
    job.disable()
    job.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
