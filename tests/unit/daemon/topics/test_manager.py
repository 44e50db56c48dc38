"""TopicManager with the real intake and a fake pool: partition discovery, growth, lookup
failures, metadata refresh, and one flush per dirty driver after a drain.

The fake pool answers partition counts only when a test gives it one, and never answers a
producer's lookup, so drivers start but never connect: what is checked is the manager's
own work (producers, drivers, routing, accounting).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import pytest
from pulsar_bruce import reasons
from pulsar_bruce.config import Config
from pulsar_bruce.connection.pool import TopicLookupError
from pulsar_bruce.frame import pulsar_api_pb2 as pb
from pulsar_bruce.model.ledger import Ledger
from pulsar_bruce.parse.topic import partition_name
from pulsar_bruce.producer.delivery import DeliveryPolicy
from pulsar_bruce.producer.driver import ProducerDriver
from pulsar_bruce.route.appender import Appender
from pulsar_bruce.route.intake import Intake
from pulsar_bruce.route.outcomes import Outcomes
from pulsar_bruce.route.registry import TopicRegistry
from pulsar_bruce.route.topic import Topic
from pulsar_bruce.route.topic_settings import TopicConfigurator
from pulsar_bruce.spool.policy import SpoolPolicy
from pulsar_bruce.topics.manager import TopicManager
from to_pulsar.encoding import encode_any_partition, encode_partition_key

from tests.support.fakes_asyncio import FakePool, until

T = "persistent://public/default/t"


class Rig:
    """The manager and the intake wired as the server wires them."""

    def __init__(self, config: Config | None = None, *, metadata_refresh_s: float = 0.0):
        config = config or Config()
        self.pool = FakePool(lookups_hang=True)
        self.ledger = Ledger()
        settings = TopicConfigurator(config)
        self.manager = TopicManager(
            self.pool,
            Outcomes(self.ledger),
            settings,
            DeliveryPolicy(),
            TopicRegistry(settings),
            Appender(),
            metadata_refresh_s=metadata_refresh_s,
        )
        self.intake = Intake(
            self.manager.registry,
            self.manager.appender,
            self.ledger,
            SpoolPolicy(self.ledger, 1 << 20),
            self.manager.outcomes,
            max_message_bytes=1 << 20,
        )

    def send(self, *datagrams: bytes) -> None:
        """A drain: the datagrams admitted, then what they did taken (``Pipeline.after_drain``)."""
        for datagram in datagrams:
            assert self.intake.admit(datagram)
        self.manager.flush_dirty()
        assert self.ledger.identity_holds()

    def topic(self, name: str = T) -> Topic:
        return self.manager.registry.by_name[name]

    async def partitions(self, *answers: int | BaseException) -> None:
        """Answer the next partition-count requests, one by one; each answer is taken (and
        the asker has run on to its next wait) when this returns."""
        for answer in answers:
            self.pool.partition_answers.put_nowait(answer)
            await until(lambda: self.pool.partition_answers.empty(), "the answer to be taken")


def run(test: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(test())


def counts(topic: Topic) -> list[int]:
    """Messages in each partition's open batch and pending queue."""
    return [producer.buffered_messages for producer in topic.producers]


def test_messages_wait_for_the_partition_count_then_go_to_new_producers() -> None:
    async def test() -> None:
        rig = Rig()
        rig.send(encode_any_partition("t", b"a1"), encode_partition_key(4, "t", b"k4"))
        topic = rig.topic()
        assert len(topic.unrouted) == 2
        await rig.partitions(3)
        await until(lambda: topic.producers, "the producers")
        assert [p.topic for p in topic.producers] == [partition_name(T, i) for i in range(3)]
        assert [p.partition for p in topic.producers] == [0, 1, 2]
        assert topic.partitioned
        assert topic.unrouted == []
        assert sum(counts(topic)) == 2
        assert topic.producers[4 % 3].buffered_messages >= 1  # the keyed one: key % N
        drivers = rig.manager.drivers
        assert sorted(drivers) == sorted(p.producer_id for p in topic.producers)
        assert all(drivers[p.producer_id].producer is p for p in topic.producers)
        # Every driver was started: each looks its partition up.
        await until(lambda: len(rig.pool.lookups) == 3, "the lookups")
        assert sorted(rig.pool.lookups) == [p.topic for p in topic.producers]
        rig.send(encode_any_partition("t", b"a2"))  # routed at once now
        assert topic.unrouted == []
        assert sum(counts(topic)) == 3
        assert rig.ledger.identity_holds()
        await rig.manager.stop()

    run(test)


def test_a_non_partitioned_topic_gets_one_producer_under_its_own_name() -> None:
    async def test() -> None:
        rig = Rig()
        rig.send(encode_any_partition("t", b"a1"))
        await rig.partitions(0)
        topic = rig.topic()
        await until(lambda: topic.producers, "the producer")
        assert [p.topic for p in topic.producers] == [T]
        assert not topic.partitioned
        assert counts(topic) == [1]
        await rig.manager.stop()

    run(test)


def test_a_partition_name_is_addressed_directly_without_asking_the_broker() -> None:
    async def test() -> None:
        rig = Rig()
        rig.send(encode_any_partition("t-partition-1", b"a1"))
        topic = rig.topic(partition_name(T, 1))
        await until(lambda: topic.producers, "the producer")
        assert rig.pool.partition_requests == []
        assert [p.topic for p in topic.producers] == [partition_name(T, 1)]
        await rig.manager.stop()

    run(test)


def test_a_permanent_lookup_error_discards_what_waits_and_the_lookup_is_retried() -> None:
    async def test() -> None:
        rig = Rig()
        rig.send(encode_any_partition("t", b"a1"), encode_any_partition("t", b"a2"))
        topic = rig.topic()
        await rig.partitions(TopicLookupError("no such topic", pb.TopicNotFound))
        assert rig.ledger.discarded[reasons.BROKER_REJECTED] == 2
        assert topic.stats.discarded == {reasons.BROKER_REJECTED: 2}
        assert topic.unrouted == []
        rig.send(encode_any_partition("t", b"a3"))  # arrives while the retry waits
        await rig.partitions(2)  # the topic exists now
        await until(lambda: topic.producers, "the producers")
        assert sum(counts(topic)) == 1
        assert rig.ledger.discarded[reasons.BROKER_REJECTED] == 2
        assert rig.ledger.buffered_messages == 1
        assert rig.ledger.identity_holds()
        await rig.manager.stop()

    run(test)


def test_a_retriable_lookup_error_keeps_what_waits() -> None:
    async def test() -> None:
        rig = Rig()
        rig.send(encode_any_partition("t", b"a1"))
        topic = rig.topic()
        await rig.partitions(TopicLookupError("timed out"), OSError("unreachable"))
        assert len(topic.unrouted) == 1
        assert rig.ledger.discarded_total == 0
        await rig.partitions(1)
        await until(lambda: topic.producers, "the producer")
        assert counts(topic) == [1]
        await rig.manager.stop()

    run(test)


def test_the_metadata_refresh_adds_producers_when_a_topic_grows() -> None:
    async def test() -> None:
        rig = Rig(metadata_refresh_s=0.01)
        rig.manager.start()
        rig.send(encode_any_partition("t", b"a1"))
        topic = rig.topic()
        await rig.partitions(2)
        await until(lambda: len(topic.producers) == 2, "two producers")
        first = tuple(topic.producers)
        await rig.partitions(2)  # a refresh: the same count changes nothing
        assert topic.producers == first
        await rig.partitions(4)
        await until(lambda: len(topic.producers) == 4, "four producers")
        assert topic.producers[:2] == first  # the old ones are kept, with what they hold
        assert [p.partition for p in topic.producers] == [0, 1, 2, 3]
        assert len(rig.manager.drivers) == 4
        await rig.partitions(TopicLookupError("timed out"))  # a failed refresh is harmless
        await rig.partitions(4)
        assert len(topic.producers) == 4
        await rig.manager.stop()

    run(test)


def test_a_topic_that_becomes_partitioned_keeps_its_producer() -> None:
    async def test() -> None:
        rig = Rig()
        rig.send(encode_any_partition("t", b"a1"))
        topic = rig.topic()
        await rig.partitions(0)
        await until(lambda: topic.producers, "the producer")
        rig.manager.grow(topic, 3)
        assert [p.topic for p in topic.producers] == [T]
        await rig.manager.stop()

    run(test)


def test_flush_dirty_writes_each_sealed_drivers_batches_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async def test() -> None:
        rig = Rig(Config(batch_max_messages=2))
        rig.send(encode_any_partition("t", b"a0"))
        topic = rig.topic()
        await rig.partitions(2)
        await until(lambda: topic.producers, "the producers")
        flushes: list[int] = []

        def flush(self: ProducerDriver) -> None:
            flushes.append(self.producer.partition)

        monkeypatch.setattr(ProducerDriver, "flush", flush)
        # Two batches fill on partition 0 and one on partition 1 during this "drain".
        for key in (0, 0, 0, 1, 1):
            assert rig.intake.admit(encode_partition_key(key, "t", b"v"))
        assert [len(p.pending) for p in topic.producers] == [2, 1]
        assert flushes == []  # nothing is written per message
        rig.manager.flush_dirty()
        assert sorted(flushes) == [0, 1]
        rig.manager.flush_dirty()  # nothing sealed since
        assert sorted(flushes) == [0, 1]
        await rig.manager.stop()

    run(test)


def test_the_drivers_are_given_the_managers_clocks() -> None:
    async def test() -> None:
        settings = TopicConfigurator(Config())

        def clock() -> float:
            return 5.0

        def wall_ms() -> int:
            return 7

        manager = TopicManager(
            FakePool(lookups_hang=True), Outcomes(Ledger()), settings, DeliveryPolicy(),
            TopicRegistry(settings), Appender(), clock=clock, wall_ms=wall_ms,
        )  # fmt: skip
        manager.grow(Topic(T), 0)
        (driver,) = manager.drivers.values()
        assert driver.clock is clock and driver.wall_ms is wall_ms
        assert driver.send_timeout._now is clock
        await manager.stop()

    run(test)
