"""One producer per broker topic, shared between ``t`` and ``t-partition-N``, sans-IO parts.

A topic that borrows another's producer routes into it but neither counts,
spools, discards nor configures its batches: the owner does, exactly once.
A ProducerBusy for our own name is counted on the topic and logged once.
"""

from __future__ import annotations

import logging

import pytest
from pulsar_bruce.model.ledger import Ledger
from pulsar_bruce.producer.partition_producer import BatchPolicy, PartitionProducer
from pulsar_bruce.route.outcomes import Outcomes
from pulsar_bruce.route.topic import Topic
from pulsar_bruce.service.shutdown import spool_records_of
from pulsar_bruce.spool import records

T = "persistent://public/default/t"


def shared_pair() -> tuple[Topic, Topic, PartitionProducer]:
    """``t-partition-1`` addressed first (it owns the producer), then ``t`` with 2 partitions."""
    direct = Topic(f"{T}-partition-1")
    shared = PartitionProducer(f"{T}-partition-1", 0, 1, BatchPolicy())
    direct.attach([shared], partitioned=False)
    parent = Topic(T)
    parent.attach(
        [PartitionProducer(f"{T}-partition-0", 0, 2, BatchPolicy()), shared],
        partitioned=True,
        borrowed=[shared.producer_id],
    )
    return direct, parent, shared


def test_a_borrowed_producer_is_routed_to_but_counted_by_its_owner() -> None:
    direct, parent, shared = shared_pair()
    shared.ready = parent.producers[0].ready = True
    assert parent.choose(1) is shared
    shared.batch.append(b"", 0, b"v", 0, 30)
    assert (direct.buffered_messages, parent.buffered_messages) == (1, 0)
    assert parent.owned_producers() == [parent.producers[0]]
    assert direct.owned_producers() is direct.producers


def test_shutdown_spools_a_shared_producers_batches_once_under_its_owner() -> None:
    direct, parent, shared = shared_pair()
    shared.batch.append(b"", 0, b"v", 0, 30)
    front, count, _charge = spool_records_of([direct, parent])
    assert count == 1 and len(front) == 1
    ((kind, body),) = records.iter_records(front[0])
    assert kind == records.BATCH
    assert records.decode_batch(body).topic == direct.name


def test_a_name_conflict_is_counted_every_time_and_logged_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    outcomes = Outcomes(Ledger())
    topic = Topic(T)
    delivery = outcomes.for_topic(topic)
    with caplog.at_level(logging.ERROR):
        for _ in range(3):
            delivery.producer_name_conflict(f"{T}-partition-0", "edge")
        delivery.producer_name_conflict(f"{T}-partition-1", "edge")
    assert topic.name_conflicts == 4
    messages = [record.getMessage() for record in caplog.records]
    lines = [line for line in messages if "refuses our producer name" in line]
    assert len(lines) == 2  # once per broker topic
    assert "--producer-name-prefix" in lines[0]
