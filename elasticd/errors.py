"""One root exception for the daemon package; the control channel maps `code` onto the wire."""

from __future__ import annotations


class ElasticError(Exception):
    code = "error"


class JobRejected(ElasticError):
    """A submission that is well-formed but cannot run here (e.g. wider than the cluster)."""

    code = "job_rejected"

    def __init__(self, problems: list[str]) -> None:
        super().__init__("; ".join(problems))
        self.problems = problems

    def __reduce__(self) -> tuple[type, tuple[list[str]]]:  # whole across processes (sim workers)
        return type(self), (self.problems,)


class UnknownJob(ElasticError):
    code = "unknown_job"


class NodesMissing(ElasticError):
    """A restart whose nodes leave out nodes that running jobs hold: refused (as Slurm never
    loses running jobs silently) unless told to end those jobs."""

    code = "nodes_missing"


class InvalidTransition(ElasticError):
    """An event that does not fit the job's state: a bug in the caller, never user input."""

    code = "internal"


class PolicyError(ElasticError):
    """A policy returned a decision the core cannot carry out: a bug in that policy."""

    code = "internal"


class QueueFull(ElasticError):
    """A submission past the daemon's queue limit; nothing was queued."""

    code = "queue_full"


class DaemonNotRunning(ElasticError):
    code = "no_daemon"


class InsecureSecret(ElasticError):
    """The daemon's secret file is readable by others or not the user's own."""

    code = "insecure_secret"


class DaemonError(ElasticError):
    """The daemon answered a request with an error reply."""

    def __init__(self, code: str, message: str, details: list[str] | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.details = details or []

    def __reduce__(self) -> tuple[type, tuple[str, str, list[str]]]:
        return type(self), (self.code, str(self), self.details)


class LaunchError(ElasticError):
    """A job's processes could not be started; none of them is left running."""

    code = "launch_failed"

    @property
    def exit_code(self) -> int:
        """As a shell would report it (what the job's EXIT shows)."""
        text = str(self)
        if text.startswith("command not found"):
            return 127
        if text.startswith("permission denied"):
            return 126
        return 1


class JobFileError(ElasticError):
    """A job file that cannot be read or validated; one entry per problem."""

    code = "invalid_job"

    def __init__(self, path: str, problems: list[str]) -> None:
        super().__init__(f"{path}: invalid job file")
        self.path = path
        self.problems = problems

    def __reduce__(self) -> tuple[type, tuple[str, list[str]]]:
        return type(self), (self.path, self.problems)


class OrderRejected(ElasticError):
    """An application's message that does not fit the job's order state; sent back to it
    as a typed error line, the job and the order stay as they were."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code

    def __reduce__(self) -> tuple[type, tuple[str, str]]:
        return type(self), (self.code, str(self))


class ResizeRejected(ElasticError):
    """A resize asked for by a user that the job cannot take now; says why."""

    code = "resize_rejected"


class JournalError(ElasticError):
    """The journal in the state directory cannot be opened, read or written."""

    code = "journal"


class StateWriteError(JournalError):
    """The daemon could not save a change to its state directory (disk full, I/O error,
    read-only, file too large): the change was not made, and the caller is told."""

    code = "state_write_failed"


class MissingExtra(ElasticError):
    """An optional part of the package is asked for but not installed (`pip install 'elastic-hpc[EXTRA]'`)."""

    code = "missing_extra"

    def __init__(self, what: str, extra: str, module: str) -> None:
        super().__init__(f"{what} needs {module}, which comes with an optional extra: "
                         f"pip install 'elastic-hpc[{extra}]'")
        self.what, self.extra, self.module = what, extra, module

    def __reduce__(self) -> tuple[type[MissingExtra], tuple[str, str, str]]:
        return (MissingExtra, (self.what, self.extra, self.module))
