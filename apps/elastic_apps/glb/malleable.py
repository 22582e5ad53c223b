"""The MalleableHandler the GLB runtime registers for the user: malleability with no code
in the bag.

It runs on the client library's order thread in the leader process and only *asks*
place 0 (through its inbox) to do the work, so the membership state stays on place 0's
worker thread. As in the seed's GLB:
- pre_shrink: choose the hosts to give back (never place 0's, the most recently added
  first), take their places out of the steal and lifeline network and move their bags
  and partial results to staying places; returns when that is done, so the daemon may
  then end those processes.
- post_shrink, pre_grow: nothing to do.
- post_grow: the daemon has started the program on the new hosts (ELASTIC_JOINING=1);
  wait until their places have joined and every place knows them.
The time spent in these GLB steps is recorded (the seed's Fig. 7 split between the
runtime part and the GLB part).
"""

from __future__ import annotations

import json
import queue
import time
from typing import Any

from elastic_apps.channel import JobChannel
from elastic_apps.errors import Refuse
from elastic_apps.glb import messages as M
from elastic_apps.glb.coordinator import HandlerGate, Request
from elastic_apps.glb.place import Message, fatal
from elastic_apps.handler import MalleableHandler

#: How long place 0 may take for one operation; the daemon's order deadline is 30 s.
OPERATION_TIMEOUT = 25.0


class GLBHandler(MalleableHandler):
    def __init__(
        self,
        job: JobChannel,
        root_inbox: queue.SimpleQueue[Message],
        gate: HandlerGate,
        resize_log: list[dict[str, Any]],
    ) -> None:
        self.job = job
        self.inbox = root_inbox
        self.gate = gate
        self.log = resize_log
        self._grow_ordered_at = 0.0

    def _record(self, record: dict[str, Any]) -> None:
        """Keep it for the final output line, and print it now: a long run shows its
        resizes as they happen (one `{"glb_resize": ...}` line each)."""
        self.log.append(record)
        print(json.dumps({"glb_resize": record}), flush=True)

    def _ask(self, request: Request, timeout: float = OPERATION_TIMEOUT) -> bool:
        self.inbox.put((M.REQUEST, M.HANDLER, request))
        return request.done.wait(timeout)

    def pre_shrink(self, n: int) -> list[str]:
        if not self.gate.begin():
            raise Refuse("the computation is finishing")
        try:
            t0 = time.monotonic()
            candidates = [h for h in self.job.hosts if h != self.job.env.host]
            if n > len(candidates):
                raise Refuse(f"cannot give back {n} hosts: place 0's host stays")
            hosts = candidates[len(candidates) - n :]
            request = Request("shrink", hosts)
            if not self._ask(request):
                fatal(f"moving the work off {hosts} did not end within {OPERATION_TIMEOUT:.0f} s")
            self._record({
                "op": "shrink",
                "hosts": hosts,
                "places": request.info.get("places", 0),
                "moved_bags": request.info.get("moved_bags", 0),
                "glb_s": round(time.monotonic() - t0, 6),
            })
            return hosts
        finally:
            self.gate.end()

    def pre_grow(self, n: int) -> None:
        # The gate stays closed until post_grow ends (the library calls it right after,
        # on this thread): termination must not be declared while new places come in.
        self._grow_ordered_at = time.monotonic()
        if not self.gate.begin():
            raise Refuse("the computation is finishing")

    def post_grow(self, n: int, continued_hosts: list[str], new_hosts: list[str]) -> None:
        try:
            request = Request("await_hosts", list(new_hosts))
            if not self._ask(request):
                # Take back whatever did join (its work moves to staying places), then
                # refuse: the daemon ends the processes on these hosts.
                abandon = Request("abandon_hosts", list(new_hosts))
                if not self._ask(abandon):
                    fatal(f"could not take back the places on {new_hosts}")
                raise Refuse(f"the new places on {','.join(new_hosts)} did not join in time")
            done = time.monotonic()
            joined = request.info.get("joined_at", done)
            self._record({
                "op": "grow",
                "hosts": list(new_hosts),
                "places": request.info.get("places", 0),
                # process start and connection, as APGAS's part in the seed
                "start_s": round(max(0.0, joined - self._grow_ordered_at), 6),
                # admission into the GLB network (ids, member lists, lifelines)
                "glb_s": round(request.info.get("glb_s", 0.0), 6),
                "handler_s": round(done - self._grow_ordered_at, 6),
            })
        finally:
            self.gate.end()
