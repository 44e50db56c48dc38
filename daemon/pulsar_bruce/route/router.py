"""A topic's producers and routing state, sans-IO.

The partition choice and the per-topic limits the intake reads live in the
topic's :attr:`Topic.state` (``route/topic_state.py``: the rule, and the compiled
intake's copy of it); this class keeps its producers and everything else.
On a topic with key routing (``Topic.key_hash``), an AnyPartition message with
a key becomes a PartitionKey message whose key is the Java client's hash of it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import NamedTuple

from pulsar_bruce.model.batch import SealedBatch
from pulsar_bruce.model.confirmation import Confirmation
from pulsar_bruce.model.ledger import TopicCounters
from pulsar_bruce.producer.partition_producer import PartitionProducer
from pulsar_bruce.route.topic_state import TopicState


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
        "name",
        "name_conflicts",
        "partitioned",
        "producers",
        "sequenced",
        "state",
        "stats",
        "unrouted",
        "unrouted_batches",
    )

    def __init__(self, name: str):
        self.name = name
        #: Empty until the partition count is known; one producer for a non-partitioned
        #: topic.  Only :meth:`attach` adds to it (a plain attribute: the intake reads it
        #: per message).
        self.producers: tuple[PartitionProducer, ...] = ()
        #: What the intake reads: the partitions' states, the round-robin position, the
        #: limits (the compiled intake's own copy, changed only through its members).
        self.state = TopicState()
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

    def attach(self, producers: Iterable[PartitionProducer]) -> None:
        """The next partitions' producers, in partition order (the intake's state too)."""
        added = tuple(producers)
        self.producers += added
        self.state.attach(tuple(producer.state for producer in added))

    # The per-topic limits, set by the edge from the configuration (in the intake's state).

    @property
    def max_message_bytes(self) -> int:
        return self.state.max_message_bytes

    @max_message_bytes.setter
    def max_message_bytes(self, limit: int) -> None:
        self.state.max_message_bytes = limit

    @property
    def rate_budget(self) -> int | None:
        """Messages still allowed in the current rate-limit interval; ``None``: no limit."""
        return self.state.rate_budget

    @rate_budget.setter
    def rate_budget(self, budget: int | None) -> None:
        self.state.rate_budget = budget

    @property
    def key_hash(self) -> Callable[[bytes], int] | None:
        """Key routing: the hash that turns an AnyPartition message's key into its
        PartitionKey; ``None`` (the default) keeps round-robin."""
        return self.state.key_hash

    @key_hash.setter
    def key_hash(self, key_hash: Callable[[bytes], int] | None) -> None:
        self.state.key_hash = key_hash

    @property
    def round_robin(self) -> int:
        """AnyPartition's current partition (-1: none yet)."""
        return self.state.round_robin

    @property
    def buffered_messages(self) -> int:
        """Messages of this topic not yet acked or discarded (for metrics and status)."""
        waiting = len(self.unrouted) + sum(batch.count for _, batch in self.unrouted_batches)
        owned = self.owned_producers()
        return waiting + sum(p.buffered_messages for p in [*owned, *self.sequenced])

    def owned_producers(self) -> Sequence[PartitionProducer]:
        """The producers this topic owns (all of them, unless it shares a broker topic)."""
        if not self.borrowed:
            return self.producers
        return [p for p in self.producers if p.producer_id not in self.borrowed]

    def choose(self, partition_key: int) -> PartitionProducer:
        """The producer for a message: ``partition_key`` -1 for AnyPartition (the rule:
        ``route/topic_state.py``)."""
        return self.producers[self.state.choose(partition_key)]
