"""The last word of a job's process before the daemon ends it.

The daemon ends a job's processes on a host with one SIGTERM and, its kill-wait later
(`elasticd start --kill-wait`, 5 s by default), SIGKILL: on the hosts a job gives back (a
shrink's, a release's, a grow refused or undone) and on all of them when the job ends
(cancelled, its time limit, `elasticd stop`). Left alone, a Python process dies of that
SIGTERM at once, and the shell that runs the command writes `Terminated` to the job's
output. `on_leaving(hook)` runs the hook instead, with the kill-wait as its grace, so the
process can flush, or hand its work back (`put` it for the leader), and then exits:

- `removed` (the job runs on without this host): exit status 0, nothing more in the output;
- `ending` (the job is being ended): the SIGTERM is taken again once the hook has returned,
  so the process still ends by it, as the job's accounting expects.

Which one it is, the process reads in the job's hostfile (ELASTIC_HOSTFILE), which the
daemon rewrites without the hosts it takes back before it signals the processes there.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
from collections.abc import Callable
from types import FrameType

from elastic_apps.env import JobEnv, job_env
from elastic_apps.errors import ElasticAppError

log = logging.getLogger("elastic_apps")

REMOVED = "removed"
ENDING = "ending"


def leaving_reason(env: JobEnv) -> str:
    """`removed` when the job's hostfile no longer lists this process's host, else `ending`
    (also when the hostfile cannot be read: the job's end is the case that keeps the signal)."""
    if env.hostfile is None:
        return ENDING
    try:
        with open(env.hostfile) as f:
            hosts = {line.strip() for line in f}
    except OSError:
        return ENDING
    return ENDING if env.host in hosts or not hosts - {""} else REMOVED


def on_leaving(hook: Callable[[str], object], env: JobEnv | None = None) -> None:
    """Run `hook(reason)` when the daemon ends this process (see the module's docstring).

    Call it once, early, from the main thread (Python runs signal handlers there, between
    two bytecodes of whatever the main thread does: a main thread blocked in a long C call
    runs the hook when the call returns). The hook has the kill-wait from the SIGTERM to
    finish; an exception in it is logged, and the process exits all the same.
    """
    if threading.current_thread() is not threading.main_thread():
        raise ElasticAppError("on_leaving() must be called from the main thread (signal handlers run there)")
    where = env or job_env()
    ran = threading.Event()

    def handle(signum: int, frame: FrameType | None) -> None:
        if ran.is_set():
            return  # a second SIGTERM while the hook runs: it still has its grace
        ran.set()
        reason = leaving_reason(where)
        try:
            hook(reason)
        except Exception:  # the process leaves whatever the hook did
            log.exception("elastic: the on_leaving hook failed")
        finally:
            for stream in (sys.stdout, sys.stderr):
                try:
                    stream.flush()
                except (OSError, ValueError):
                    pass
        if reason == REMOVED:
            os._exit(0)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGTERM)

    signal.signal(signal.SIGTERM, handle)
