"""The one admission decision: may a message be taken, and where to, sans-IO.

Every path that takes a message in asks :func:`admission` (the plain intake for
datagrams and stream records, a stream sender that numbers its messages itself, a
message back from the spool, a held datagram the disk refused); the compiled
admitter asks its C twin (``pb_admission``, ``native/intake.h``), and
``tests/unit/daemon/native/test_admission.py`` compares the two.  It reads the topic's
limits, the message's size and memory charge and the room memory has left, and
returns a verdict; the caller acts on it (counts, places, spills or refuses).

What differs between the paths is the sender's policy (``sender``):

=================  ========================  ====================  =====================
sender             topic's rate budget spent  partitions not known  no room in memory
=================  ========================  ====================  =====================
``DATAGRAM``       refused: rate_limited      taken (it waits)      to the disk spool
``STREAM``         refused: rate_limited      taken (it waits)      wait (backpressure)
``NUMBERED``       wait (backpressure)        wait                  wait (backpressure)
``REPLAY``         not applied                taken (it waits)      refused: buffer_full
=================  ========================  ====================  =====================

A stream record that could never fit (its charge above ``capacity``) is refused as
too_large instead of waiting; a numbered stream (``route/sequenced.py``) waits where the
others refuse on the rate limit, since whether a record finds the budget spent depends on
timing, and a refused record would shift the ids of those after it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final, Protocol

from pulsar_bruce import reasons
from pulsar_bruce.native import pick

#: A datagram: never waits; without room in memory it goes to the disk spool.
DATAGRAM: Final = 0
#: A stream record of the plain intake: without room it waits (the stream's backpressure).
STREAM: Final = 1
#: A stream record its sender numbered itself: never refused for timing, waits instead.
NUMBERED: Final = 2
#: A message back from the spool (or a held datagram the disk refused): no rate limit.
REPLAY: Final = 3

#: Verdicts besides the refusals (which are the discard reasons).
ACCEPT: Final = "accept"
SPILL: Final = "spill"
WAIT: Final = "wait"


class TopicLimits(Protocol):
    """What the decision reads of a topic (``TopicState``)."""

    @property
    def max_message_bytes(self) -> int: ...

    @property
    def rate_budget(self) -> int | None: ...

    @property
    def partitions(self) -> tuple[object, ...]: ...


def admission_py(
    state: TopicLimits | None, size: int, charge: int, room: int, capacity: int, sender: int, /
) -> str:
    """``ACCEPT``, ``SPILL``, ``WAIT`` or a discard reason for a message of ``size`` bytes
    charged ``charge`` against memory, which has ``room`` bytes left of its ``capacity``
    (``state`` None: no topic limits apply)."""
    if state is not None:
        if size > state.max_message_bytes:
            return reasons.TOO_LARGE
        budget = state.rate_budget
        if budget is not None and budget <= 0 and sender != REPLAY:
            return WAIT if sender == NUMBERED else reasons.RATE_LIMITED
        if sender == NUMBERED and not state.partitions:
            return WAIT  # the partition count is being looked up
    if charge <= room:
        return ACCEPT
    if sender == DATAGRAM:
        return SPILL
    if sender == REPLAY:
        return reasons.BUFFER_FULL
    return reasons.TOO_LARGE if charge > capacity else WAIT  # never fits: not worth waiting


if TYPE_CHECKING:
    admission = admission_py
else:
    admission = pick("admission", admission_py)
