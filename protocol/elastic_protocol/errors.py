"""One root exception for everything that can go wrong on the wire."""


class ProtocolError(Exception):
    """Root of every wire-level error; `code` is the token sent in an error reply."""

    code = "protocol_error"


class FrameTooLong(ProtocolError):
    code = "line_too_long"


class MalformedMessage(ProtocolError):
    code = "malformed"


class VersionMismatch(ProtocolError):
    code = "version_mismatch"


class AuthenticationFailed(ProtocolError):
    code = "auth_failed"
