"""The partition state the intake reads, sans-IO (the compiled ``PartitionState``'s
pure-Python twin).

The compiled admitter reads this state, never the producer's attributes: the
producer owns one and keeps it current through its declared members (``ready``,
``available``) and :meth:`limits`, whenever they change.  ``owner`` (the producer)
goes back to the intake's seal and opened callbacks.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pulsar_bruce.batch.batch_builder import BatchBuilder
from pulsar_bruce.native import pick


def _saturated(limit: int) -> int:
    """A limit as the compiled state keeps it: within a signed 64-bit int (it compares the
    same against sizes, which stay far below)."""
    return max(-(1 << 63), min(limit, (1 << 63) - 1))


class PyPartitionState:
    """A partition's readiness, availability, open batch and batching limits."""

    __slots__ = ("available", "batch", "key_based", "max_batch_bytes", "max_messages", "owner",
                 "ready")  # fmt: skip

    def __init__(self, batch: BatchBuilder, owner: Any):
        self.batch = batch
        self.owner = owner
        #: Registered on a connection: takes new messages (round-robin, failover targets).
        self.ready = False
        #: PartitionKey routing keeps its messages here (``producer/availability.py``).
        self.available = True
        self.max_batch_bytes = self.max_messages = _saturated(1 << 63)
        self.key_based = False

    def limits(self, max_batch_bytes: int, max_messages: int, key_based: bool, /) -> None:
        """The producer's batching limits changed."""
        self.max_batch_bytes = _saturated(max_batch_bytes)
        self.max_messages = _saturated(max_messages)
        self.key_based = bool(key_based)


if TYPE_CHECKING:
    from pulsar_bruce.native import PartitionState as PartitionState
else:
    PartitionState = pick("PartitionState", PyPartitionState)
