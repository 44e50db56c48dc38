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

from pulsar_bruce.batch.batch_builder import batch_entries_of
from pulsar_bruce.model.batch import SealedBatch
from pulsar_bruce.model.confirmation import Confirmation
from pulsar_bruce.model.ledger import TopicCounters
from pulsar_bruce.producer.partition_producer import PartitionProducer
from pulsar_bruce.route.topic_state import TopicState
from pulsar_bruce.spool import records as spool_records


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
    """A topic's producers (one per partition), its routing state and what waits for them.

    Its fields are written by its own methods only (``test_architecture.py`` checks);
    the limits below are views of :attr:`state`, which the intake reads.
    """

    __slots__ = (
        "_borrowed",
        "_name_conflicts",
        "_partitioned",
        "_sequenced",
        "_uncompressed_closed",
        "_waiting",
        "_waiting_batches",
        "name",
        "producers",
        "state",
        "stats",
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
        self._borrowed: set[int] = set()
        self._partitioned = False
        self._waiting: list[WaitingMessage] = []
        self._waiting_batches: list[tuple[int, SealedBatch]] = []
        self.stats = TopicCounters()
        self._sequenced: list[PartitionProducer] = []
        #: Batches sent uncompressed by sender producers since closed (a counter only grows).
        self._uncompressed_closed = 0
        self._name_conflicts = 0

    def attach(
        self,
        producers: Iterable[PartitionProducer],
        *,
        partitioned: bool = False,
        borrowed: Iterable[int] = (),
    ) -> None:
        """The next partitions' producers, in partition order (the intake's state too);
        ``borrowed``: the ids of those another topic owns."""
        added = tuple(producers)
        self.producers += added
        self.state.attach(tuple(producer.state for producer in added))
        self._partitioned = partitioned
        self._borrowed.update(borrowed)

    @property
    def partitioned(self) -> bool:
        """Whether its producers are a partitioned topic's (else one, the topic itself)."""
        return self._partitioned

    # -- what waits for the partition count ------------------------------------------------

    @property
    def unrouted(self) -> list[WaitingMessage]:
        """Messages that arrived before the partition count was known (read only)."""
        return self._waiting

    @property
    def unrouted_batches(self) -> list[tuple[int, SealedBatch]]:
        """Batches back from the spool before the partition count was known: (partition,
        batch) (read only)."""
        return self._waiting_batches

    def wait(self, message: WaitingMessage) -> None:
        """Keep ``message`` until the partition count is known."""
        self._waiting.append(message)

    def wait_sealed(self, partition: int, batch: SealedBatch) -> None:
        """Keep a batch back from the spool until the partition count is known."""
        self._waiting_batches.append((partition, batch))

    def take_waiting(self) -> tuple[list[tuple[int, SealedBatch]], list[WaitingMessage]]:
        """Everything that waited (batches, then messages, each in order); none waits now."""
        batches, self._waiting_batches = self._waiting_batches, []
        messages, self._waiting = self._waiting, []
        return batches, messages

    # -- the producers under stream senders' names ----------------------------------------

    @property
    def sequenced(self) -> tuple[PartitionProducer, ...]:
        """Producers publishing under a stream sender's name and ids (``route/sequenced.py``),
        one per connection and partition; never routed to, never spooled."""
        return tuple(self._sequenced)

    def add_sequenced(self, producer: PartitionProducer) -> None:
        self._sequenced.append(producer)

    def remove_sequenced(self, producer: PartitionProducer) -> None:
        """``producer`` is closed (absent already: nothing to do)."""
        if producer in self._sequenced:
            self._sequenced.remove(producer)
            self._uncompressed_closed += producer.compression_tries.uncompressed

    # -- counters ----------------------------------------------------------------------------

    def batches_uncompressed(self) -> int:
        """Batches framed without compression although the topic has a codec, by the
        producers it owns and by its senders' (closed ones included)."""
        producers = (*self.owned_producers(), *self._sequenced)
        tries = sum(producer.compression_tries.uncompressed for producer in producers)
        return self._uncompressed_closed + tries

    @property
    def name_conflicts(self) -> int:
        """Times a broker refused our producer name on one of this topic's partitions."""
        return self._name_conflicts

    def count_name_conflict(self) -> None:
        self._name_conflicts += 1

    # -- shutdown with a spool ---------------------------------------------------------------

    def spool_records(self) -> tuple[list[bytes], int, int]:
        """Every message this topic buffers, as spool records (oldest first per partition),
        with their count and memory charge; nothing is removed (see :meth:`forget_spooled`)."""
        front: list[bytes] = []
        count = charge = 0
        for partition, batch in self._waiting_batches:
            kept = batch.sequence_id if batch.producer_name else -1
            front.append(
                spool_records.encode_batch(
                    self.name,
                    partition,
                    kept,
                    batch.count,
                    batch.payload,
                    batch.producer_name,
                    stored_before=batch.stored_before,
                )
            )
            count += batch.count
            charge += batch.buffer_bytes
        for producer in self.owned_producers():
            producer.seal()
            for batch in producer.pending:
                if not batch.payload:  # already framed: take the entries out of the frame
                    batch.payload = batch_entries_of(batch)
                sent_as, kept, stored_before = "", -1, batch.stored_before
                if producer.holds_ids(batch):  # the name they belong to: a replay keeps them
                    sent_as = batch.producer_name or producer.name or ""
                    kept = batch.sequence_id
                elif batch.sequence_id >= 0:  # refused: new ids next run, maybe stored before
                    stored_before = batch.may_be_stored
                front.append(
                    spool_records.encode_batch(
                        self.name,
                        producer.partition,
                        kept,
                        batch.count,
                        batch.payload,
                        sent_as,
                        stored_before=stored_before,  # without ids, still a possible duplicate
                    )
                )
                count += batch.count
                charge += batch.buffer_bytes
        for message in self._waiting:
            front.append(spool_records.encode(spool_records.DATAGRAM, message.data))
            count += 1
            charge += message.charge
        return front, count, charge

    def forget_spooled(self) -> None:
        """After :meth:`spool_records` were written: memory holds none of it any more."""
        self.take_waiting()
        for producer in self.producers:
            producer.take_all()

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
        waiting = len(self._waiting) + sum(batch.count for _, batch in self._waiting_batches)
        owned = self.owned_producers()
        return waiting + sum(p.buffered_messages for p in [*owned, *self._sequenced])

    def owned_producers(self) -> Sequence[PartitionProducer]:
        """The producers this topic owns (all of them, unless it shares a broker topic)."""
        if not self._borrowed:
            return self.producers
        return [p for p in self.producers if p.producer_id not in self._borrowed]

    def choose(self, partition_key: int) -> PartitionProducer:
        """The producer for a message: ``partition_key`` -1 for AnyPartition (the rule:
        ``route/topic_state.py``)."""
        return self.producers[self.state.choose(partition_key)]
