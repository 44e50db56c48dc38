"""The appender, through the intake: messages that wait for their topic's producers, and
the batches they fill (opened, sealed at their limits, round-robin)."""

from __future__ import annotations

from pulsar_bruce.producer.partition_producer import BatchPolicy

from tests.unit.daemon.route.intake_harness import (
    TEN,
    Harness,
    any_msg,
    charge_of,
    keyed_msg,
    split_values,
)

# -- waiting for producers ----------------------------------------------------------------------


def test_messages_wait_unrouted_until_producers_exist() -> None:
    h = Harness()
    h.send(any_msg(value=b"first"))
    h.send(keyed_msg(6, value=b"second"))
    topic = h.topic()
    assert len(topic.unrouted) == 2
    assert h.ledger.buffered_messages == 2
    assert h.events.named("batch_opened") == []
    producers = h.attach(partitions=4)
    assert topic.unrouted == []
    assert topic.partitioned
    assert h.ledger.buffered_messages == 2
    assert producers[2].batch.count == 1  # 6 % 4
    assert sum(p.batch.count for p in producers) == 2


def test_unrouted_messages_are_routed_in_arrival_order() -> None:
    h = Harness()
    for i in range(5):
        h.send(any_msg(value=f"m{i}".encode()))
    (producer,) = h.attach()
    assert producer.batch.count == 5
    sealed = producer.seal()
    assert sealed is not None
    assert split_values(sealed.payload) == [b"m0", b"m1", b"m2", b"m3", b"m4"]


def test_non_partitioned_topic_takes_every_message() -> None:
    h = Harness()
    h.send(any_msg())
    (producer,) = h.attach()
    assert not h.topic().partitioned
    for pkey in (0, 1, 99):
        h.send(keyed_msg(pkey))
    h.send(any_msg())
    assert producer.batch.count == 5


def test_keyed_messages_route_by_key_modulo() -> None:
    h = Harness()
    h.send(any_msg())
    producers = h.attach(partitions=4)
    producers[0].seal()
    for pkey in (1, 5, 2, 3, 7, -1):
        h.send(keyed_msg(pkey))
    assert [p.batch.count for p in producers] == [0, 2, 1, 3]


def test_message_content_reaches_the_batch() -> None:
    h = Harness()
    h.send(any_msg(value=b"payload", key=b"k", ts=1234))
    (producer,) = h.attach()
    sealed = producer.seal()
    assert sealed is not None
    assert split_values(sealed.payload) == [b"payload"]
    assert sealed.buffer_bytes == charge_of(b"payload", b"k")


# -- batching events ----------------------------------------------------------------------------


def test_batch_opened_once_per_batch() -> None:
    h = Harness(policy=BatchPolicy(max_messages=3))
    h.send(any_msg())
    (producer,) = h.attach()
    for _ in range(8):
        h.send(any_msg())
    # 9 messages in batches of 3: three batches opened and sealed.
    assert h.events.named("batch_opened") == [producer] * 3
    assert h.events.named("batch_sealed") == [producer] * 3
    assert len(producer.pending) == 3
    assert producer.batch.count == 0


def test_batch_sealed_at_max_messages() -> None:
    h = Harness(policy=BatchPolicy(max_messages=2))
    h.send(any_msg())
    (producer,) = h.attach()
    assert h.events.named("batch_sealed") == []
    h.send(any_msg())
    assert h.events.named("batch_sealed") == [producer]
    assert [b.count for b in producer.pending] == [2]


def test_batches_are_sealed_at_max_bytes_and_never_exceed_it() -> None:
    # Each message is charged 31 bytes: with max_bytes 70 a batch of 2 (62) is sealed when the
    # third arrives (62 + 31 > 70).
    h = Harness(policy=BatchPolicy(max_bytes=70))
    h.send(any_msg(value=TEN))
    (producer,) = h.attach()
    for _ in range(5):
        h.send(any_msg(value=TEN))
    assert [b.count for b in producer.pending] == [2, 2]
    assert producer.batch.count == 2
    assert all(len(b.payload) <= b.buffer_bytes <= 70 for b in producer.pending)
    assert h.events.named("batch_sealed") == [producer, producer]
    assert h.events.named("batch_opened") == [producer] * 3


def test_batch_sealed_before_a_message_that_would_overflow_it() -> None:
    h = Harness(policy=BatchPolicy(max_bytes=40))  # 31 + 31 > 40: seal first, then append
    h.send(any_msg(value=TEN))
    (producer,) = h.attach()
    h.send(any_msg(value=TEN))
    assert [b.count for b in producer.pending] == [1]
    assert producer.batch.count == 1
    assert h.events.named("batch_opened") == [producer, producer]
    assert h.events.named("batch_sealed") == [producer]


def test_a_message_larger_than_max_bytes_is_a_batch_of_its_own() -> None:
    h = Harness(policy=BatchPolicy(max_bytes=64))
    h.send(any_msg(value=b"small"))
    (producer,) = h.attach()
    h.send(any_msg(value=b"x" * 200))
    assert [b.count for b in producer.pending] == [1, 1]
    assert producer.batch.count == 0


def test_any_partition_spreads_batches_round_robin() -> None:
    h = Harness(policy=BatchPolicy(max_messages=2))
    h.send(any_msg())
    producers = h.attach(partitions=3)
    for _ in range(11):
        h.send(any_msg())
    assert [len(p.pending) for p in producers] == [2, 2, 2]
