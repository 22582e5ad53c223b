"""The hooks an application implements to be malleable.

Every hook is optional: a handler that overrides none still makes its job malleable, and
the defaults below say what happens then. Methods may be plain functions or coroutines
(`async def`); coroutines run on the event loop that was running when the handler was
registered, so asyncio applications keep all their state on one thread.

`job.hosts` (JobChannel.hosts) is the list the daemon has confirmed: an answer changes it
once the daemon has taken the answer. So in `pre_shrink`, `pre_grow` and `post_grow` (whose
return is the answer `grown`) it is the list before the order; in `post_shrink` and
`on_hosts_changed` the list after. Each hook is given the change as its arguments.
"""

from __future__ import annotations


class MalleableHandler:
    def pre_shrink(self, n: int) -> list[str] | None:
        """Choose the `n` hosts to give back and stop using them; return their names.

        `job.hosts` is the list before the shrink. Raise Refuse or Defer to decline.
        Default: None, and the library gives back the last `n` hosts of `job.hosts` that are
        not the leader's. The answer `shrunk` is sent when this returns; the daemon then
        ends the job's processes on those hosts (SIGTERM, SIGKILL after its kill-wait:
        `on_leaving` runs in them).
        """
        return None

    def post_shrink(self, n: int, removed_hosts: list[str]) -> None:
        """The daemon took the answer: `removed_hosts` are no longer the job's and `job.hosts`
        is the list without them. Adapt to the smaller size. Default: nothing."""

    def pre_grow(self, n: int) -> None:
        """About to receive `n` hosts (the daemon is starting the job's command there).
        `job.hosts` is the list before the grow. Raise Refuse or Defer to decline.
        Default: nothing (the grow is taken)."""

    def post_grow(self, n: int, continued_hosts: list[str], new_hosts: list[str]) -> None:
        """Integrate the processes on `new_hosts`; the answer `grown` is sent when this
        returns, so return once they run and take part (raise Refuse, or anything else, to
        refuse the grow instead). `job.hosts` is still the list before the grow, since the
        grow is not done until the daemon takes that answer: the list after it is
        `continued_hosts + new_hosts`, which `job.hosts` becomes once it is taken.
        Default: nothing (the grow is answered at once)."""

    def on_hosts_changed(self, hosts: list[str], lost_hosts: list[str], reason: str) -> None:
        """The daemon changed the job's hosts without an answer from this application:
        `reason` is `node_failed` (the hosts in `lost_hosts` are gone, with whatever ran
        there), `deadline` (an order's deadline passed: for a shrink the daemon took the last
        hosts of the job's list, for a grow it took the new hosts back), `launch_failed` (a
        grow's processes could not be started: the grow is void, or, when `post_grow` had
        returned already, its new hosts are gone again), `order_dropped` or `daemon`. `hosts`
        is what the job holds now, and `job.hosts` already says so. Default: nothing."""
