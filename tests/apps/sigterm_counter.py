"""A test job that counts the SIGTERMs each of its processes gets, as a checkpointing
application would see them: a second SIGTERM is where such an application gives up its
checkpoint and quits at once.

Every process (this one, a child in its process group, and with DETACH=1 a child in a
session of its own) appends `start PID HOST` to `starts` in the working directory when it
runs, and `term PID HOST` to `terms` for every SIGTERM it receives; after the first one it
runs on for LINGER seconds (the checkpoint), then exits 0. Unended, it runs until the file
`finish` appears. With REGISTER=1 the first process registers a malleable handler that
gives back the last hosts of the job on a shrink. With CHILD_LINGER=S its children run on S
seconds after their SIGTERM and it does not wait for them: the job's first process ends
while the rest of its process group still runs (the job's own end then finds them there).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import FrameType

here = Path.cwd()
HOST = os.environ.get("ELASTIC_HOST", "?")
LINGER = float(os.environ.get("LINGER", "1.5"))
CHILD_LINGER = os.environ.get("CHILD_LINGER")
ended_at: float | None = None


def note(file: str, word: str) -> None:
    # One write of a whole line in append mode: lines of concurrent processes never mix.
    fd = os.open(here / file, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.write(fd, f"{word} {os.getpid()} {HOST}\n".encode())
    finally:
        os.close(fd)


def on_term(_sig: int, _frame: FrameType | None) -> None:
    global ended_at
    note("terms", "term")
    if ended_at is None:
        ended_at = time.monotonic()


def run(linger: float) -> int:
    signal.signal(signal.SIGTERM, on_term)
    note("starts", "start")
    while not (here / "finish").exists():
        if ended_at is not None and time.monotonic() - ended_at >= linger:
            return 0
        time.sleep(0.02)
    return 0


def main() -> int:
    child_linger = LINGER if CHILD_LINGER is None else float(CHILD_LINGER)
    if sys.argv[1:] == ["child"]:
        return run(child_linger)
    if sys.argv[1:] == ["detached"]:
        os.setsid()
        return run(child_linger)
    children = [subprocess.Popen([sys.executable, __file__, "child"])]
    if os.environ.get("DETACH") == "1":
        children.append(subprocess.Popen([sys.executable, __file__, "detached"]))
    if os.environ.get("REGISTER") == "1" and os.environ.get("ELASTIC_NODE_INDEX") == "0":
        from elastic_apps import JobChannel, MalleableHandler, job_env

        class GiveBackLast(MalleableHandler):
            def pre_shrink(self, n: int) -> list[str]:
                return job.hosts[-n:]

        job = JobChannel.connect(job_env())
        job.register(GiveBackLast())
        (here / "registered").write_text("")
    code = run(LINGER)
    if CHILD_LINGER is None:
        for child in children:
            child.wait()
    return code


if __name__ == "__main__":
    sys.exit(main())
