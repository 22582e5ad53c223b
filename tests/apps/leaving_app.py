"""A test application whose handler overrides no hook, and whose workers hand their count
back in `on_leaving`.

Every process writes `pid-HOST`. Workers count rounds until the file `finish` exists; when
the daemon ends one, its hook writes `left-HOST` (the reason) and, when its host was
removed, puts `handed-HOST COUNT` for the leader. The leader registers a bare
MalleableHandler, writes `handed-HOST` files for the values it finds, and `hosts` with
`job.hosts` at the end. LEAVE_SLOW (env, seconds): the hook sleeps that long first.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from elastic_apps import REMOVED, JobChannel, MalleableHandler, job_env, on_leaving

here = Path.cwd()


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
    job.register(MalleableHandler())
    while not (here / "finish").exists():
        for h in env.hosts:
            value = job.get(f"handed-{h}")
            if value is not None and not (here / f"handed-{h}").exists():
                (here / f"handed-{h}").write_text(value)
        time.sleep(0.05)
    job.disable()
    (here / "hosts").write_text(",".join(job.hosts))
    job.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
