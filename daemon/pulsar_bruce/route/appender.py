"""Appending routed messages to their partition's open batch, sans-IO.

Shared by the intake (each new message) and the topic manager (messages that
waited for their topic's partition count).  With key-based batching the open
batch keeps one batch per key (``BatchBuilder.keys``); the limits apply to
their totals, and they are sealed together.  The batches opened and sealed are
written down, once per batch, and the edge takes them (:meth:`Appender.take_batches`)
after a drain: the appender calls nothing back.
"""

from __future__ import annotations

from collections.abc import Callable

from pulsar_bruce.batch.batch_builder import encode_key_field
from pulsar_bruce.model.batch import SealedBatch
from pulsar_bruce.model.confirmation import Confirmation
from pulsar_bruce.model.ledger import ENTRY_OVERHEAD
from pulsar_bruce.parse.datagram import pin_delivery_time
from pulsar_bruce.parse.deliver_at import (
    DELIVER_AFTER_TAG,
    DELIVER_AT_TAG,
    epoch_ms,
    resolve_after,
)
from pulsar_bruce.producer.partition_producer import PartitionProducer
from pulsar_bruce.route.topic import Topic, WaitingMessage

#: The first byte of a delayed message's metadata (``parse/deliver_at.py``): one int
#: comparison per message before the prefix test.
_DELAYED = DELIVER_AT_TAG[0]


class Appender:
    """Puts messages and spooled batches into producers' batches and queues, and writes
    down whose batch opened (its linger timer is due) and whose sealed (to be written)."""

    def __init__(self) -> None:
        #: Producers whose batch opened, and whose batch was sealed, since the last
        #: :meth:`take_batches` (read-only outside: the edge tests them after every slab,
        #: and takes them only when there are some).
        self.batches_opened: list[PartitionProducer] = []
        self.batches_sealed: list[PartitionProducer] = []

    def take_batches(self) -> tuple[list[PartitionProducer], list[PartitionProducer]]:
        """The producers whose batch opened, and those whose batch was sealed, since the last
        call, in order (a producer once per batch)."""
        opened, sealed = self.batches_opened, self.batches_sealed
        self.batches_opened, self.batches_sealed = [], []
        return opened, sealed

    def append(
        self,
        producer: PartitionProducer,
        key_field: bytes,
        timestamp: int,
        data: bytes,
        value_offset: int,
        charge: int,
        confirmation: Confirmation | None,
    ) -> None:
        """Append one message to ``producer``'s open batch, sealing it when full; a delayed
        message (``parse/deliver_at.py``) is never batched: sealed before and after.  The
        limits are the producer's state, which the compiled admitter reads too."""
        batch, limits = producer.batch, producer.state
        delayed = key_field and key_field[0] == _DELAYED and key_field.startswith(DELIVER_AT_TAG)
        if batch.count and (delayed or batch.charged + charge > limits.max_batch_bytes):
            self.seal(producer)
        into = batch  # the batch the message goes into: with key-based batching, its key's
        if batch.keys is not None or (not batch.count and limits.key_based):
            into = batch.key_batch(key_field, charge)  # (the policy counts when a batch opens)
        into.append(key_field, timestamp, data, value_offset, charge)
        if confirmation is not None or into.tags is not None:
            into.tag_last(confirmation)
        if batch.count == 1:
            self.batches_opened.append(producer)
        if (
            delayed
            or batch.count >= limits.max_messages
            or batch.charged >= limits.max_batch_bytes
        ):
            self.seal(producer)

    def seal(self, producer: PartitionProducer) -> None:
        """Seal ``producer``'s open batch (full, or around a delayed message) and write it
        down (the compiled admitter calls this too)."""
        producer.seal()
        self.batches_sealed.append(producer)

    def opened(self, producer: PartitionProducer) -> None:
        """The first message went into ``producer``'s empty batch (the compiled admitter's
        call-out)."""
        self.batches_opened.append(producer)

    def place(
        self,
        topic: Topic,
        key_field: bytes,
        timestamp: int,
        data: bytes,
        value_offset: int,
        partition_key: int,
        charge: int,
        confirmation: Confirmation | None,
    ) -> None:
        """Route an accepted message to its partition's batch (see :func:`prepare`), or keep
        it waiting for the topic's partition count: the one rule for new, replayed and
        waiting messages (the compiled admitter is its fast path)."""
        producers = topic.producers
        if producers:  # Topic.choose, inlined: once per message
            producer = producers[topic.state.choose(partition_key)]
            self.append(producer, key_field, timestamp, data, value_offset, charge, confirmation)
        else:
            if key_field and key_field[0] == _DELAYED:  # kept as it came: keep its time too
                data = pin_delivery_time(data, key_field)
            message = (key_field, timestamp, data, value_offset, partition_key, charge)
            topic.wait(WaitingMessage(*message, confirmation))

    def queue_sealed(self, topic: Topic, partition: int, batch: SealedBatch) -> None:
        """A batch back from the spool goes to its partition (or any, if that is gone)."""
        producers = topic.producers
        producer = producers[partition] if 0 <= partition < len(producers) else topic.choose(-1)
        producer.replay(batch)  # under its ids where it may keep them (``BatchQueue.replay``)
        self.batches_sealed.append(producer)

    def route_waiting(self, topic: Topic) -> None:
        """``topic`` has producers now: queue its spooled batches, route its waiting messages."""
        spooled, waiting = topic.take_waiting()
        for partition, batch in spooled:
            self.queue_sealed(topic, partition, batch)
        for message in waiting:
            self.place(
                topic,
                message.key_field,
                message.timestamp,
                message.data,
                message.value_offset,
                message.partition_key,
                message.charge,
                message.confirmation,
            )


def prepare(
    topic: Topic,
    partition_key: int,
    key: bytes,
    fields: bytes,
    payload_size: int,
    clock_ms: Callable[[], int] = epoch_ms,
) -> tuple[bytes, int, int]:
    """What a parsed message becomes before it is placed: its metadata fields (a Message
    record's delivery time, with "after" made "at" on ``clock_ms``, its properties, then the
    key), its partition key (a key hashed like a Java producer's on a topic with key
    routing) and its memory charge."""
    if fields and fields.startswith(DELIVER_AFTER_TAG):
        fields = resolve_after(fields, clock_ms())
    if key and partition_key < 0 and topic.key_hash is not None:
        partition_key = topic.key_hash(key)
    key_field = fields + encode_key_field(key) if key else fields
    charge = len(key_field) + payload_size + ENTRY_OVERHEAD  # memory_charge, inlined: per message
    return key_field, partition_key, charge
