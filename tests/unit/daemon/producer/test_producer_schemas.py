"""A producer declares its topic's schema, stamps the broker's schema version on what it
sends, and a topic that refuses the schema costs that topic's messages only, counted as
``schema_incompatible``, with one log line naming the topic and the schema.  A schema
changed by SIGHUP is declared at once: its producers are re-created."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any

import pytest
from pulsar_bruce import reasons
from pulsar_bruce.config import load_config
from pulsar_bruce.connection.broker_connection import ServerError
from pulsar_bruce.frame import pulsar_api_pb2 as pb
from pulsar_bruce.model.ledger import Ledger
from pulsar_bruce.model.schema import NO_SCHEMA, ProducerSchema
from pulsar_bruce.producer.delivery import DeliveryPolicy
from pulsar_bruce.producer.driver import ProducerDriver
from pulsar_bruce.producer.faults import one_line
from pulsar_bruce.producer.partition_producer import BatchPolicy, PartitionProducer
from pulsar_bruce.route.appender import Appender
from pulsar_bruce.route.outcomes import Outcomes
from pulsar_bruce.route.registry import TopicRegistry
from pulsar_bruce.route.topic import Topic
from pulsar_bruce.route.topic_settings import TopicConfigurator
from pulsar_bruce.spool.journal_stage import NO_JOURNAL
from pulsar_bruce.topics.manager import TopicManager

from tests.support.fakes_asyncio import FakeBrokerConnection, FakePool, RecordingListener, until

TOPIC = "persistent://public/default/orders"
LONG = DeliveryPolicy(receipt_timeout_s=3600.0, send_timeout_s=3600.0, max_send_attempts=10)
VERSION = (7).to_bytes(8, "big")
STRING = ProducerSchema.parse("string", lambda _: b"")
REFUSED = "IncompatibleSchema: Trying to register a schema that is incompatible"


class VersioningConnection(FakeBrokerConnection):
    """A broker that answers ``ProducerSuccess`` with a schema version."""

    async def request(self, request_id: int, frame: bytes, **options: Any) -> pb.BaseCommand:
        response = await super().request(request_id, frame, **options)
        if response.type == pb.BaseCommand.PRODUCER_SUCCESS:
            response.producer_success.schema_version = VERSION
        return response


class VersioningPool(FakePool):
    async def get(self, address: Any) -> FakeBrokerConnection:
        if not self.opened or self.opened[-1].closed:
            self.opened.append(VersioningConnection(address, errors=self.request_errors))
        return self.opened[-1]


class Rig:
    def __init__(self, pool: FakePool, schema: ProducerSchema = STRING) -> None:
        self.pool = pool
        self.listener = RecordingListener()
        self.producer = PartitionProducer(TOPIC, 0, 3, BatchPolicy(schema=schema))
        self.driver = ProducerDriver(self.producer, pool, self.listener, LONG, journal=NO_JOURNAL)

    def seal(self, count: int = 1) -> None:
        for index in range(count):
            self.producer.batch.append(b"", 0, b"value-%d" % index, 0, 64)
        assert self.producer.seal() is not None
        self.driver.flush()


def test_the_producer_declares_the_policys_schema_and_stamps_the_version() -> None:
    async def test() -> None:
        rig = Rig(VersioningPool())
        rig.driver.start()
        await until(lambda: rig.driver.connection is not None, "the producer")
        rig.seal(2)
        (request,) = rig.pool.connection.requests
        assert request.producer.schema.type == pb.Schema.String
        assert request.producer.schema.name == "String"
        (frame,) = rig.pool.connection.frames
        assert frame.metadata is not None and frame.metadata.schema_version == VERSION
        await rig.driver.stop()

    asyncio.run(test())


def test_a_refused_schema_discards_as_schema_incompatible_with_one_line(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def test() -> None:
        pool = FakePool()
        pool.request_errors.extend(
            ServerError(pb.IncompatibleSchema, REFUSED.split(": ", 1)[1]) for _ in range(3)
        )
        rig = Rig(pool)
        rig.seal(2)
        with caplog.at_level(logging.INFO, logger="pulsar_bruce.producer.driver"):
            rig.driver.start()
            await until(lambda: rig.driver.rejected is not None, "the refusal")
            rig.seal(1)  # while refused: discarded at once, under the same reason
            discarded = rig.listener.discarded_for(reasons.SCHEMA_INCOMPATIBLE)
            assert [batch.count for batch in discarded] == [2, 1]
            assert not rig.listener.discarded_for(reasons.BROKER_REJECTED)
            await until(lambda: rig.driver.connection is not None, "the schema accepted", 30)
        warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
        assert warnings == [
            f"{TOPIC} refused by the broker (our schema string: {REFUSED}); discarding its "
            "messages as schema_incompatible"
        ]  # one line for three refusals, none for the retries
        assert f"{TOPIC} accepts our producer again (was IncompatibleSchema)" in caplog.text
        rig.seal(1)
        assert len(pool.connection.sends) == 1
        await rig.driver.stop()

    asyncio.run(test())


def test_other_refusals_stay_broker_rejected() -> None:
    async def test() -> None:
        pool = FakePool()
        pool.request_errors.append(ServerError(pb.TopicTerminatedError, "terminated"))
        rig = Rig(pool)
        rig.seal(1)
        rig.driver.start()
        await until(lambda: rig.listener.discarded, "the discard")
        assert rig.listener.discarded_for(reasons.BROKER_REJECTED)
        assert not rig.listener.discarded_for(reasons.SCHEMA_INCOMPATIBLE)
        await rig.driver.stop()

    asyncio.run(test())


def test_the_java_brokers_refusal_text_becomes_one_line() -> None:
    """``IncompatibleSchemaException`` texts carry both schemas pretty-printed, twice."""
    schema = '{\n  "type" : "record",\n  "name" : "Order"\n}'
    text = (
        "IncompatibleSchema: org.apache.pulsar.broker.service.schema.exceptions."
        "IncompatibleSchemaException: Error during schema compatibility check with strategy "
        f"FULL: org.apache.avro.SchemaValidationException: Unable to read schema: \n{schema}"
        f" caused by org.apache.pulsar.broker.Whatever: again {schema}"
    )
    assert one_line(text) == (
        "IncompatibleSchema: Error during schema compatibility check with strategy FULL: "
        'Unable to read schema: { "type" : "record", "name" : "Order" }'
    )
    assert one_line("x" * 500) == "x" * 397 + "..."


def test_a_changed_schema_is_declared_at_once_on_the_same_connection() -> None:
    async def test() -> None:
        rig = Rig(FakePool())
        rig.driver.start()
        await until(lambda: rig.driver.connection is not None, "the producer")
        rig.producer.set_policy(BatchPolicy(schema=NO_SCHEMA))
        rig.driver.redeclare()
        connection = rig.pool.connection
        await until(lambda: len(connection.requests) == 3, "the close and the new producer")
        _, close, create = connection.requests
        assert close.type == pb.BaseCommand.CLOSE_PRODUCER
        assert create.type == pb.BaseCommand.PRODUCER and not create.producer.HasField("schema")
        assert rig.pool.opened == [connection]  # the connection stays
        await rig.driver.stop()

    asyncio.run(test())


def test_sighup_recreates_only_the_producers_whose_schema_changed(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """What ``Server.reload`` does: the configurator takes the new file, then every topic's
    settings are applied again."""
    redeclared: list[str] = []
    monkeypatch.setattr(ProducerDriver, "redeclare", lambda d: redeclared.append(d.producer.topic))
    stringly = tmp_path / "string.toml"
    stringly.write_text('[topics."orders"]\nschema = "string"\n')
    batchy = tmp_path / "batch.toml"  # the schema as before, another option changed
    batchy.write_text('batch_max_messages = 7\n[topics."orders"]\nschema = "string"\n')

    async def test() -> None:
        configurator = TopicConfigurator(load_config({}, {}, str(stringly)))
        manager = TopicManager(FakePool(lookups_hang=True), Outcomes(Ledger()), configurator,
                               LONG, TopicRegistry(configurator), Appender())  # fmt: skip
        orders, other = Topic(TOPIC), Topic("persistent://public/default/other")
        for topic in (orders, other):
            manager.apply_settings(topic)
            manager.grow(topic, 2)
        assert {p.policy.schema.kind for p in orders.producers} == {"string"}
        configurator.reconfigure(load_config({}, {}, str(batchy)), [])
        for topic in (orders, other):
            manager.apply_settings(topic)
        assert redeclared == []
        configurator.reconfigure(load_config({}, {}), [])
        for topic in (orders, other):
            manager.apply_settings(topic)
        assert redeclared == [f"{TOPIC}-partition-0", f"{TOPIC}-partition-1"]
        await manager.stop()

    asyncio.run(test())
