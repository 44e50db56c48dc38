"""Partition choice: PartitionKey modulo with failover, AnyPartition round-robin per batch."""

from __future__ import annotations

from pulsar_bruce.producer.partition_producer import BatchPolicy, PartitionProducer
from pulsar_bruce.route.topic import Topic

NAME = "persistent://public/default/t"


def make_topic(partitions: int, ready: bool = True, available: bool = True) -> Topic:
    topic = Topic(NAME)
    for index in range(partitions):
        producer = PartitionProducer(f"{NAME}-partition-{index}", index, index + 1, BatchPolicy())
        producer.ready = ready
        producer.available = available
        topic.attach([producer], partitioned=partitions > 1)
    return topic


def down(producer: PartitionProducer) -> None:
    """Its connection or lookup failed (or it stayed away past the grace): unavailable."""
    producer.ready = producer.available = False


def back(producer: PartitionProducer) -> None:
    producer.ready = producer.available = True


def index_of(topic: Topic, producer: PartitionProducer) -> int:
    return topic.producers.index(producer)


def fill_and_seal(producer: PartitionProducer) -> None:
    """One message into the chosen producer's batch, then seal it (a batch boundary)."""
    producer.batch.append(b"", 0, b"value", 0, 64)
    producer.seal()


def any_choices(topic: Topic, batches: int) -> list[int]:
    chosen = []
    for _ in range(batches):
        producer = topic.choose(-1)
        chosen.append(index_of(topic, producer))
        fill_and_seal(producer)
    return chosen


# -- PartitionKey ---------------------------------------------------------------------------


def test_partition_key_modulo_partition_count() -> None:
    topic = make_topic(4)
    for key in (0, 1, 2, 3, 4, 5, 7, 13, 4294967295):
        assert index_of(topic, topic.choose(key)) == key % 4


def test_partition_key_uint32_max_goes_to_last_partition_of_four() -> None:
    topic = make_topic(4)
    assert index_of(topic, topic.choose(0xFFFFFFFF)) == 3


def test_partition_key_fails_over_to_the_next_ready_partition() -> None:
    topic = make_topic(4)
    down(topic.producers[1])
    assert index_of(topic, topic.choose(1)) == 2


def test_partition_key_failover_skips_several_not_ready() -> None:
    topic = make_topic(4)
    down(topic.producers[1])
    topic.producers[2].ready = False  # being re-created: not a failover target
    assert index_of(topic, topic.choose(5)) == 3


def test_partition_key_failover_wraps_around() -> None:
    topic = make_topic(4)
    down(topic.producers[3])
    assert index_of(topic, topic.choose(3)) == 0
    down(topic.producers[0])
    assert index_of(topic, topic.choose(3)) == 1


def test_partition_key_goes_back_to_first_choice_when_ready_again() -> None:
    topic = make_topic(4)
    down(topic.producers[2])
    assert index_of(topic, topic.choose(6)) == 3
    back(topic.producers[2])
    assert index_of(topic, topic.choose(6)) == 2


def test_partition_key_waits_for_a_partition_being_created_or_recreated() -> None:
    """Not ready but available (its producer is being created, or re-created after an
    unload): its messages wait for it, even while other partitions are ready."""
    topic = make_topic(4)
    topic.producers[1].ready = False
    assert index_of(topic, topic.choose(5)) == 1
    fresh = make_topic(8, ready=False)
    back(fresh.producers[0])
    assert [index_of(fresh, fresh.choose(key)) for key in range(16)] == [
        key % 8 for key in range(16)
    ]


def test_partition_key_with_none_ready_stays_on_first_choice() -> None:
    for available in (True, False):
        topic = make_topic(4, ready=False, available=available)
        for key in range(8):
            assert index_of(topic, topic.choose(key)) == key % 4


def test_partition_key_only_the_one_ready_partition_takes_everything() -> None:
    topic = make_topic(4, ready=False, available=False)
    back(topic.producers[2])
    assert {index_of(topic, topic.choose(key)) for key in range(20)} == {2}


# -- AnyPartition --------------------------------------------------------------------------------


def test_any_partition_stays_on_one_partition_within_a_batch() -> None:
    topic = make_topic(4)
    first = topic.choose(-1)
    first.batch.append(b"", 0, b"v", 0, 64)
    for _ in range(10):
        assert topic.choose(-1) is first
        first.batch.append(b"", 0, b"v", 0, 64)


def test_any_partition_switches_once_per_batch() -> None:
    topic = make_topic(4)
    assert any_choices(topic, 9) == [0, 1, 2, 3, 0, 1, 2, 3, 0]


def test_any_partition_choice_is_always_ready_when_one_is() -> None:
    topic = make_topic(4)
    topic.producers[0].ready = False
    for _ in range(8):  # nothing appended between calls
        assert topic.choose(-1).ready


def test_any_partition_skips_not_ready_partitions() -> None:
    topic = make_topic(4)
    topic.producers[1].ready = False
    topic.producers[2].ready = False
    assert any_choices(topic, 5) == [0, 3, 0, 3, 0]


def test_any_partition_leaves_a_partition_that_stopped_being_ready() -> None:
    topic = make_topic(4)
    current = topic.choose(-1)
    current.batch.append(b"", 0, b"v", 0, 64)  # open batch on partition 0
    current.ready = False
    following = topic.choose(-1)
    assert following is not current
    assert following.ready


def test_any_partition_uses_a_partition_again_once_ready() -> None:
    topic = make_topic(3)
    topic.producers[1].ready = False
    assert any_choices(topic, 3) == [0, 2, 0]
    topic.producers[1].ready = True
    assert any_choices(topic, 3) == [1, 2, 0]


def test_any_partition_with_none_ready_still_returns_a_producer() -> None:
    topic = make_topic(4, ready=False)
    chosen = {index_of(topic, topic.choose(-1)) for _ in range(8)}
    assert chosen <= {0, 1, 2, 3}
    assert chosen


# -- non-partitioned -----------------------------------------------------------------------------


def test_non_partitioned_takes_every_keyed_message() -> None:
    topic = make_topic(1)
    only = topic.producers[0]
    for key in (0, 1, 7, 4294967295):
        assert topic.choose(key) is only


def test_non_partitioned_takes_every_any_partition_message() -> None:
    topic = make_topic(1)
    only = topic.producers[0]
    for _ in range(5):
        producer = topic.choose(-1)
        assert producer is only
        fill_and_seal(producer)


def test_non_partitioned_not_ready_still_takes_everything() -> None:
    topic = make_topic(1, ready=False)
    only = topic.producers[0]
    assert topic.choose(3) is only
    assert topic.choose(-1) is only


def test_batches_sent_uncompressed_count_once_and_never_go_down() -> None:
    """The metric's count: the topic's own producers and its senders' (a shared producer
    counts for its owner only), and a sender's producer closed keeps its batches counted."""
    topic = make_topic(2)
    other = Topic(NAME + "-partition-0")  # addresses the same broker topic: borrows it
    other.attach([topic.producers[0]], borrowed=[topic.producers[0].producer_id])
    sender = PartitionProducer(NAME + "-partition-1", 1, 9, BatchPolicy())
    topic.add_sequenced(sender)
    for producer, batches in ((topic.producers[0], 1), (topic.producers[1], 2), (sender, 4)):
        producer.compression_tries.uncompressed = batches
    assert topic.batches_uncompressed() == 7
    assert other.batches_uncompressed() == 0
    topic.remove_sequenced(sender)
    topic.remove_sequenced(sender)  # closed twice: counted once
    assert topic.batches_uncompressed() == 7
