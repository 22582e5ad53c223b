"""An evolving application (docs/APP_GUIDE.md): it asks for two more nodes for a wide
phase, then gives them back. Run as a job's command: `python3 evolving_app.py`
(evolving_app.toml).
"""

from __future__ import annotations

import sys
import time

from elastic_apps import JobChannel, MalleableHandler, job_env, on_leaving


def main() -> int:
    env = job_env()
    if not env.is_leader:                   # started by the grow (ELASTIC_JOINING=1)
        on_leaving(lambda reason: print(f"{env.host}: leaving ({reason})", flush=True))
        while True:                         # works until its host is released
            time.sleep(0.1)
    with JobChannel.connect(env) as job:
        job.register(MalleableHandler())    # the grant comes as a grow order: register first
        job.request_grow(2)                 # returns once queued, not when granted
        while len(job.hosts) < 3:           # job.hosts lists them once `grown` is taken
            time.sleep(0.1)
        print(f"wide phase on {' '.join(job.hosts)}", flush=True)
        time.sleep(1)                       # the work that needs three nodes
        job.release(job.hosts[1:])          # their processes are ended: on_leaving runs
        print(f"narrow phase on {' '.join(job.hosts)}", flush=True)
        job.disable()                       # no more orders, then the connection closes
    return 0


if __name__ == "__main__":
    sys.exit(main())
