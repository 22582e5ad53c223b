"""The messages places exchange: tuples `(kind, sender_id, *payload)`, pickled.

Tuples of builtins keep pickling cheap on the hot paths (steal requests and answers).
Sender -1 is a process that has no place id yet (a JOIN); -2 is the leader's handler
thread talking to place 0 inside the same process.

Work stealing
  STEAL         thief -> victim         random steal request; always answered
  STEAL_REPLY   victim -> thief         (bag | None)
  LIFELINE      thief -> buddy          "send me work when you have some"
  DELIVER       giver -> receiver       (bag,) lifeline delivery or a leaving place's handoff
  ACK           receiver|root -> giver  the delivered work is accounted for (termination)

Termination (root = place 0 counts active places)
  ACTIVATE      receiver -> root        (giver,) an idle place got work; root ACKs the giver
  IDLE          place -> root           this place is out of work and owes no ACK

Membership (root orchestrates, one operation at a time)
  JOIN          process -> root         (host, local_index, address, joining)
  WELCOME       root -> new place       (id, version, members, rank, nranks)
  MEMBERS       root -> places          (version, members, leaving_ids)
  MEMBERS_ACK   place -> root           (version,)
  LEAVE         root -> leaving place   (version, target_id, leaving_ids, old_member_ids)
  FLUSH         place -> leaving place  nothing more will come from me
  RESULT        place -> root           (partial_result,)
  LEFT          leaving place -> root   handoff complete, exiting
  FINISH        root -> places          send your result and exit
  EXIT          root -> late joiner     the computation is over: exit

Local
  REQUEST       handler -> root         (Request,) a shrink or a wait for joined hosts
  RECHECK       handler -> root         a handler operation ended: check for termination
  EOF           transport -> place      the connection from this sender closed
"""

from __future__ import annotations

from typing import Final

STEAL: Final = "steal"
STEAL_REPLY: Final = "steal_reply"
LIFELINE: Final = "lifeline"
DELIVER: Final = "deliver"
ACK: Final = "ack"
ACTIVATE: Final = "activate"
IDLE: Final = "idle"
JOIN: Final = "join"
WELCOME: Final = "welcome"
MEMBERS: Final = "members"
MEMBERS_ACK: Final = "members_ack"
LEAVE: Final = "leave"
FLUSH: Final = "flush"
RESULT: Final = "result"
LEFT: Final = "left"
FINISH: Final = "finish"
EXIT: Final = "exit"
REQUEST: Final = "request"
RECHECK: Final = "recheck"
EOF: Final = "eof"

ROOT: Final = 0
NO_ID: Final = -1
HANDLER: Final = -2
