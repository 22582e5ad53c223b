"""A resize order in flight: what was asked, of whom, and until when."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from elasticd.core.events import Cause, OrderKind


class Settlement(StrEnum):
    """How an order was settled before its hosts are verified free (or taken back)."""

    SHRUNK = "shrunk"
    DEADLINE_MISSED = "deadline_missed"
    REFUSED = "refused"
    DEFERRED = "deferred"
    ORDER_FAILED = "order_failed"
    NODE_FAILED = "node_failed"


@dataclass(slots=True)  # one per resize: slots make it quicker to make and to read
class Order:
    order_id: int
    job_id: int
    kind: OrderKind
    count: int
    new_hosts: tuple[str, ...]  # grow only
    issued: float
    deadline: float
    # Set once the application answered (or the deadline passed) and hosts are being
    # reclaimed; the order completes when they are verified free.
    settled: Settlement | None = None
    # Who asked for it (policy or user): the cause of the size change it ends in.
    cause: Cause = Cause.POLICY
