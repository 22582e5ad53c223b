"""The wire between elastic's daemon, its command-line tools and the applications it runs.

Both sides import these models and framing helpers so that the spec in PROTOCOL.md has a
single implementation; nothing here opens a socket.
"""

from elastic_protocol.errors import (
    FrameTooLong,
    MalformedMessage,
    ProtocolError,
    VersionMismatch,
)
from elastic_protocol.version import PROTOCOL_VERSION

__all__ = [
    "PROTOCOL_VERSION",
    "FrameTooLong",
    "MalformedMessage",
    "ProtocolError",
    "VersionMismatch",
]
