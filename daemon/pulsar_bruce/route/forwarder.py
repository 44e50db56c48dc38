"""The per-datagram path and the message accounting, sans-IO.

:meth:`Forwarder.handle_datagram` runs once per datagram: parse, find the
topic, check the buffer limit, pick the partition, append to its open batch.
Everything that needs I/O or a clock (topic metadata, linger timers, writing
sealed batches) is handed to the edge through the :class:`ForwarderEvents`
callbacks, once per topic or once per batch, never per message.

Every message ends in exactly one of :meth:`on_acked` or :meth:`discard_batch`
(or a discard here), which keeps the accounting identity
``received = acked + discarded + buffered`` true between datagrams.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

from pulsar_bruce import reasons
from pulsar_bruce.batch.batch_builder import (
    BatchBuilder,
    SealedBatch,
    batch_entries_of,
    encode_key_field,
)
from pulsar_bruce.metrics.stats import Stats
from pulsar_bruce.parse.datagram import parse_datagram
from pulsar_bruce.parse.topic import normalize_topic
from pulsar_bruce.producer.partition_producer import PartitionProducer
from pulsar_bruce.route.confirmation import Confirmation, settle_tags
from pulsar_bruce.route.router import Topic
from pulsar_bruce.spool import records as spool_records
from pulsar_bruce.spool.records import SpooledBatch

if TYPE_CHECKING:  # the discard log is optional: imported only when configured
    from pulsar_bruce.metrics.discard_log import DiscardLog

_ENTRY_OVERHEAD = BatchBuilder.ENTRY_OVERHEAD

log = logging.getLogger(__name__)

REJECT_SAMPLES = 10
REJECT_SAMPLE_BYTES = 64

#: Bad topic names remembered (so a flood of them costs one dict lookup each), at most.
_BAD_TOPIC_CACHE_LIMIT = 1024


class ForwarderEvents(Protocol):
    """Callbacks into the I/O edge."""

    def topic_added(self, topic: Topic) -> None:
        """A topic seen for the first time: find its partition count, create producers."""

    def batch_opened(self, producer: PartitionProducer) -> None:
        """The first message went into an empty batch: arm its linger timer."""

    def batch_sealed(self, producer: PartitionProducer) -> None:
        """A batch was sealed because it is full: write it out soon."""


class Forwarder:
    """Topics, routing, batching and accounting for every message the daemon accepts."""

    def __init__(
        self,
        stats: Stats,
        events: ForwarderEvents,
        *,
        buffer_max_bytes: int,
        max_message_bytes: int,
    ):
        self.stats = stats
        self.events = events
        self.buffer_max_bytes = buffer_max_bytes
        self.max_message_bytes = max_message_bytes
        #: Keyed by the topic bytes exactly as senders write them.
        self.topics: dict[bytes, Topic] = {}
        #: Keyed by full Pulsar name, so ``t`` and ``persistent://public/default/t`` share one.
        self.topics_by_name: dict[str, Topic] = {}
        self._bad_topics: set[bytes] = set()
        #: With a disk spool: ``spill(datagram) -> bool`` appends it there (False: spool full).
        self.spill: Callable[[bytes], bool] | None = None
        #: True while the spool holds messages: new ones queue behind them, on disk.
        self.spilling = False
        #: Optional evidence of every message given up (``--discard-log``).
        self.discard_log: DiscardLog | None = None
        #: The last few rejected datagrams (reason, first bytes), for ``/status``.
        self.recent_rejects: deque[tuple[str, bytes]] = deque(maxlen=REJECT_SAMPLES)

    # -- the hot path -------------------------------------------------------------

    def handle_datagram(self, data: bytes) -> None:
        stats = self.stats
        stats.received += 1
        if len(data) > self.max_message_bytes:
            self._reject(reasons.TOO_LARGE, data)
            return
        parsed = parse_datagram(data)
        if isinstance(parsed, str):
            self._reject(parsed, data)
            return
        topic_bytes, partition_key, timestamp, key, value_offset = parsed
        topic = self.topics.get(topic_bytes)
        if topic is None:
            topic = self._add_topic(topic_bytes)
            if topic is None:
                self._reject(reasons.BAD_TOPIC, data)
                return
        if len(data) > topic.max_message_bytes:
            self._refuse(topic, reasons.TOO_LARGE, data)
            return
        budget = topic.rate_budget
        if budget is not None:
            if budget <= 0:
                self._refuse(topic, reasons.RATE_LIMITED, data)
                return
            topic.rate_budget = budget - 1
        key_field = encode_key_field(key) if key else b""
        size = len(data) - value_offset + len(key_field) + _ENTRY_OVERHEAD
        if self.spilling or stats.buffered_bytes + size > self.buffer_max_bytes:
            if self.spill is not None and self.spill(data):
                self.spilling = True  # from now on, in order: everything after it goes there too
                stats.buffered_messages += 1
                stats.spooled_messages += 1
                return
            self._refuse(topic, reasons.BUFFER_FULL, data)
            return
        if not topic.producers:
            topic.unrouted.append((key_field, timestamp, data, value_offset, partition_key, None))
            stats.buffered_messages += 1
            stats.buffered_bytes += size
            return
        producer = topic.choose_any() if partition_key < 0 else topic.choose_keyed(partition_key)
        self._append(producer, key_field, timestamp, data, value_offset, size)

    def handle_stream_record(self, data: bytes, confirmation: Confirmation) -> bool:
        """A message record from a stream connection, tracked for its flush.

        Returns False, having counted nothing, when memory cannot take it now:
        the stream edge stops reading that connection and offers it again
        later (backpressure instead of ``buffer_full``; never to the spool).
        """
        stats = self.stats
        if len(data) > self.max_message_bytes:
            return self._reject_record(reasons.TOO_LARGE, data, confirmation)
        parsed = parse_datagram(data)
        if isinstance(parsed, str):
            return self._reject_record(parsed, data, confirmation)
        topic_bytes, partition_key, timestamp, key, value_offset = parsed
        topic = self.topics.get(topic_bytes) or self._add_topic(topic_bytes)
        if topic is None:
            return self._reject_record(reasons.BAD_TOPIC, data, confirmation)
        key_field = encode_key_field(key) if key else b""
        size = len(data) - value_offset + len(key_field) + _ENTRY_OVERHEAD
        if self.spilling or stats.buffered_bytes + size > self.buffer_max_bytes:
            return False
        stats.received += 1
        reason = None
        if len(data) > topic.max_message_bytes:
            reason = reasons.TOO_LARGE
        elif topic.rate_budget is not None:
            if topic.rate_budget <= 0:
                reason = reasons.RATE_LIMITED
            else:
                topic.rate_budget -= 1
        if reason is not None:
            self._refuse(topic, reason, data)
            confirmation.discard(reason)
            return True
        confirmation.outstanding += 1
        if not topic.producers:
            topic.unrouted.append(
                (key_field, timestamp, data, value_offset, partition_key, confirmation)
            )
            stats.buffered_messages += 1
            stats.buffered_bytes += size
            return True
        producer = topic.choose_any() if partition_key < 0 else topic.choose_keyed(partition_key)
        self._append(producer, key_field, timestamp, data, value_offset, size, confirmation)
        return True

    def _reject_record(self, reason: str, data: bytes, confirmation: Confirmation) -> bool:
        self.stats.received += 1
        self._reject(reason, data)
        confirmation.discard(reason)
        return True

    def _append(
        self,
        producer: PartitionProducer,
        key_field: bytes,
        timestamp: int,
        data: bytes,
        value_offset: int,
        size: int,
        tag: Confirmation | None = None,
    ) -> None:
        """Append one message to ``producer``'s open batch, sealing it when full."""
        batch = producer.batch
        if batch.count and len(batch.buffer) + size > producer.max_batch_bytes:
            producer.seal()
            self.events.batch_sealed(producer)
        self.stats.buffered_bytes += batch.append(key_field, timestamp, data, value_offset)
        self.stats.buffered_messages += 1
        if tag is not None or batch.tags is not None:
            batch.tag_last(tag)
        if batch.count == 1:
            self.events.batch_opened(producer)
        if batch.count >= producer.policy.max_messages or (
            len(batch.buffer) >= producer.max_batch_bytes
        ):
            producer.seal()
            self.events.batch_sealed(producer)

    def _reject(self, reason: str, data: bytes) -> None:
        """A datagram that never became a message: count it, keep a sample for ``/status``."""
        self.stats.discard(reason)
        self.recent_rejects.append((reason, data[:REJECT_SAMPLE_BYTES]))
        self._log_datagram(reason, data)

    def _refuse(self, topic: Topic, reason: str, data: bytes) -> None:
        """A valid message for ``topic`` that cannot be taken (too large, rate, buffer)."""
        self.stats.discard(reason)
        topic.stats.discard(reason, 1)
        self._log_datagram(reason, data)

    def _log_datagram(self, reason: str, data: bytes) -> None:
        if self.discard_log is not None:
            try:
                self.discard_log.datagram(reason, data)
            except Exception:  # evidence is best effort; the accounting is not
                log.exception("discard log: cannot write a %s datagram", reason)

    # -- topics -------------------------------------------------------------------------

    def _add_topic(self, topic_bytes: bytes) -> Topic | None:
        if topic_bytes in self._bad_topics:
            return None
        name = normalize_topic(topic_bytes)
        if name is None:
            if len(self._bad_topics) >= _BAD_TOPIC_CACHE_LIMIT:
                self._bad_topics.clear()
            self._bad_topics.add(topic_bytes)
            return None
        topic = self.topics_by_name.get(name)
        if topic is None:
            topic = Topic(name)
            self.topics_by_name[name] = topic
            self.topics[topic_bytes] = topic
            self.events.topic_added(topic)
        else:
            self.topics[topic_bytes] = topic
        return topic

    def add_producers(
        self, topic: Topic, new_producers: list[PartitionProducer], *, partitioned: bool
    ) -> None:
        """The partition count is known (or grew): attach producers, route waiting messages."""
        topic.partitioned = partitioned
        topic.producers.extend(new_producers)
        spooled, topic.unrouted_batches = topic.unrouted_batches, []
        for partition, batch in spooled:
            self._queue_sealed(topic, partition, batch)
        waiting, topic.unrouted = topic.unrouted, []
        stats = self.stats
        for key_field, timestamp, data, value_offset, partition_key, tag in waiting:
            size = BatchBuilder.entry_size(key_field, len(data) - value_offset)
            stats.buffered_messages -= 1
            stats.buffered_bytes -= size
            producer = (
                topic.choose_any() if partition_key < 0 else topic.choose_keyed(partition_key)
            )
            self._append(producer, key_field, timestamp, data, value_offset, size, tag)

    # -- outcomes -------------------------------------------------------------------------

    # -- the spool ----------------------------------------------------------------------------

    def replay_datagram(self, data: bytes, *, previous_run: bool) -> None:
        """A datagram back from the spool.  If it was spooled by this process it is
        already counted as received and buffered; one from a previous run is counted now."""
        stats = self.stats
        if not previous_run:
            stats.received -= 1
            stats.buffered_messages -= 1
            stats.spooled_messages -= 1
        spilling, self.spilling = self.spilling, False
        try:
            self.handle_datagram(data)
        finally:
            self.spilling = spilling

    def replay_batch(self, spooled: SpooledBatch) -> None:
        """A batch a previous run wrote to the spool at shutdown: received (again) now."""
        topic = self._add_topic(spooled.topic.encode())
        stats = self.stats
        stats.received += spooled.count
        if topic is None:
            stats.discard(reasons.BAD_TOPIC, spooled.count)
            return
        batch = SealedBatch(
            count=spooled.count, payload=spooled.entries, buffer_bytes=len(spooled.entries)
        )
        stats.buffered_messages += spooled.count
        stats.buffered_bytes += batch.buffer_bytes
        if spooled.sequence_id >= 0:  # it had been sent: the broker may have it already
            stats.possible_duplicates += spooled.count
        if topic.producers:
            self._queue_sealed(topic, spooled.partition, batch)
        else:
            topic.unrouted_batches.append((spooled.partition, batch))

    def _queue_sealed(self, topic: Topic, partition: int, batch: SealedBatch) -> None:
        producers = topic.producers
        producer = producers[partition] if 0 <= partition < len(producers) else topic.choose_any()
        producer.pending.append(batch)
        self.events.batch_sealed(producer)

    def spool_everything(self, write: Callable[[list[bytes]], bool]) -> int:
        """Shutdown with a spool: hand every buffered message to ``write`` as spool records
        (they stay counted as buffered); returns how many, or 0 if ``write`` had no room."""
        front: list[bytes] = []
        total = 0
        for topic in self.topics_by_name.values():
            for partition, batch in topic.unrouted_batches:
                front.append(
                    spool_records.encode_batch(
                        topic.name, partition, -1, batch.count, batch.payload
                    )
                )
                total += batch.count
            for producer in topic.producers:
                producer.seal()
                for batch in producer.pending:
                    if not batch.payload:  # already framed: take the entries out of the frame
                        batch.payload = batch_entries_of(batch)
                    front.append(
                        spool_records.encode_batch(
                            topic.name,
                            producer.partition,
                            batch.sequence_id,
                            batch.count,
                            batch.payload,
                        )
                    )
                    total += batch.count
            for _key, _timestamp, data, _offset, _partition_key, _tag in topic.unrouted:
                front.append(spool_records.encode(spool_records.DATAGRAM, data))
                total += 1
        if not front or not write(front):
            return 0
        for topic in self.topics_by_name.values():
            topic.unrouted_batches.clear()
            topic.unrouted.clear()
            for producer in topic.producers:
                producer.pending.clear()
                producer.in_flight = 0
        self.stats.spooled_messages += total
        self.stats.buffered_bytes = 0
        return total

    def on_acked(self, topic: Topic, batch: SealedBatch) -> None:
        if batch.tags:
            settle_tags(batch.tags, None)
        stats = self.stats
        stats.acked += batch.count
        stats.buffered_messages -= batch.count
        stats.buffered_bytes -= batch.buffer_bytes
        topic.stats.acked += batch.count

    def discard_batch(self, topic: Topic, batch: SealedBatch, reason: str) -> None:
        stats = self.stats
        stats.discard(reason, batch.count)
        stats.buffered_messages -= batch.count
        stats.buffered_bytes -= batch.buffer_bytes
        topic.stats.discard(reason, batch.count)
        if batch.tags:
            settle_tags(batch.tags, reason)
        if self.discard_log is not None:
            try:
                self.discard_log.batch(reason, topic.name, batch)
            except Exception:  # evidence is best effort; the accounting above is not
                log.exception("discard log: cannot write the batch of %s", topic.name)

    def discard_everything(self, reason: str) -> int:
        """Shutdown: give up every buffered message; returns how many."""
        total = 0
        for topic in self.topics_by_name.values():
            for producer in topic.producers:
                for batch in producer.take_all():
                    self.discard_batch(topic, batch, reason)
                    total += batch.count
            total += self.discard_unrouted(topic, reason)
        self.stats.buffered_bytes = 0
        return total

    def discard_unrouted(self, topic: Topic, reason: str) -> int:
        """Give up the messages waiting for ``topic``'s partition count; returns how many."""
        total = 0
        for _partition, batch in topic.unrouted_batches:
            self.discard_batch(topic, batch, reason)
            total += batch.count
        topic.unrouted_batches.clear()
        stats = self.stats
        for key_field, _timestamp, data, value_offset, _partition_key, tag in topic.unrouted:
            stats.discard(reason)
            stats.buffered_messages -= 1
            stats.buffered_bytes -= BatchBuilder.entry_size(key_field, len(data) - value_offset)
            topic.stats.discard(reason, 1)
            if tag is not None:
                tag.settle(1, reason)
            self._log_datagram(reason, data)
            total += 1
        topic.unrouted.clear()
        return total

    def seal_all(self, on_sealed: Callable[[PartitionProducer], None]) -> None:
        """Seal every open batch (shutdown flush)."""
        for topic in self.topics_by_name.values():
            for producer in topic.producers:
                if producer.seal() is not None:
                    on_sealed(producer)
