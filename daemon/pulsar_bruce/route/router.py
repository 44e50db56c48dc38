"""Partition choice for one topic, sans-IO.

AnyPartition: round-robin over the available partitions, switching once per
batch (the current partition is kept until its open batch has been sealed).
PartitionKey: ``key % N`` while that partition is available (ready, or still
being created or re-created: see ``PartitionProducer.available``); once it is
unavailable, the next ready one (``+1, +2, ...`` wrapping); the first choice
again as soon as it is available.  When no partition is ready, messages wait on
the first choice.
On a topic with key routing (``Topic.key_hash``), an AnyPartition message with
a key becomes a PartitionKey message whose key is the Java client's hash of it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

from pulsar_bruce.model.batch import SealedBatch
from pulsar_bruce.model.confirmation import Confirmation
from pulsar_bruce.model.ledger import TopicCounters
from pulsar_bruce.producer.partition_producer import PartitionProducer


class WaitingMessage(NamedTuple):
    """A message accepted before its topic's partition count was known."""

    key_field: bytes
    timestamp: int
    data: bytes
    value_offset: int
    #: The PartitionKey (or the hash of the key, with key routing), or -1 for AnyPartition.
    partition_key: int
    charge: int
    confirmation: Confirmation | None


class Topic:
    """A topic's producers (one per partition) and its routing state."""

    __slots__ = (
        "borrowed",
        "key_hash",
        "max_message_bytes",
        "name",
        "name_conflicts",
        "partitioned",
        "producers",
        "rate_budget",
        "round_robin",
        "sequenced",
        "stats",
        "unrouted",
        "unrouted_batches",
    )

    def __init__(self, name: str):
        self.name = name
        #: Empty until the partition count is known; one producer for a non-partitioned topic.
        self.producers: list[PartitionProducer] = []
        #: Ids of producers in ``producers`` that another topic owns: one broker topic has one
        #: producer, shared when ``t`` and ``t-partition-0`` are both addressed.  Their batches
        #: are counted, spooled and configured by the owner.
        self.borrowed: set[int] = set()
        self.partitioned = False
        #: Messages that arrived before the partition count was known.
        self.unrouted: list[WaitingMessage] = []
        #: Batches back from the spool before the partition count was known: (partition, batch).
        self.unrouted_batches: list[tuple[int, SealedBatch]] = []
        self.stats = TopicCounters()
        #: Producers publishing under a stream sender's name and ids (``route/sequenced.py``),
        #: one per connection and partition; never routed to, never spooled.
        self.sequenced: list[PartitionProducer] = []
        #: Times a broker refused our producer name on one of this topic's partitions.
        self.name_conflicts = 0
        #: Per-topic limits, set by the edge from the configuration.
        self.max_message_bytes = 1 << 62
        #: Messages still allowed in the current rate-limit interval; ``None``: no limit.
        self.rate_budget: int | None = None
        #: Key routing: the hash that turns an AnyPartition message's key into its
        #: PartitionKey; ``None`` (the default) keeps round-robin.
        self.key_hash: Callable[[bytes], int] | None = None
        #: AnyPartition's current partition (-1: none yet); the compiled admitter reads and
        #: sets it too (``native/contract.py``).
        self.round_robin = -1

    @property
    def buffered_messages(self) -> int:
        """Messages of this topic not yet acked or discarded (for metrics and status)."""
        waiting = len(self.unrouted) + sum(batch.count for _, batch in self.unrouted_batches)
        owned = self.owned_producers()
        return waiting + sum(p.buffered_messages for p in [*owned, *self.sequenced])

    def owned_producers(self) -> list[PartitionProducer]:
        """The producers this topic owns (all of them, unless it shares a broker topic)."""
        if not self.borrowed:
            return self.producers
        return [p for p in self.producers if p.producer_id not in self.borrowed]

    def choose(self, partition_key: int) -> PartitionProducer:
        """The producer for a message: :meth:`choose_any` for AnyPartition (``-1``), else
        :meth:`choose_keyed`."""
        return self.choose_any() if partition_key < 0 else self.choose_keyed(partition_key)

    def choose_any(self) -> PartitionProducer:
        """AnyPartition: stay on the current partition until its batch is sealed."""
        producers = self.producers
        index = self.round_robin
        if index >= 0:
            current = producers[index]
            if current.batch.count and current.ready:
                return current
        count = len(producers)
        for step in range(1, count + 1):
            candidate = (index + step) % count
            if producers[candidate].ready:
                self.round_robin = candidate
                return producers[candidate]
        self.round_robin = (index + 1) % count
        return producers[self.round_robin]

    def choose_keyed(self, partition_key: int) -> PartitionProducer:
        """PartitionKey: ``key % N`` with failover from an unavailable partition to the next
        ready one (Bruce fails over from a partition that is unavailable, not from one whose
        producer is still being created)."""
        producers = self.producers
        count = len(producers)
        first = partition_key % count
        producer = producers[first]
        if producer.available:
            return producer
        for step in range(1, count):
            candidate = producers[(first + step) % count]
            if candidate.ready:
                return candidate
        return producer
