"""Protocol v20 obligations: TopicMigrated, and CloseProducer naming the broker to go to.

We announce protocol v20 in Connect, so a Java broker sends ``CommandTopicMigrated``
to our producers after a blue-green cluster migration (pulsar-broker
``Producer.topicMigrated``: TopicMigrated, then CloseProducer) and, with the
extensible load manager, a ``CloseProducer`` carrying ``assignedBrokerServiceUrl``
/ ``assignedBrokerServiceUrlTls`` when it moves a bundle (``ServerCnx.closeProducer``).
The Java client's ``ClientCnx.handleTopicMigrated`` / ``handleCloseProducer`` and
the Go client's ``connection.handleTopicMigrated`` pick the ``...Tls`` URL on a TLS
connection and the plain one otherwise, ignore a URL that does not parse, and
reconnect at once to an assigned broker (``ConnectionHandler.grabCnx``: straight
there, through the proxy if the producer was proxied) or look the topic up on the
migrated cluster's service URL.

Here: the wire format, the connection's dispatch (fed frames, no network), and the
pool's lookups (against the scripted fake broker).  End to end with the daemon:
``tests/integration/test_broker_moves.py``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine, Iterator
from typing import Any

import pytest
from pulsar_bruce.connection.broker_connection import (
    BrokerConnection,
    ConnectionClosedError,
    ProducerClosedError,
)
from pulsar_bruce.connection.pool import BrokerAddress, ConnectionPool
from pulsar_bruce.connection.protocol import ConnectionCore
from pulsar_bruce.frame import commands
from pulsar_bruce.frame import pulsar_api_pb2 as pb
from pulsar_bruce.frame.codec import encode_command

from tests.support.fakebroker import FakeBroker

_T = pb.BaseCommand
TOPIC = "persistent://public/default/moving"

# -- wire format (upstream PulsarApi.proto) -------------------------------------------------------


@pytest.mark.parametrize(
    ("message", "field", "number", "required"),
    [
        ("BaseCommand", "topicMigrated", 68, False),
        ("CommandTopicMigrated", "resource_id", 1, True),
        ("CommandTopicMigrated", "resource_type", 2, True),
        ("CommandTopicMigrated", "brokerServiceUrl", 3, False),
        ("CommandTopicMigrated", "brokerServiceUrlTls", 4, False),
        ("CommandCloseProducer", "assignedBrokerServiceUrl", 3, False),
        ("CommandCloseProducer", "assignedBrokerServiceUrlTls", 4, False),
        ("CommandLookupTopic", "advertised_listener_name", 7, False),
    ],
)
def test_fields_match_upstream(message: str, field: str, number: int, required: bool) -> None:
    descriptor = pb.DESCRIPTOR.message_types_by_name[message].fields_by_name[field]
    assert descriptor.number == number
    assert descriptor.is_required is required
    assert not descriptor.is_repeated


def test_topic_migrated_types_match_upstream() -> None:
    assert _T.TOPIC_MIGRATED == 68
    assert pb.CommandTopicMigrated.Producer == 0
    assert pb.CommandTopicMigrated.Consumer == 1
    assert pb.v20 == commands.PROTOCOL_VERSION  # the version that obliges us


# -- the connection's dispatch --------------------------------------------------------------------


class _Transport:
    """Just enough of an asyncio transport to record what the connection writes."""

    def __init__(self) -> None:
        self.written: list[bytes] = []
        self.closed = False

    def write(self, data: bytes) -> None:
        self.written.append(data)

    def writelines(self, frames: list[bytes]) -> None:
        self.written.extend(frames)

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.closed = True

    def abort(self) -> None:
        self.closed = True


class _Listener:
    """A producer's side of the connection, recording what it is told."""

    def __init__(self) -> None:
        self.closed: list[str | None] = []
        self.migrated: list[str] = []
        self.lost = 0

    def on_receipt(self, receipt: pb.CommandSendReceipt) -> None:
        raise AssertionError("no receipt expected")

    def on_send_error(self, error: pb.CommandSendError) -> None:
        raise AssertionError("no send error expected")

    def on_close_producer(self, assigned_url: str | None) -> None:
        self.closed.append(assigned_url)

    def on_topic_migrated(self, cluster_url: str) -> None:
        self.migrated.append(cluster_url)

    def on_connection_lost(self) -> None:
        self.lost += 1


def _run(coroutine: Coroutine[Any, Any, None]) -> None:
    asyncio.run(coroutine)


def _ready_connection(tls: bool) -> BrokerConnection:
    """A connection past its handshake (call inside a running loop)."""
    connection = BrokerConnection("broker:6650", ConnectionCore(0.0), 30.0, tls)
    connection.connection_made(_Transport())  # type: ignore[arg-type]
    connected = _T(type=_T.CONNECTED)
    connected.connected.server_version = "test"
    connection.data_received(encode_command(connected))
    assert connection.is_usable
    return connection


def _migrated(producer_id: int, url: str = "", url_tls: str = "") -> bytes:
    command = _T(type=_T.TOPIC_MIGRATED)
    command.topicMigrated.resource_id = producer_id
    command.topicMigrated.resource_type = pb.CommandTopicMigrated.Producer
    if url:
        command.topicMigrated.brokerServiceUrl = url
    if url_tls:
        command.topicMigrated.brokerServiceUrlTls = url_tls
    return encode_command(command)


def _close(producer_id: int, url: str = "", url_tls: str = "") -> bytes:
    command = _T(type=_T.CLOSE_PRODUCER)
    command.close_producer.producer_id = producer_id
    command.close_producer.request_id = 2**64 - 1  # the Java broker's -1L
    if url:
        command.close_producer.assignedBrokerServiceUrl = url
    if url_tls:
        command.close_producer.assignedBrokerServiceUrlTls = url_tls
    return encode_command(command)


PLAIN = "pulsar://green-1:6650"
SECURE = "pulsar+ssl://green-1:6651"


@pytest.mark.parametrize(("tls", "expected"), [(False, PLAIN), (True, SECURE)])
def test_topic_migrated_passes_on_the_url_for_the_connections_kind(
    tls: bool, expected: str
) -> None:
    async def run() -> None:
        connection = _ready_connection(tls)
        listener, other = _Listener(), _Listener()
        connection.register_producer(3, listener)
        connection.register_producer(4, other)
        connection.data_received(_migrated(3, PLAIN, SECURE))
        assert listener.migrated == [expected]
        assert listener.closed == [] and other.migrated == []  # CloseProducer comes separately
        connection.data_received(_close(3))
        assert listener.closed == [None]
        connection.data_received(_close(3))  # no longer registered: nothing to tell
        assert listener.closed == [None] and other.closed == []
        connection.connection_lost(None)
        assert (listener.lost, other.lost) == (0, 1)

    _run(run())


def test_topic_migrated_for_a_consumer_is_none_of_ours() -> None:
    async def run() -> None:
        connection = _ready_connection(False)
        listener = _Listener()
        connection.register_producer(3, listener)
        command = _T(type=_T.TOPIC_MIGRATED)
        command.topicMigrated.resource_id = 3
        command.topicMigrated.resource_type = pb.CommandTopicMigrated.Consumer
        command.topicMigrated.brokerServiceUrl = PLAIN
        connection.data_received(encode_command(command))
        assert listener.migrated == []
        connection.connection_lost(None)

    _run(run())


@pytest.mark.parametrize(
    ("tls", "url", "url_tls", "logged"),
    [
        (True, PLAIN, "", "has no TLS form"),  # a TLS connection never falls back to plain
        (False, "", SECURE, "has no plain form"),
        (False, "http://green-1:8080", "", "ignoring migrated URL"),
    ],
)
def test_a_migration_without_a_usable_url_is_logged_and_ignored(
    tls: bool, url: str, url_tls: str, logged: str, caplog: pytest.LogCaptureFixture
) -> None:
    async def run() -> None:
        connection = _ready_connection(tls)
        listener = _Listener()
        connection.register_producer(3, listener)
        connection.data_received(_migrated(3, url, url_tls))
        assert listener.migrated == []
        connection.connection_lost(None)

    with caplog.at_level(logging.WARNING):
        _run(run())
    assert logged in caplog.text


@pytest.mark.parametrize(
    ("tls", "url", "url_tls", "expected"),
    [
        (False, "pulsar://b2:6650", "pulsar+ssl://b2:6651", "pulsar://b2:6650"),
        (True, "pulsar://b2:6650", "pulsar+ssl://b2:6651", "pulsar+ssl://b2:6651"),
        (True, "pulsar://b2:6650", "", None),  # the Java client then looks the topic up
        (False, "", "", None),  # a plain CloseProducer: look the topic up again
        (False, "b2:6650", "", None),  # not a URL
    ],
)
def test_close_producer_passes_on_the_assigned_broker(
    tls: bool, url: str, url_tls: str, expected: str | None
) -> None:
    async def run() -> None:
        connection = _ready_connection(tls)
        listener = _Listener()
        connection.register_producer(7, listener)
        connection.data_received(_close(7, url, url_tls))
        assert listener.closed == [expected]
        connection.connection_lost(None)

    _run(run())


def test_close_producer_during_creation_fails_the_creation_at_once() -> None:
    """The Java broker answers a Producer command for a migrated topic with TopicMigrated and
    CloseProducer only (``ServerCnx.buildProducerAndAddTopic``): waiting for an answer would
    wait for the request timeout."""

    async def run() -> None:
        connection = _ready_connection(False)
        listener = _Listener()
        connection.register_producer(5, listener)
        request_id = connection.next_request_id()
        creating = asyncio.ensure_future(
            connection.request(
                request_id, commands.producer(TOPIC, 5, request_id, "p"), producer_id=5
            )
        )
        await asyncio.sleep(0)  # let the request be written
        other_id = connection.next_request_id()
        other = asyncio.ensure_future(
            connection.request(other_id, commands.lookup(TOPIC, other_id, False))
        )
        await asyncio.sleep(0)
        connection.data_received(_migrated(5, PLAIN) + _close(5))
        with pytest.raises(ProducerClosedError, match="closed producer 5 while creating it"):
            await creating
        assert listener.migrated == [PLAIN] and listener.closed == [None]
        assert not other.done()  # other requests are untouched
        connection.connection_lost(None)
        with pytest.raises(ConnectionClosedError):
            await other

    _run(run())


# -- the pool: where lookups and reconnections go -----------------------------------------------


@pytest.fixture
def two_brokers() -> Iterator[tuple[FakeBroker, FakeBroker]]:
    blue, green = FakeBroker().start(), FakeBroker().start()
    yield blue, green
    for broker in (blue, green):
        assert broker.errors() == [], broker.errors()
        broker.stop()


def test_lookups_for_a_migrated_topic_ask_the_new_cluster(
    two_brokers: tuple[FakeBroker, FakeBroker],
) -> None:
    blue, green = two_brokers
    pool = ConnectionPool(blue.url)

    async def run() -> tuple[BrokerAddress, BrokerAddress]:
        try:
            ours = await pool.lookup(TOPIC)
            theirs = await pool.lookup(TOPIC, green.url)
        finally:
            pool.close_all()
        return ours, theirs

    ours, theirs = asyncio.run(run())
    assert ours == BrokerAddress(blue.url)
    assert theirs == BrokerAddress(green.url)
    assert [lookup.topic for lookup in blue.lookups()] == [TOPIC]
    assert [lookup.topic for lookup in green.lookups()] == [TOPIC]


def test_a_multi_host_cluster_url_is_taken_in_turn() -> None:
    pool = ConnectionPool("pulsar://blue:6650")
    cluster = "pulsar://green-1:6650,green-2:6650"
    service, hosts = pool._hosts(cluster)
    first = [service.url_for(*hosts.order()[0]) for _ in range(3)]
    assert first == ["pulsar://green-1:6650", "pulsar://green-2:6650", "pulsar://green-1:6650"]


def test_an_assigned_broker_is_reached_directly_or_through_the_same_proxy() -> None:
    assigned = "pulsar://b2:6650"
    assert ConnectionPool.assigned_address(assigned, None) == BrokerAddress(assigned)
    direct = BrokerAddress("pulsar://b1:6650")
    assert ConnectionPool.assigned_address(assigned, direct) == BrokerAddress(assigned)
    proxied = BrokerAddress("pulsar://proxy:6650", proxy_to="b1:6650")
    assert ConnectionPool.assigned_address(assigned, proxied) == BrokerAddress(
        "pulsar://proxy:6650", proxy_to="b2:6650"
    )
