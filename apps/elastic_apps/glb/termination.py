"""Global termination: when no place has work and no work is in flight.

The seed's GLB gets this from one APGAS `finish`. Here place 0 (the root, which is never
removed) counts the places that are *active*, with one rule that makes the count safe
against messages overtaking each other on different connections:

- Every place starts active (counted), and so does a place admitted by a grow.
- A place that is out of work, has failed its random steals and has set its lifelines
  reports IDLE to the root -- but only once every delivery it made has been ACKed.
  Random steals need no accounting: the thief is active while it waits for the answer.
- A place that gives work to another (a lifeline delivery or a leaving place's handoff)
  counts one pending ACK. The receiver, if it is active, ACKs the giver itself; if it had
  reported IDLE, it becomes active again and tells the root (ACTIVATE), and the *root*
  ACKs the giver after counting it.

So the giver stays counted until the root has counted the receiver: the root's count is
never zero while work exists or travels, and it reaches zero once every place has reported
IDLE with nothing in flight. Leaving places hand their work off the same way before they
report IDLE, so a shrink keeps the count exact; the root still waits for a membership
operation to end before it declares termination.
"""

from __future__ import annotations

from dataclasses import dataclass


class ActiveCount:
    """The root's side: how many places may still hold or receive work."""

    def __init__(self, initial: int = 1) -> None:
        self.active = initial

    def admitted(self, n: int) -> None:
        self.active += n

    def activated(self) -> None:
        self.active += 1

    def idled(self) -> None:
        if self.active <= 0:
            raise RuntimeError("termination count would go negative: a place reported IDLE twice")
        self.active -= 1

    @property
    def quiescent(self) -> bool:
        return self.active == 0


@dataclass
class PlaceActivity:
    """A place's side: whether the root counts it, and the ACKs it still waits for."""

    counted: bool = True
    pending_acks: int = 0

    def gave_work(self) -> None:
        self.pending_acks += 1

    def acked(self) -> None:
        if self.pending_acks <= 0:
            raise RuntimeError("an ACK arrived for no delivery")
        self.pending_acks -= 1

    def received_work(self) -> bool:
        """Account for delivered work; True if the root must be told (ACTIVATE) and will
        ACK the giver, False if this place ACKs the giver itself."""
        if self.counted:
            return False
        self.counted = True
        return True

    def may_report_idle(self) -> bool:
        return self.counted and self.pending_acks == 0

    def reported_idle(self) -> None:
        self.counted = False
