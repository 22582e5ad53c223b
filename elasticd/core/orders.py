"""A resize order in flight: what was asked, of whom, and until when."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Order:
    order_id: int
    job_id: int
    kind: str  # "shrink" | "grow"
    count: int
    new_hosts: tuple[str, ...]  # grow only
    issued: float
    deadline: float
    # Set once the application answered (or the deadline passed) and hosts are being
    # reclaimed; the order completes when they are verified free.
    settled: str | None = None
