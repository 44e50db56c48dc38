"""Messages a stream sender numbered itself: exactly once across retries, sans-IO.

A stream connection that begins with a Producer record
(``parse/producer_record.py``) publishes the message records after it under
that record's producer name; on each partition, the n-th of them gets the id
``first id + n``.  A retried task that sends the same records in the same
order repeats every choice made here, so each message goes to the same
partition under the same id, and broker deduplication drops the copies an
earlier attempt stored (see ``producer/exactly_once.py``).

So every choice must depend on the records alone:

- the partition is the PartitionKey (or the key's hash, on a topic with key
  routing) modulo the partition count, else the message's position among the
  connection's records modulo the partition count; never the failover to
  another partition that the daemon's own producers use;
- each (topic, partition) gets a producer of its own for this connection
  (``TopicManager.open_sequenced``), closed on the broker once the connection
  is gone and its batches are settled, so the next attempt can take the name.

The checks at the door are the intake's (``model/admission.py``, with the
``NUMBERED`` sender's policy), except that a topic's rate limit is backpressure
here, never a refusal: whether a record finds the
budget spent depends on timing, and a refused record takes no id, so the ids
of the records after it would differ from one attempt to the next.  Memory is
the stream's backpressure as for any record.  Messages wait (backpressure) until
their topic's partition count is known.
"""

from __future__ import annotations

from typing import Protocol

from pulsar_bruce import reasons
from pulsar_bruce.model.admission import ACCEPT, NUMBERED, WAIT, admission
from pulsar_bruce.model.confirmation import Confirmation
from pulsar_bruce.parse.datagram import parse_datagram
from pulsar_bruce.parse.producer_record import API_KEY_PRODUCER
from pulsar_bruce.producer.partition_producer import PartitionProducer
from pulsar_bruce.route.appender import prepare
from pulsar_bruce.route.intake import Intake, admit_each
from pulsar_bruce.route.topic import Topic

_PRODUCER_KEY = API_KEY_PRODUCER.to_bytes(2, "big")


class SequencedProducers(Protocol):
    """The edge that starts and closes the producers (the topic manager)."""

    def open_sequenced(
        self, topic: Topic, partition: int, name: str, first_sequence_id: int
    ) -> PartitionProducer: ...

    def retire_sequenced(self, producers: list[PartitionProducer]) -> None: ...


class SequencedSender:
    """One stream connection's messages, under its Producer record's name and ids."""

    def __init__(
        self, intake: Intake, producers: SequencedProducers, name: str, first_sequence_id: int
    ):
        self.intake = intake
        self.producers = producers
        self.name = name
        self.first_sequence_id = first_sequence_id
        #: Message records taken so far (admitted or discarded): the round-robin position.
        self.position = 0
        self._by_partition: dict[tuple[str, int], PartitionProducer] = {}

    def admit_records(
        self, records: list[bytes], start: int, tag: Confirmation | None, stop_api_key: int, /
    ) -> int:
        """Admit ``records[start:]`` in order, until a record whose ApiKey is
        ``stop_api_key`` or a Producer record (the stream edge acts on those) or one
        that must wait; returns its index, or ``len(records)`` (see ``admit_each``)."""
        return admit_each(self.admit, records, start, tag, stop_api_key)

    def admit(self, data: bytes, tag: Confirmation | None = None, /) -> bool:
        """Take one message record; False (nothing counted) when it must wait: no memory,
        its topic's partition count is not known yet or its rate budget is spent, or it is a
        Producer record."""
        if data[4:6] == _PRODUCER_KEY:
            return False  # not a message: the stream edge switches to its name
        intake = self.intake
        if len(data) > intake.max_message_bytes:
            return self._refused(reasons.TOO_LARGE, data, tag, None)
        parsed = parse_datagram(data)
        if isinstance(parsed, str):
            return self._refused(parsed, data, tag, None)
        topic_bytes, partition_key, timestamp, key, value_offset, fields = parsed
        registry = intake.registry
        topic = registry.by_bytes.get(topic_bytes) or registry.add(topic_bytes)
        if topic is None:
            return self._refused(reasons.BAD_TOPIC, data, tag, None)
        key_field, partition_key, charge = prepare(
            topic, partition_key, key, fields, len(data) - value_offset, intake.clock_ms
        )
        policy, ledger = intake.policy, intake.ledger
        verdict = admission(
            topic.state, len(data), charge, policy.room(), policy.buffer_max_bytes, NUMBERED
        )
        if verdict == WAIT:
            return False  # backpressure: memory, the partition count, the rate budget
        if verdict != ACCEPT:
            return self._refused(verdict, data, tag, topic)
        budget = topic.rate_budget
        producer = self._producer(topic, self._partition(topic, partition_key))
        ledger.accept(charge)
        if tag is not None:
            tag.outstanding += 1
        intake.appender.append(producer, key_field, timestamp, data, value_offset, charge, tag)
        if budget is not None:
            topic.rate_budget = budget - 1
        self.position += 1
        return True

    def refuse_record(
        self, reason: str, head: bytes, size: int, tag: Confirmation | None, /
    ) -> None:
        """A record refused as it arrived (too large to take): it still takes its place
        in the round-robin, as any refused record does."""
        self.position += 1
        self.intake.refuse_record(reason, head, size, tag)

    def end(self) -> None:
        """The connection is gone (or switched to another name): what it sent is still
        delivered; then its producers are closed on the broker."""
        producers = list(self._by_partition.values())
        self._by_partition.clear()
        self.producers.retire_sequenced(producers)

    def _partition(self, topic: Topic, partition_key: int) -> int:
        if not topic.partitioned:
            return 0
        count = len(topic.producers)
        if partition_key >= 0:
            return (partition_key & 0xFFFFFFFF) % count
        return self.position % count

    def _producer(self, topic: Topic, partition: int) -> PartitionProducer:
        producer = self._by_partition.get((topic.name, partition))
        if producer is None:
            producer = self.producers.open_sequenced(
                topic, partition, self.name, self.first_sequence_id
            )
            self._by_partition[(topic.name, partition)] = producer
        return producer

    def _refused(
        self, reason: str, data: bytes, tag: Confirmation | None, topic: Topic | None
    ) -> bool:
        self.position += 1
        return self.intake.refuse_message(reason, data, tag, topic)
