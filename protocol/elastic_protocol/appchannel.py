"""Application channel: the text lines between a running application and the daemon.

Line-oriented and whitespace-separated so a C, Fortran or shell program can speak it; hosts
never contain '=' or spaces, so trailing `key=value` tokens can be added to a message
without breaking a reader that stops after the fields it knows.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from decimal import Decimal

from elastic_protocol.errors import MalformedMessage

# Messages an application may send.
APP_VERBS = {
    "hello",        # hello VERSION JOB_ID SECRET [host=H] [pid=P]
    "register",     # register            -> the job becomes malleable-ready
    "resume",       # resume [order=ID] HOST... -> after reconnecting: the order it is handling, its hosts
    "deregister",   # deregister          -> no more orders, for good
    "shrunk",       # shrunk HOST...      -> answer to `shrink N`: the hosts released
    "grown",        # grown HOST...       -> answer to `grow N ...`: the hosts now in use
    "refuse",       # refuse [REASON...]  -> answer to an order: not now, not this one
    "defer",        # defer SECONDS       -> answer to an order: ask again later
    "request",      # request N           -> evolving job asks for N more nodes
    "release",      # release HOST...     -> evolving job gives hosts back
    "ping",         # ping                -> pong
    "put",          # put KEY VALUE       -> job-scoped rendezvous value (e.g. a leader's address)
    "get",          # get KEY             -> ok get KEY VALUE | error not_found
}

# The error code of a line the daemon could not save (its state directory is full or failing):
# nothing was changed, and the same line may be sent again later; an answer to an order that
# still cannot be saved at the order's deadline settles the order there (PROTOCOL.md).
STATE_WRITE_FAILED = "state_write_failed"
# Error codes after which the same line, sent again later, may be taken.
RETRY_CODES = frozenset({STATE_WRITE_FAILED})

# Messages the daemon may send.
DAEMON_VERBS = {"ok", "error", "shrink", "grow", "hosts", "pong"}
# The ones it sends unasked (every other line answers the application's last message).
UNSOLICITED_VERBS = {"shrink", "grow", "hosts"}


@dataclass(frozen=True)
class Message:
    verb: str
    args: tuple[str, ...] = ()
    options: dict[str, str] = field(default_factory=dict)
    # The line after the verb, as sent (a refuse reason keeps its key=value words); not part
    # of what the message is, so a parsed message equals the one it was encoded from.
    text: str = field(default="", compare=False)

    def text_without(self, *keys: str) -> str:
        """`text` less the given options' tokens: a free-text reason beside `order=ID`."""
        return " ".join(t for t in self.text.split() if t.partition("=")[0] not in keys or "=" not in t)

    def encode(self) -> bytes:
        parts = [self.verb, *self.args, *(f"{k}={v}" for k, v in self.options.items())]
        for p in parts:
            if not p or any(c.isspace() for c in p):
                raise MalformedMessage(f"token {p!r} is empty or contains white space")
        return " ".join(parts).encode("ascii")


def parse(line: bytes, verbs: set[str]) -> Message:
    """Split a line into verb, positional args and trailing key=value options."""
    try:
        text = line.decode("ascii")
    except UnicodeDecodeError:
        raise MalformedMessage("line is not ASCII text") from None
    if not text.isprintable():
        raise MalformedMessage("line contains control characters")
    tokens = text.split()
    if not tokens:
        raise MalformedMessage("empty line")
    verb = tokens[0]  # verbs are lower case (PROTOCOL.md): `PING` is no verb
    if verb not in verbs:
        raise MalformedMessage(f"unknown message {tokens[0][:32]!r}")
    args: list[str] = []
    options: dict[str, str] = {}
    for tok in tokens[1:]:
        if "=" in tok:
            k, _, v = tok.partition("=")
            options[k] = v
        else:
            args.append(tok)
    rest = text.strip().split(None, 1)
    return Message(verb, tuple(args), options, rest[1] if len(rest) > 1 else "")


def parse_count(msg: Message, index: int = 0) -> int:
    """The positive integer argument orders and requests carry."""
    if len(msg.args) <= index:
        raise MalformedMessage(f"{msg.verb}: missing node count")
    try:
        n = int(msg.args[index])
    except ValueError:
        raise MalformedMessage(f"{msg.verb}: node count {msg.args[index][:32]!r} is not an integer") from None
    if n <= 0:
        raise MalformedMessage(f"{msg.verb}: node count must be positive")
    return n


def seconds_text(seconds: float) -> str:
    """A time on the wire: a plain decimal number (`30`, `2.5`, `1000000`), never an
    exponent, which `:g` wrote for a million seconds (`1e+06`: 1 for a C client's atoi)."""
    text = format(Decimal(repr(float(seconds))), "f")
    return text.rstrip("0").rstrip(".") if "." in text else text


_PLAIN_DECIMAL = re.compile(r"[0-9]+(?:\.[0-9]+)?")


def parse_seconds(text: str, what: str) -> float:
    """A time the application sent (`defer SECONDS`): the same plain decimal the daemon
    writes. An exponent is refused rather than read, so that what a client may send is what
    the spec says and no more (`2.5e1` in one daemon would be an error in the next)."""
    if not _PLAIN_DECIMAL.fullmatch(text):
        raise MalformedMessage(f"{what}: {text[:32]!r} is not a number of seconds (digits and at most one '.')")
    return float(text)


def shrink_order(n: int, order_id: int, deadline_s: float) -> Message:
    return Message("shrink", (str(n),), {"order": str(order_id), "deadline": seconds_text(deadline_s)})


def grow_order(hosts: list[str], order_id: int, deadline_s: float) -> Message:
    return Message(
        "grow", (str(len(hosts)), *hosts), {"order": str(order_id), "deadline": seconds_text(deadline_s)}
    )


def hosts_message(hosts: list[str] | tuple[str, ...], reason: str, order_id: int | None = None) -> Message:
    """The job's hosts, sent unasked when the daemon changed them (or settled the order the
    application was handling) without the application's answer."""
    options = {"reason": reason, **({"order": str(order_id)} if order_id is not None else {})}
    return Message("hosts", tuple(hosts), options)


def parse_error(line: str) -> tuple[str, str]:
    """`error CODE text` -> (CODE, text)."""
    _, code, *rest = line.split(" ", 2)
    return code, rest[0] if rest else ""


def error_line(code: str, message: str) -> bytes:
    """`error CODE free text`: the text is the rest of the line, sanitised to one line of
    printable ASCII (it may quote what a peer sent, control characters included)."""
    text = "".join(c if c.isprintable() or c.isspace() else "?" for c in message)
    clean = " ".join(text.encode("ascii", "replace").decode().split())[:512]
    return f"error {code} {clean}".encode("ascii")
