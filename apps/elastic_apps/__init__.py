"""What runs inside elastic jobs: the client library applications use to be malleable.

    from elastic_apps import JobChannel, MalleableHandler

    class Handler(MalleableHandler):     # every hook is optional
        def pre_shrink(self, n): ...          # -> list of hosts to give back
        def post_grow(self, n, continued, new): ...

    job = JobChannel.connect()       # reads ELASTIC_* from the environment
    job.register(Handler())          # the job is malleable from here on
    ...
    job.disable()                    # before the final phase: no more orders
    job.close()

    on_leaving(lambda reason: ...)   # any process: its last word before the daemon ends it

docs/APP_GUIDE.md is the guide.
"""

from elastic_apps.channel import JobChannel
from elastic_apps.env import JobEnv, job_env
from elastic_apps.errors import (
    ChannelClosed,
    DaemonRefused,
    Defer,
    ElasticAppError,
    NotInJob,
    Refuse,
)
from elastic_apps.handler import MalleableHandler
from elastic_apps.leaving import ENDING, REMOVED, on_leaving

__all__ = [
    "ENDING",
    "REMOVED",
    "ChannelClosed",
    "DaemonRefused",
    "Defer",
    "ElasticAppError",
    "JobChannel",
    "JobEnv",
    "MalleableHandler",
    "NotInJob",
    "Refuse",
    "job_env",
    "on_leaving",
]
