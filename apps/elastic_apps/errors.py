"""One root exception for everything an application can meet through the library."""


class ElasticAppError(Exception):
    pass


class NotInJob(ElasticAppError):
    """The process was not started by elastic (its environment lacks the job variables)."""


class ChannelClosed(ElasticAppError):
    """The connection to the daemon is gone."""


class DaemonRefused(ElasticAppError):
    """The daemon answered a request with an error line."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message


class Refuse(ElasticAppError):
    """Raise from pre_shrink / pre_grow to refuse the order (the reason is recorded)."""

    def __init__(self, reason: str = "") -> None:
        super().__init__(reason)
        self.reason = reason


class Defer(ElasticAppError):
    """Raise from pre_shrink / pre_grow to ask the daemon to wait `seconds` before asking again."""

    def __init__(self, seconds: float) -> None:
        super().__init__(f"defer {seconds:g} s")
        self.seconds = seconds
