"""A test application whose workers hand their count back in `on_leaving`, as
docs/APP_GUIDE.md shows, to a leader whose handler overrides post_shrink only.

Every process writes `pid-HOST`. Workers count rounds until the file `finish` exists; when
the daemon ends one, its hook writes `left-HOST` (the reason) and, when its host was
removed, puts `handed-HOST COUNT`. The leader's post_shrink waits for that value from each
removed host and writes it to `handed-HOST`; at the end it writes `hosts` (`job.hosts`).
LEAVE_SLOW (env, seconds): the hook sleeps that long first.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from elastic_apps import REMOVED, JobChannel, MalleableHandler, job_env, on_leaving

here = Path.cwd()


class Collect(MalleableHandler):
    """pre_shrink is the library's default: the last hosts, never the leader's."""

    def __init__(self, job: JobChannel) -> None:
        self.job = job

    def post_shrink(self, n: int, removed_hosts: list[str]) -> None:
        for h in removed_hosts:
            (here / f"handed-{h}").write_text(self.job.wait_value(f"handed-{h}", timeout=10))


def main() -> int:
    env = job_env()
    (here / f"pid-{env.host}").write_text(str(os.getpid()))
    if not env.is_leader:
        count = 0

        def leaving(reason: str) -> None:
            time.sleep(float(os.environ.get("LEAVE_SLOW", "0")))
            (here / f"left-{env.host}").write_text(reason)
            if reason == REMOVED:
                with JobChannel.connect(env) as ch:
                    ch.put(f"handed-{env.host}", str(count))

        on_leaving(leaving)
        print(f"worker on {env.host} started", flush=True)
        while not (here / "finish").exists():
            count += 1
            time.sleep(0.01)
        return 0
    job = JobChannel.connect(env)
    job.register(Collect(job))
    while not (here / "finish").exists():
        time.sleep(0.05)
    job.disable()
    (here / "hosts").write_text(",".join(job.hosts))
    job.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
