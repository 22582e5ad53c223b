"""A test application: records every handler call and is steered through files in its
working directory, so tests can drive it step by step.

MODE (env): normal | choose_first | refuse | defer (DEFER s, 60) | hang | die_on_shrink | slow_shrink | slow_grow (SLOW s)
| refuse_grow | defer_grow (the grow's pre_grow raises Refuse or Defer(DEFER); shrinks as normal);
CRASH_JOINING (env): processes started by a grow exit 3 at once (CRASH_JOINING=late: once
the file `crash-joining` exists);
CHANNEL_TIMEOUT (env): the library's reply timeout.
Files the test creates: `finish` (everyone exits), `disable` (leader deregisters),
`request-N` (leader asks for N nodes), `release-HOST` (leader releases HOST).
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from elastic_apps import Defer, JobChannel, MalleableHandler, Refuse, job_env

MODE = os.environ.get("MODE", "normal")
here = Path.cwd()


def log(line: str) -> None:
    with open(here / "events.log", "a") as f:
        f.write(line + "\n")


class Recorder(MalleableHandler):
    def __init__(self, job: JobChannel) -> None:
        self.job = job

    def pre_shrink(self, n: int) -> list[str]:
        log(f"pre_shrink {n}")
        if MODE == "refuse":
            raise Refuse("busy with a phase that cannot be split")
        if MODE == "defer":
            raise Defer(float(os.environ.get("DEFER", "60")))
        if MODE == "hang":
            time.sleep(30)
        if MODE == "die_on_shrink":
            os._exit(7)
        if MODE == "slow_shrink":
            time.sleep(float(os.environ.get("SLOW", "2")))
        others = [h for h in self.job.hosts if h != self.job.env.host]
        return others[:n] if MODE == "choose_first" else others[-n:]

    def post_shrink(self, n: int, removed_hosts: list[str]) -> None:
        log(f"post_shrink {n} {','.join(removed_hosts)}")

    def pre_grow(self, n: int) -> None:
        log(f"pre_grow {n}")
        if MODE == "refuse_grow":
            raise Refuse("not growing now")
        if MODE == "defer_grow":
            raise Defer(float(os.environ.get("DEFER", "60")))

    def post_grow(self, n: int, continued_hosts: list[str], new_hosts: list[str]) -> None:
        log(f"post_grow {n} {','.join(continued_hosts)} {','.join(new_hosts)}")
        if MODE == "slow_grow":
            time.sleep(float(os.environ.get("SLOW", "2")))

    def on_hosts_changed(self, hosts: list[str], lost_hosts: list[str], reason: str) -> None:
        log(f"hosts_changed {reason} {','.join(hosts)} lost={','.join(lost_hosts)}")


def main() -> int:
    env = job_env()
    if env.joining and os.environ.get("CRASH_JOINING"):
        while os.environ["CRASH_JOINING"] == "late" and not (here / "crash-joining").exists():
            time.sleep(0.02)
        return 3  # a process started by a grow that dies (at once, or when told)
    (here / f"pid-{env.host}{'-joining' if env.joining else ''}").write_text(str(os.getpid()))
    if not env.is_leader:
        while not (here / "finish").exists():
            time.sleep(0.02)
        return 0
    job = JobChannel.connect(env, timeout=float(os.environ.get("CHANNEL_TIMEOUT", "30")))
    (here / "secret").write_text(env.secret)
    job.register(Recorder(job))
    log("registered")
    while not (here / "finish").exists():
        for f in here.glob("request-*"):
            job.request_grow(int(f.name.split("-", 1)[1]))
            f.unlink()
            log("requested")
        for f in here.glob("release-*"):
            job.release([f.name.split("-", 1)[1]])
            f.unlink()
            log("released")
        if (here / "disable").exists():
            (here / "disable").unlink()
            job.disable()
            log("disabled")
        time.sleep(0.02)
    log(f"finished hosts={','.join(job.hosts)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
