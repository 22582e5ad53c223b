"""What a process learns about its job from the environment elastic starts it with."""

from __future__ import annotations

import os
from dataclasses import dataclass

from elastic_apps.errors import NotInJob


@dataclass(frozen=True)
class JobEnv:
    job_id: int
    name: str
    hosts: tuple[str, ...]
    host: str
    index: int
    app_address: tuple[str, int]
    secret: str
    joining: bool
    hostfile: str | None

    @property
    def is_leader(self) -> bool:
        """The first process of the original start; it talks to the daemon for the job."""
        return self.index == 0 and not self.joining


def job_env(environ: dict[str, str] | None = None) -> JobEnv:
    e = os.environ if environ is None else environ
    try:
        host, _, port = e["ELASTIC_APP_ADDRESS"].rpartition(":")
        return JobEnv(
            job_id=int(e["ELASTIC_JOB_ID"]),
            name=e.get("ELASTIC_JOB_NAME", ""),
            hosts=tuple(h for h in e["ELASTIC_JOB_HOSTS"].split(",") if h),
            host=e["ELASTIC_HOST"],
            index=int(e.get("ELASTIC_NODE_INDEX", "0")),
            app_address=(host, int(port)),
            secret=e["ELASTIC_JOB_SECRET"],
            joining=e.get("ELASTIC_JOINING", "0") == "1",
            hostfile=e.get("ELASTIC_HOSTFILE"),
        )
    except (KeyError, ValueError) as exc:
        raise NotInJob(f"not running inside an elastic job ({exc})") from None
