"""The hooks an application implements to be malleable.

Methods may be plain functions or coroutines (`async def`); coroutines run on the event
loop that was running when the handler was registered, so asyncio applications keep all
their state on one thread.
"""

from __future__ import annotations


class MalleableHandler:
    def pre_shrink(self, n: int) -> list[str]:
        """Choose the `n` hosts to give back and stop using them; return their names.

        Raise Refuse or Defer to decline. Processes still running on the returned hosts
        are ended by the daemon once the answer is sent.
        """
        raise NotImplementedError("a MalleableHandler must implement pre_shrink")

    def post_shrink(self, n: int, removed_hosts: list[str]) -> None:
        """The hosts are gone from the job; adapt to the smaller size."""

    def pre_grow(self, n: int) -> None:
        """About to receive `n` hosts (processes are being started there). Raise Refuse or
        Defer to decline."""

    def post_grow(self, n: int, continued_hosts: list[str], new_hosts: list[str]) -> None:
        """Integrate the processes on `new_hosts`; the grow is confirmed to the daemon when
        this returns, so return once they run and take part."""

    def on_hosts_changed(self, hosts: list[str], lost_hosts: list[str], reason: str) -> None:
        """The daemon changed the job's hosts without an answer from this application:
        `reason` is `node_failed` (the hosts in `lost_hosts` are gone, with whatever ran
        there), `deadline` (an order's deadline passed: for a shrink the daemon took the last
        hosts of the job's list, for a grow it took the new hosts back), `launch_failed` (a
        grow's processes could not be started: the grow is void, or, when `post_grow` had
        returned already, its new hosts are gone again) or `order_dropped`. `hosts` is what
        the job holds now; the library's `hosts` already says so."""
