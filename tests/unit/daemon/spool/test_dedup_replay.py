"""Spool replay keeps a sent batch's producer name and sequence ids (sans-IO parts).

Broker deduplication (pulsar-broker ``MessageDeduplication.isDuplicate``; the fake
broker's model is ``tests/support/fake_dedup.py``) judges a batch by its
``sequence_id`` against the highest id seen for the name the producer registered
with: at most the highest persisted, it is dropped (a receipt for message id
-1:-1); at most the highest pushed but not persisted yet, it fails with
``PersistenceError``.  So a replayed batch may keep its ids only under the same
name and only ahead of every id the producer has used since; and it must be sent
before any batch numbered after it, or the broker would drop it (or a later one).
"""

from __future__ import annotations

from pulsar_bruce.batch.batch_builder import BatchBuilder, split_batch
from pulsar_bruce.frame.codec import FrameDecoder
from pulsar_bruce.model.batch import SealedBatch
from pulsar_bruce.producer.batch_queue import BatchQueue
from pulsar_bruce.producer.partition_producer import BatchPolicy, PartitionProducer
from pulsar_bruce.route.appender import Appender
from pulsar_bruce.route.topic import Topic
from pulsar_bruce.spool import records

T = "persistent://public/default/t"


def entries(count: int, tag: bytes = b"m") -> bytes:
    builder = BatchBuilder()
    for i in range(count):
        builder.append(b"", 0, tag + b"%d" % i, 0, 30)
    return builder.seal().payload


def spooled(sequence_id: int, count: int = 2, name: str = "edge") -> SealedBatch:
    batch = SealedBatch(count=count, payload=entries(count), buffer_bytes=30 * count)
    batch.sequence_id, batch.producer_name = sequence_id, name
    return batch


def topic_with_producer(name: str | None = "edge", ours: bool = True) -> Topic:
    topic = Topic(T)
    producer = PartitionProducer(T, 0, 7, BatchPolicy())
    producer.name, producer.name_is_ours = name, ours
    topic.attach([producer])
    return topic


def sent_ids(producer: PartitionProducer, last_sequence_id: int) -> list[tuple[int, int]]:
    """Register (the broker says ``last_sequence_id``) and send: (sequence_id, highest) each."""
    producer.on_registered(producer.name or "broker-named", last_sequence_id)
    out = producer.frames_to_send(1)
    ids = []
    for frame in out.frames:
        send = FrameDecoder().feed(frame)[0].command.send
        ids.append((send.sequence_id, send.highest_sequence_id))
    return ids


# -- the spool record -------------------------------------------------------------------------


def test_a_sent_batch_is_spooled_with_its_producer_name() -> None:
    record = records.encode_batch(T, 2, 41, 3, b"ENTRIES", "edge-7")
    ((kind, body),) = records.iter_records(record)
    assert kind == records.PRODUCED_BATCH
    assert records.decode_batch(body, kind) == records.SpooledBatch(
        T, 2, 41, 3, b"ENTRIES", "edge-7"
    )


def test_an_unsent_batch_and_older_spool_files_use_the_plain_batch_record() -> None:
    ((kind, body),) = records.iter_records(records.encode_batch(T, 0, -1, 3, b"E"))
    assert kind == records.BATCH
    assert records.decode_batch(body) == records.SpooledBatch(T, 0, -1, 3, b"E", "")


# -- queueing a replayed batch ------------------------------------------------------------------


def test_replayed_batches_keep_their_ids_in_order_and_new_ones_follow() -> None:
    topic = topic_with_producer()
    (producer,) = topic.producers
    producer.batch.append(b"", 0, b"new", 0, 30)
    producer.seal()  # a new batch, not numbered yet, already waiting
    appender = Appender()
    appender.queue_sealed(topic, 0, spooled(10))
    appender.queue_sealed(topic, 0, spooled(12, count=3))
    # The broker had stored up to 11: the first replay is its duplicate, the second is new.
    assert sent_ids(producer, 11) == [(10, 11), (12, 14), (15, 15)]


def test_a_replay_under_another_name_is_numbered_afresh() -> None:
    topic = topic_with_producer(name="edge-2")
    Appender().queue_sealed(topic, 0, spooled(10))
    (producer,) = topic.producers
    assert producer.pending[0].sequence_id == -1
    assert sent_ids(producer, -1) == [(0, 1)]


def test_a_replay_is_numbered_afresh_when_the_broker_names_the_producer() -> None:
    topic = topic_with_producer(name=None, ours=False)
    Appender().queue_sealed(topic, 0, spooled(10))
    assert topic.producers[0].pending[0].sequence_id == -1


def test_a_replay_behind_ids_already_used_is_numbered_afresh() -> None:
    topic = topic_with_producer()
    (producer,) = topic.producers
    for i in range(20):
        producer.batch.append(b"", 0, b"sent%d" % i, 0, 30)
    producer.seal()
    assert sent_ids(producer, -1) == [(0, 19)]  # this run has sent 0..19 already
    assert producer.on_receipt(0)[0].name == "ACKED"
    Appender().queue_sealed(topic, 0, spooled(10))
    assert sent_ids(producer, 19) == [(20, 21)]


def test_a_replay_after_registration_keeps_ids_the_broker_already_has() -> None:
    """The producer registered before the spool was read: the broker's last_sequence_id (15)
    moved our next id past the replay's, but this run took none of them; the replay keeps
    its ids, so the broker recognises the copy it stored (no second copy)."""
    topic = topic_with_producer()
    (producer,) = topic.producers
    producer.on_registered("edge", 15)
    producer.batch.append(b"", 0, b"new", 0, 30)
    producer.seal()
    assert sent_ids(producer, 15) == [(16, 16)]  # this run's first batch
    Appender().queue_sealed(topic, 0, spooled(10))  # stored by the last run
    Appender().queue_sealed(topic, 0, spooled(16))  # reaches into this run's ids
    assert [b.sequence_id for b in producer.pending] == [16, 10, -1]


def test_a_replayed_batch_goes_after_batches_already_numbered() -> None:
    topic = topic_with_producer()
    (producer,) = topic.producers
    producer.batch.append(b"", 0, b"sent", 0, 30)
    producer.seal()
    assert sent_ids(producer, 4) == [(5, 5)]  # in flight, unconfirmed
    producer.on_disconnected()
    Appender().queue_sealed(topic, 0, spooled(6))
    assert [b.sequence_id for b in producer.pending] == [5, 6]


def test_a_split_replay_keeps_each_message_its_id() -> None:
    whole = spooled(10, count=5)
    assert split_batch(whole)[0].sequence_id == -1  # the queue hands the parts their ids
    queue = BatchQueue()
    queue.replay(whole, "edge", name_is_ours=True)
    queue.split(0)
    first, rest = queue.pending
    assert (first.sequence_id, first.highest_sequence_id) == (10, 11)
    assert (rest.sequence_id, rest.highest_sequence_id) == (12, 14)
    assert first.producer_name == rest.producer_name == "edge"
