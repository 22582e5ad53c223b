"""The daemon's defaults, once: the command line, the daemon's configuration, the launchers
and the core all take them from here, so that a changed default changes everywhere (and the
help texts say the value in force)."""

from __future__ import annotations

POLICY = "easy"
KILL_WAIT = 5.0  # s between SIGTERM and SIGKILL when a job is ended
ORDER_DEADLINE = 30.0  # s an application has to answer a shrink or grow order
MIN_RESIZE_INTERVAL = 10.0  # s between two resizes of one job (malleable policies)
SCHEDULE_INTERVAL = 5.0  # s: the policy also runs this often while jobs exist
MIN_FREE_SPACE_MIB = 64  # no job starts while the state directory's file system has less free
OUTPUT_CAP_MIB = 1024  # a job's output files in all; past it the job is ended, FAILED
FS_WAIT = 30.0  # s a launch waits for the file system of the job's paths (ELASTIC_FS_WAIT)
