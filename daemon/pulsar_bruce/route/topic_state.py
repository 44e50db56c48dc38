"""The topic state the intake reads and the partition choice rule, sans-IO (the compiled
``TopicState``'s pure-Python twin).

AnyPartition: round-robin over the ready partitions, switching once per batch (the
current partition is kept while its open batch has messages and it is ready).
PartitionKey: ``key % N`` while that partition is available (ready, or still being
created or re-created: ``producer/availability.py``); once it is unavailable, the next
ready one (``+1, +2, ...`` wrapping); the first choice again as soon as it is available.
When no partition is ready, messages wait on the first choice.

The rule is written here and in C (``native/state.c``); the compiled intake runs the C one
for both of its paths, the pure-Python intake this one, and
``tests/unit/daemon/native/test_state.py`` runs both through the same operations.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from pulsar_bruce.native import pick
from pulsar_bruce.producer.partition_state import PartitionState


class PyTopicState:
    """A topic's partitions (in order), round-robin position and intake limits."""

    __slots__ = ("key_hash", "max_message_bytes", "partitions", "rate_budget", "round_robin")

    def __init__(self) -> None:
        self.partitions: tuple[PartitionState, ...] = ()
        #: AnyPartition's current partition (-1: none yet).
        self.round_robin = -1
        #: The topic's message size limit (``--max-message-bytes`` per topic).
        self.max_message_bytes = 1 << 62
        #: Messages still allowed in the current rate-limit interval; None: no limit.
        self.rate_budget: int | None = None
        #: Key routing: the hash that turns an AnyPartition message's key into its
        #: PartitionKey; None keeps round-robin.
        self.key_hash: Callable[[bytes], int] | None = None

    def attach(self, partitions: tuple[PartitionState, ...], /) -> None:
        """More partitions, in partition order (they are only ever added)."""
        self.partitions += tuple(partitions)

    def choose(self, partition_key: int, /) -> int:
        """The index of the partition for a message (``partition_key`` -1: AnyPartition)."""
        partitions = self.partitions
        count = len(partitions)
        if not count:
            raise ValueError("the topic has no partitions yet")
        if partition_key >= 0:
            first = partition_key % count
            if partitions[first].available:
                return first
            for step in range(1, count):
                candidate = (first + step) % count
                if partitions[candidate].ready:
                    return candidate
            return first
        index = self.round_robin
        if index >= 0:
            current = partitions[index]
            if current.batch.count and current.ready:
                return index
        for step in range(1, count + 1):
            candidate = (index + step) % count
            if partitions[candidate].ready:
                self.round_robin = candidate
                return candidate
        self.round_robin = (index + 1) % count
        return self.round_robin


if TYPE_CHECKING:
    from pulsar_bruce.native import TopicState as TopicState
else:
    TopicState = pick("TopicState", PyTopicState)
