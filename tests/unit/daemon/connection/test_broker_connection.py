"""BrokerConnection, the asyncio edge of one broker connection, on a fake transport and clock.

What it adds to the sans-IO ``ConnectionCore`` (``test_protocol.py``): receipts,
send errors, CloseProducer and TopicMigrated routed by ``producer_id`` to the producers
registered on it; requests matched to responses by ``request_id``, with a timeout, and a
producer's creation failed at once by a CloseProducer for it; every producer told once when
the connection goes; Ping answered and keep-alive driven from the event loop's timer.
The URL choices of CloseProducer and TopicMigrated are in ``test_v20.py``.

The loop's time, which each connection is given as its clock, is a :class:`FakeClock` that
jumps to the next timer when the loop would wait: ``await asyncio.sleep(30)`` lets 30 fake
seconds pass, with every timer in between firing in order.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest
from pulsar_bruce.connection.broker_connection import (
    REQUEST_TIMEOUT_S,
    BrokerConnection,
    ConnectionClosedError,
    ProducerClosedError,
    ServerError,
    open_connection,
)
from pulsar_bruce.connection.protocol import ConnectionCore
from pulsar_bruce.frame import commands
from pulsar_bruce.frame import pulsar_api_pb2 as pb
from pulsar_bruce.frame.codec import encode_command

from tests.support.fakebroker import FakeBroker
from tests.support.fakes_asyncio import FakeClock, FakeTransport, run_on_clock, until_soon

_T = pb.BaseCommand
KEEPALIVE_S = 30.0
TOPIC = "persistent://public/default/t"


@pytest.fixture
def clock() -> FakeClock:
    """The time of the loop a test runs on (:func:`run_on_clock`), which its connections read
    too (:func:`new_connection`)."""
    return FakeClock()


class Listener:
    """A producer registered on the connection: records what it is told, in order."""

    def __init__(self) -> None:
        self.events: list[tuple[str, object]] = []

    def on_receipt(self, receipt: pb.CommandSendReceipt) -> None:
        self.events.append(("receipt", receipt.sequence_id))

    def on_send_error(self, error: pb.CommandSendError) -> None:
        self.events.append(("send_error", error.sequence_id))

    def on_close_producer(self, assigned_url: str | None) -> None:
        self.events.append(("close_producer", assigned_url))

    def on_topic_migrated(self, cluster_url: str) -> None:
        self.events.append(("migrated", cluster_url))

    def on_connection_lost(self) -> None:
        self.events.append(("lost", None))


def frame(kind: int, field: str, **values: object) -> bytes:
    command = _T(type=kind)
    body = getattr(command, field)
    body.SetInParent()
    for name, value in values.items():
        setattr(body, name, value)
    return encode_command(command)


def receipt(producer_id: int, sequence_id: int) -> bytes:
    return frame(_T.SEND_RECEIPT, "send_receipt", producer_id=producer_id, sequence_id=sequence_id)


def send_error(producer_id: int, sequence_id: int) -> bytes:
    return frame(
        _T.SEND_ERROR, "send_error", producer_id=producer_id, sequence_id=sequence_id,
        error=pb.UnknownError, message="disk full",
    )  # fmt: skip


def close_producer(producer_id: int, assigned_url: str = "") -> bytes:
    return frame(
        _T.CLOSE_PRODUCER, "close_producer", producer_id=producer_id, request_id=2**64 - 1,
        assignedBrokerServiceUrl=assigned_url,
    )  # fmt: skip


def producer_success(request_id: int, name: str, ready: bool = True) -> bytes:
    return frame(
        _T.PRODUCER_SUCCESS, "producer_success", request_id=request_id, producer_name=name,
        producer_ready=ready,
    )  # fmt: skip


CONNECTED = frame(_T.CONNECTED, "connected", server_version="fake", protocol_version=20)


def new_connection() -> tuple[BrokerConnection, FakeTransport]:
    loop = asyncio.get_running_loop()
    connection = BrokerConnection(
        "broker:6650", ConnectionCore(loop.time()), KEEPALIVE_S, clock=loop.time
    )
    transport = FakeTransport(connection)
    connection.connection_made(transport)
    return connection, transport


async def ready_connection() -> tuple[BrokerConnection, FakeTransport]:
    connection, transport = new_connection()
    transport.feed(CONNECTED)
    await connection.connected
    return connection, transport


async def with_producers(
    *producer_ids: int,
) -> tuple[BrokerConnection, FakeTransport, list[Listener]]:
    """A ready connection with a :class:`Listener` registered for each producer id."""
    connection, transport = await ready_connection()
    listeners = [Listener() for _ in producer_ids]
    for producer_id, listener in zip(producer_ids, listeners, strict=True):
        connection.register_producer(producer_id, listener)
    return connection, transport, listeners


def create_producer(
    connection: BrokerConnection, producer_id: int = 1, timeout: float | None = None
) -> tuple[int, asyncio.Future[pb.BaseCommand]]:
    """Send a Producer request as the driver does; its request id and the future of its answer."""
    request_id = connection.next_request_id()
    request = commands.producer(TOPIC, producer_id, request_id, None)
    return request_id, asyncio.ensure_future(
        connection.request(request_id, request, producer_id=producer_id, timeout=timeout)
    )


def lookup(connection: BrokerConnection) -> tuple[int, asyncio.Future[pb.BaseCommand]]:
    request_id = connection.next_request_id()
    request = commands.lookup(TOPIC, request_id, False)
    return request_id, asyncio.ensure_future(connection.request(request_id, request))


# -- handshake ---------------------------------------------------------------------------------


def test_connect_is_written_first_and_connected_makes_it_usable(clock: FakeClock) -> None:
    async def main() -> None:
        connection, transport = new_connection()
        assert transport.command_types() == ["CONNECT"]
        assert not connection.is_usable
        transport.feed(CONNECTED)
        await connection.connected
        assert connection.is_usable and connection.core.server_version == "fake"

    run_on_clock(main(), clock)


def test_a_refused_handshake_fails_connected_and_aborts(clock: FakeClock) -> None:
    async def main() -> None:
        connection, transport = new_connection()
        transport.feed(
            frame(
                _T.ERROR, "error", request_id=0, error=pb.AuthenticationError, message="bad token"
            )
        )
        with pytest.raises(ConnectionClosedError, match="AuthenticationError: bad token"):
            await connection.connected
        assert transport.aborted and connection.closed.done() and not connection.is_usable

    run_on_clock(main(), clock)


def test_a_connection_lost_during_the_handshake_fails_connected(clock: FakeClock) -> None:
    async def main() -> None:
        connection, transport = new_connection()
        transport.lose(ConnectionResetError("reset"))
        with pytest.raises(ConnectionClosedError, match="reset"):
            await connection.connected
        assert not transport.aborted  # the peer went: nothing of ours to abort

    run_on_clock(main(), clock)


# -- producer events -----------------------------------------------------------------------------


def test_receipts_and_send_errors_reach_the_producer_they_name(clock: FakeClock) -> None:
    async def main() -> None:
        connection, transport, (one, two) = await with_producers(1, 2)
        transport.feed(receipt(2, 10))
        transport.feed(receipt(1, 5))
        transport.feed(send_error(1, 6))
        transport.feed(receipt(9, 1))  # nobody registered as 9: dropped, nothing breaks
        transport.feed(send_error(9, 2))
        await until_soon(transport.delivered, "every frame handled")
        assert one.events == [("receipt", 5), ("send_error", 6)]
        assert two.events == [("receipt", 10)]
        assert connection.is_usable

    run_on_clock(main(), clock)


def test_close_producer_tells_that_producer_once_and_forgets_it(clock: FakeClock) -> None:
    async def main() -> None:
        connection, transport, (closed, other) = await with_producers(1, 2)
        transport.feed(close_producer(1, assigned_url="pulsar://b2:6650"))
        transport.feed(receipt(1, 7))  # after CloseProducer: no longer routed to it
        transport.feed(close_producer(1))  # nor is a second CloseProducer
        transport.feed(receipt(2, 3))
        await until_soon(transport.delivered, "every frame handled")
        assert connection.is_usable  # one producer closed, the connection stays
        transport.lose()
        await until_soon(connection.closed.done, "the connection to close")
        assert closed.events == [("close_producer", "pulsar://b2:6650")]
        assert other.events == [("receipt", 3), ("lost", None)]

    run_on_clock(main(), clock)


def test_topic_migrated_reaches_the_producer_and_leaves_it_registered(clock: FakeClock) -> None:
    async def main() -> None:
        _, transport, (moved, other) = await with_producers(3, 4)
        transport.feed(
            frame(
                _T.TOPIC_MIGRATED,
                "topicMigrated",
                resource_id=3,
                resource_type=pb.CommandTopicMigrated.Producer,
                brokerServiceUrl="pulsar://green:6650",
            )
        )
        transport.feed(receipt(3, 1))  # still its producer until the CloseProducer
        transport.feed(close_producer(3))
        await until_soon(transport.delivered, "every frame handled")
        assert moved.events == [
            ("migrated", "pulsar://green:6650"), ("receipt", 1), ("close_producer", None),
        ]  # fmt: skip
        assert other.events == []

    run_on_clock(main(), clock)


def test_an_unregistered_producer_hears_nothing_more(clock: FakeClock) -> None:
    async def main() -> None:
        connection, transport, (listener,) = await with_producers(4)
        connection.unregister_producer(4)
        connection.unregister_producer(4)  # twice: harmless
        transport.feed(receipt(4, 1))
        transport.feed(close_producer(4))
        transport.lose()
        await until_soon(connection.closed.done, "the connection to close")
        assert listener.events == []

    run_on_clock(main(), clock)


def test_losing_the_connection_tells_every_producer_once_and_fails_every_request(
    clock: FakeClock,
) -> None:
    async def main() -> None:
        connection, transport, listeners = await with_producers(0, 1, 2)
        _, pending = lookup(connection)
        await until_soon(lambda: "LOOKUP" in transport.command_types(), "the lookup written")
        transport.lose(ConnectionResetError("reset by peer"))
        with pytest.raises(ConnectionClosedError, match="reset by peer"):
            await pending
        connection.connection_lost(None)  # a second report of the loss changes nothing
        assert all(listener.events == [("lost", None)] for listener in listeners)
        assert connection.closed.done() and not connection.is_usable
        with pytest.raises(ConnectionClosedError, match="not usable"):
            await connection.request(99, commands.lookup(TOPIC, 99, False))

    run_on_clock(main(), clock)


def test_broken_framing_closes_the_connection_and_tells_the_producers(clock: FakeClock) -> None:
    async def main() -> None:
        connection, transport, (listener,) = await with_producers(1)
        transport.feed(b"\x00\x00\x00\x02\x00\x00")  # a frame too short for its command size
        await until_soon(connection.closed.done, "the connection to close")
        assert transport.aborted
        assert listener.events == [("lost", None)]

    run_on_clock(main(), clock)


def test_abort_and_close_end_in_connection_lost(clock: FakeClock) -> None:
    async def main() -> None:
        aborted, transport, (listener,) = await with_producers(1)
        aborted.abort("a receipt we cannot explain")
        await until_soon(aborted.closed.done, "the aborted connection to close")
        assert transport.aborted and listener.events == [("lost", None)]
        closed, transport = await ready_connection()
        closed.close()
        await until_soon(closed.closed.done, "the closed connection to close")
        assert transport.calls[0] == "close" and not transport.aborted

    run_on_clock(main(), clock)


# -- requests ----------------------------------------------------------------------------------


def test_responses_are_matched_to_requests_by_request_id(clock: FakeClock) -> None:
    async def main() -> None:
        connection, transport = await ready_connection()
        first, found = lookup(connection)
        second = connection.next_request_id()
        assert first != second
        metadata = asyncio.ensure_future(
            connection.request(second, commands.partitioned_metadata(TOPIC, second))
        )
        await until_soon(lambda: len(transport.commands()) == 3, "both requests written")
        transport.feed(
            frame(
                _T.PARTITIONED_METADATA_RESPONSE,
                "partitionMetadataResponse",
                request_id=second,
                partitions=3,
            )
        )
        transport.feed(frame(_T.SUCCESS, "success", request_id=12345))  # nobody asked: ignored
        transport.feed(frame(_T.PONG, "pong"))  # the core's, never a response
        transport.feed(
            frame(
                _T.LOOKUP_RESPONSE,
                "lookupTopicResponse",
                request_id=first,
                brokerServiceUrl="pulsar://b:6650",
            )
        )
        assert (await metadata).partitionMetadataResponse.partitions == 3
        assert (await found).lookupTopicResponse.brokerServiceUrl == "pulsar://b:6650"
        transport.feed(frame(_T.SUCCESS, "success", request_id=first))  # answered: ignored
        await until_soon(transport.delivered, "the late answer handled")
        assert connection.is_usable

    run_on_clock(main(), clock)


def test_an_error_response_raises_server_error_with_the_code(clock: FakeClock) -> None:
    async def main() -> None:
        connection, transport = await ready_connection()
        request_id, pending = create_producer(connection)
        transport.feed(
            frame(_T.ERROR, "error", request_id=request_id, error=pb.TopicNotFound, message="no")
        )
        with pytest.raises(ServerError, match="TopicNotFound: no") as raised:
            await pending
        assert raised.value.error == pb.TopicNotFound
        assert connection.is_usable  # a refused request leaves the connection alone

    run_on_clock(main(), clock)


def test_a_producer_success_that_is_not_ready_yet_keeps_the_request_waiting(
    clock: FakeClock,
) -> None:
    async def main() -> None:
        connection, transport = await ready_connection()
        request_id, pending = create_producer(connection)
        transport.feed(producer_success(request_id, "queued", ready=False))
        await until_soon(transport.delivered, "the first ProducerSuccess handled")
        assert not pending.done()
        transport.feed(producer_success(request_id, "p"))
        assert (await pending).producer_success.producer_name == "p"

    run_on_clock(main(), clock)


def test_a_request_without_answer_times_out_and_the_connection_stays(clock: FakeClock) -> None:
    async def main() -> None:
        connection, transport = await ready_connection()
        started = clock.now
        request_id, pending = lookup(connection)
        with pytest.raises(TimeoutError):
            await pending
        assert clock.now - started == pytest.approx(REQUEST_TIMEOUT_S)
        assert connection.is_usable
        transport.feed(frame(_T.SUCCESS, "success", request_id=request_id))  # too late: ignored
        await until_soon(transport.delivered, "the late answer handled")
        assert connection.is_usable

    run_on_clock(main(), clock)


def test_the_timeout_argument_replaces_the_default(clock: FakeClock) -> None:
    async def main() -> None:
        connection, _ = await ready_connection()
        started = clock.now
        _, pending = create_producer(connection, timeout=5.0)
        with pytest.raises(TimeoutError):
            await pending
        assert clock.now - started == pytest.approx(5.0)
        assert connection.is_usable

    run_on_clock(main(), clock)


def test_close_producer_fails_that_producers_creation_at_once(clock: FakeClock) -> None:
    """The Java broker answers a Producer command for a migrated topic with TopicMigrated and
    CloseProducer only (``ServerCnx.buildProducerAndAddTopic``): the creation fails at once
    instead of waiting out the request timeout, and other requests are untouched."""

    async def main() -> None:
        connection, transport, (listener,) = await with_producers(5)
        started = clock.now
        _, creating = create_producer(connection, producer_id=5)
        other_id, other = create_producer(connection, producer_id=6)
        await until_soon(lambda: len(transport.commands()) == 3, "both requests written")
        transport.feed(close_producer(5))
        with pytest.raises(ProducerClosedError, match="closed producer 5 while creating it"):
            await creating
        assert clock.now == started  # no timeout waited for
        assert listener.events == [("close_producer", None)]
        assert not other.done()
        transport.feed(producer_success(other_id, "six"))
        assert (await other).producer_success.producer_name == "six"

    run_on_clock(main(), clock)


def test_close_producer_after_the_creation_ended_fails_nothing(clock: FakeClock) -> None:
    async def main() -> None:
        connection, transport, (listener,) = await with_producers(5)
        request_id, created = create_producer(connection, producer_id=5)
        transport.feed(producer_success(request_id, "five"))
        await created
        _, timed_out = create_producer(connection, producer_id=5, timeout=1.0)
        with pytest.raises(TimeoutError):
            await timed_out
        pending_id, pending = lookup(connection)  # a later request must not be failed by it
        transport.feed(close_producer(5))
        await until_soon(transport.delivered, "the CloseProducer handled")
        assert listener.events == [("close_producer", None)]
        assert not pending.done()
        transport.feed(frame(_T.SUCCESS, "success", request_id=pending_id))
        assert (await pending).type == _T.SUCCESS

    run_on_clock(main(), clock)


# -- ping, pong, keep-alive ----------------------------------------------------------------------


def test_a_ping_from_the_broker_is_answered_with_pong(clock: FakeClock) -> None:
    async def main() -> None:
        connection, transport = await ready_connection()
        transport.feed(frame(_T.PING, "ping"))
        await until_soon(lambda: "PONG" in transport.command_types(), "a Pong")
        assert transport.command_types() == ["CONNECT", "PONG"]
        assert connection.is_usable

    run_on_clock(main(), clock)


def test_keepalive_pings_an_idle_broker_and_closes_a_silent_one(clock: FakeClock) -> None:
    async def main() -> None:
        connection, transport, (listener,) = await with_producers(1)
        start = clock.now
        await asyncio.sleep(KEEPALIVE_S + 1)  # fake time: the check at +30 sends a Ping
        assert transport.command_types() == ["CONNECT", "PING"]
        transport.feed(frame(_T.PONG, "pong"))  # heard at +31: alive
        await asyncio.sleep(2 * KEEPALIVE_S)  # the check at +60 sees 29 s of silence: nothing
        assert transport.command_types() == ["CONNECT", "PING", "PING"]  # the one at +90
        assert not transport.closing
        await asyncio.sleep(KEEPALIVE_S)  # at +120: silent for two intervals
        assert transport.aborted and connection.closed.done()
        assert listener.events == [("lost", None)]
        assert clock.now - start == pytest.approx(4 * KEEPALIVE_S + 1)

    run_on_clock(main(), clock)


def test_any_frame_from_the_broker_keeps_the_connection_alive(clock: FakeClock) -> None:
    async def main() -> None:
        connection, transport, (listener,) = await with_producers(1)
        for sequence_id in range(6):  # a receipt every 20 s, never a Pong
            await asyncio.sleep(20.0)
            transport.feed(receipt(1, sequence_id))
        await until_soon(transport.delivered, "the last receipt handled")
        assert connection.is_usable and not transport.closing
        assert len(listener.events) == 6

    run_on_clock(main(), clock)


def test_keepalive_stops_once_the_connection_is_closed(clock: FakeClock) -> None:
    async def main() -> None:
        connection, transport = await ready_connection()
        connection.close()
        await until_soon(connection.closed.done, "the close")
        written = len(transport.written)
        await asyncio.sleep(5 * KEEPALIVE_S)  # fake time: no keep-alive timer left to fire
        assert len(transport.written) == written  # no Ping into a closed transport

    run_on_clock(main(), clock)


# -- open_connection (a real socket to the scripted fake broker) ---------------------------------


@pytest.fixture
def fake_broker() -> Iterator[FakeBroker]:
    broker = FakeBroker(tokens={b"right"}).start()
    yield broker
    assert broker.errors() == [], broker.errors()
    broker.stop()


def test_open_connection_returns_after_the_handshake(fake_broker: FakeBroker) -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        core = ConnectionCore(loop.time(), auth_method_name="token", auth_data=b"right")
        connection = await open_connection("127.0.0.1", fake_broker.port, core)
        assert connection.is_usable and connection.address == f"127.0.0.1:{fake_broker.port}"
        assert connection.core.server_version
        connection.close()
        await connection.closed

    asyncio.run(main())
    assert fake_broker.commands()[0] == "CONNECT"
    assert fake_broker.rejected() == 0


def test_open_connection_raises_when_the_broker_refuses_the_credentials(
    fake_broker: FakeBroker,
) -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        core = ConnectionCore(loop.time(), auth_method_name="token", auth_data=b"wrong")
        with pytest.raises(ConnectionClosedError, match="AuthenticationError"):
            await open_connection("127.0.0.1", fake_broker.port, core)

    asyncio.run(main())
    assert fake_broker.rejected() == 1
