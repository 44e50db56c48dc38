"""ConnectionPool: lookups, redirects, proxying, metadata and connection sharing.

The pool's transport seam is ``open_connection``; here it is replaced by a fake that
answers requests from a script per broker address, so no socket is opened.  The
lookup rules (follow Redirect carrying ``authoritative``, ``proxy_through_service_url``
connects to the service URL with ``proxy_to_broker_url``, a redirect limit) are those
of the Java client's BinaryProtoLookupService.getBroker.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest
from pulsar_bruce.connection import pool as pool_module
from pulsar_bruce.connection.broker_connection import ServerError
from pulsar_bruce.connection.pool import (
    MAX_REDIRECTS,
    BrokerAddress,
    ConnectionPool,
    TopicLookupError,
)
from pulsar_bruce.connection.protocol import ConnectionCore
from pulsar_bruce.frame import pulsar_api_pb2 as pb
from pulsar_bruce.frame.codec import FrameDecoder

_T = pb.BaseCommand
_Lookup = pb.CommandLookupTopicResponse
Answer = Callable[[pb.BaseCommand], pb.BaseCommand]


class FakeConnection:
    """Stands in for a BrokerConnection: records requests, answers with ``answer``."""

    def __init__(self, host: str, port: int, proxy_to: str | None, answer: Answer):
        self.host, self.port, self.proxy_to = host, port, proxy_to
        self.answer = answer
        self.requests: list[pb.BaseCommand] = []
        self.is_usable = True
        self._ids = 0

    def next_request_id(self) -> int:
        self._ids += 1
        return self._ids

    async def request(self, request_id: int, frame: bytes) -> pb.BaseCommand:
        (decoded,) = FrameDecoder().feed(frame)
        self.requests.append(decoded.command)
        return self.answer(decoded.command)

    def close(self) -> None:
        self.is_usable = False


class Brokers:
    """The fake ``open_connection``: one script per ``host:port``, every connection kept."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch):
        self.scripts: dict[str, Answer] = {}
        self.opened: list[FakeConnection] = []
        monkeypatch.setattr(pool_module, "open_connection", self.open)

    async def open(
        self, host: str, port: int, core: ConnectionCore, **_: Any
    ) -> FakeConnection:
        await asyncio.sleep(0)  # let concurrent callers meet the same attempt
        (connect,) = FrameDecoder().feed(core.data_to_send())  # what would go on the wire
        assert connect.command.type == _T.CONNECT
        c = connect.command.connect
        proxy_to = c.proxy_to_broker_url if c.HasField("proxy_to_broker_url") else None
        connection = FakeConnection(host, port, proxy_to, self.scripts[f"{host}:{port}"])
        self.opened.append(connection)
        return connection


def lookup_answer(
    url: str, response: int = _Lookup.Connect, authoritative: bool = False, proxy: bool = False
) -> Answer:
    def answer(command: pb.BaseCommand) -> pb.BaseCommand:
        assert command.type == _T.LOOKUP
        reply = _T(type=_T.LOOKUP_RESPONSE)
        r = reply.lookupTopicResponse
        r.request_id = command.lookupTopic.request_id
        r.response = response  # type: ignore[assignment]
        r.brokerServiceUrl = url
        r.authoritative = authoritative
        r.proxy_through_service_url = proxy
        return reply

    return answer


def run(coroutine: Any) -> Any:
    return asyncio.run(coroutine)


def test_lookup_answered_connect_returns_the_broker(monkeypatch: pytest.MonkeyPatch) -> None:
    brokers = Brokers(monkeypatch)
    brokers.scripts["svc:6650"] = lookup_answer("pulsar://owner:6650")
    pool = ConnectionPool("pulsar://svc:6650")
    assert run(pool.lookup("persistent://t/n/a")) == BrokerAddress("pulsar://owner:6650")
    (request,) = brokers.opened[0].requests
    assert request.lookupTopic.topic == "persistent://t/n/a"
    assert not request.lookupTopic.authoritative


def test_redirects_are_followed_carrying_authoritative(monkeypatch: pytest.MonkeyPatch) -> None:
    brokers = Brokers(monkeypatch)
    brokers.scripts["svc:6650"] = lookup_answer(
        "pulsar://b1:6650", _Lookup.Redirect, authoritative=True
    )
    brokers.scripts["b1:6650"] = lookup_answer("pulsar://b2:6650", _Lookup.Redirect)
    brokers.scripts["b2:6650"] = lookup_answer("pulsar://owner:6650")
    pool = ConnectionPool("pulsar://svc:6650")
    assert run(pool.lookup("t")) == BrokerAddress("pulsar://owner:6650")
    asked = [(c.host, c.requests[0].lookupTopic.authoritative) for c in brokers.opened]
    assert asked == [("svc", False), ("b1", True), ("b2", False)]


def test_proxy_through_service_url_connects_to_the_service_with_a_proxy_target(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    brokers = Brokers(monkeypatch)
    brokers.scripts["svc:6650"] = lookup_answer("pulsar://owner:6651", proxy=True)
    pool = ConnectionPool("pulsar://svc:6650")
    address = run(pool.lookup("t"))
    assert address == BrokerAddress("pulsar://svc:6650", proxy_to="owner:6651")

    async def connect() -> Any:
        return await pool.get(address)

    connection = run(connect())
    assert (connection.host, connection.port, connection.proxy_to) == ("svc", 6650, "owner:6651")


def test_too_many_redirects_fail_the_lookup(monkeypatch: pytest.MonkeyPatch) -> None:
    brokers = Brokers(monkeypatch)
    brokers.scripts["svc:6650"] = lookup_answer("pulsar://svc:6650", _Lookup.Redirect)
    pool = ConnectionPool("pulsar://svc:6650")
    with pytest.raises(TopicLookupError, match=f"more than {MAX_REDIRECTS} redirects"):
        run(pool.lookup("t"))
    assert len(brokers.opened[0].requests) == MAX_REDIRECTS + 1


def test_a_failed_lookup_carries_the_server_error(monkeypatch: pytest.MonkeyPatch) -> None:
    def failed(command: pb.BaseCommand) -> pb.BaseCommand:
        reply = lookup_answer("", _Lookup.Failed)(command)
        reply.lookupTopicResponse.error = pb.TopicNotFound
        reply.lookupTopicResponse.message = "no such topic"
        return reply

    brokers = Brokers(monkeypatch)
    brokers.scripts["svc:6650"] = failed
    with pytest.raises(TopicLookupError, match="no such topic") as caught:
        run(ConnectionPool("pulsar://svc:6650").lookup("t"))
    assert caught.value.error == pb.TopicNotFound


def test_a_lookup_without_a_url_is_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    brokers = Brokers(monkeypatch)
    brokers.scripts["svc:6650"] = lookup_answer("")
    with pytest.raises(TopicLookupError, match="no service URL"):
        run(ConnectionPool("pulsar://svc:6650").lookup("t"))


def metadata_answer(partitions: int, error: int | None = None) -> Answer:
    def answer(command: pb.BaseCommand) -> pb.BaseCommand:
        assert command.type == _T.PARTITIONED_METADATA
        reply = _T(type=_T.PARTITIONED_METADATA_RESPONSE)
        r = reply.partitionMetadataResponse
        r.request_id = command.partitionMetadata.request_id
        if error is None:
            r.partitions = partitions
            r.response = pb.CommandPartitionedTopicMetadataResponse.Success
        else:
            r.response = pb.CommandPartitionedTopicMetadataResponse.Failed
            r.error = error  # type: ignore[assignment]
            r.message = "refused"
        return reply

    return answer


def test_partition_count_from_the_metadata_answer(monkeypatch: pytest.MonkeyPatch) -> None:
    brokers = Brokers(monkeypatch)
    brokers.scripts["svc:6650"] = metadata_answer(7)
    assert run(ConnectionPool("pulsar://svc:6650").partition_count("t")) == 7
    assert brokers.opened[0].requests[0].partitionMetadata.topic == "t"


def test_failed_metadata_and_server_errors_become_lookup_errors(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    brokers = Brokers(monkeypatch)
    brokers.scripts["svc:6650"] = metadata_answer(0, pb.AuthorizationError)
    with pytest.raises(TopicLookupError, match="AuthorizationError") as caught:
        run(ConnectionPool("pulsar://svc:6650").partition_count("t"))
    assert caught.value.error == pb.AuthorizationError

    def server_error(command: pb.BaseCommand) -> pb.BaseCommand:
        raise ServerError(pb.ServiceNotReady, "not ready")

    brokers.scripts["svc:6650"] = server_error
    with pytest.raises(TopicLookupError, match="ServiceNotReady") as caught:
        run(ConnectionPool("pulsar://svc:6650").partition_count("t"))
    assert caught.value.error == pb.ServiceNotReady


def test_one_connection_per_address_shared_and_replaced_when_unusable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    brokers = Brokers(monkeypatch)
    brokers.scripts["b:6650"] = lookup_answer("pulsar://b:6650")
    pool = ConnectionPool("pulsar://svc:6650")
    address = BrokerAddress("pulsar://b:6650")

    async def scenario() -> None:
        first, second = await asyncio.gather(pool.get(address), pool.get(address))
        assert first is second  # concurrent callers share one attempt
        assert await pool.get(address) is first
        assert pool.connections == [first]
        first.close()
        assert pool.connections == []
        third = await pool.get(address)
        assert third is not first and pool.connections == [third]
        other = await pool.get(BrokerAddress("pulsar://b:6650", proxy_to="x:1"))
        assert other is not third  # a proxy target is a different connection

    run(scenario())
    assert len(brokers.opened) == 3
    pool.close_all()
    assert pool.connections == [] and not any(c.is_usable for c in brokers.opened)
