"""ConnectionPool: lookups, redirects, proxying, metadata and connection sharing.

The pool's transport seam is ``open_connection``; here it is replaced by a fake that
answers requests from a script per broker address, so no socket is opened.  The
lookup rules (follow Redirect carrying ``authoritative``, ``proxy_through_service_url``
connects to the service URL with ``proxy_to_broker_url``, a redirect limit) are those
of the Java client's BinaryProtoLookupService.getBroker.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Callable
from dataclasses import dataclass
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
from pulsar_bruce.connection.service_hosts import FIRST_ASIDE_S, ServiceUnreachable
from pulsar_bruce.frame import pulsar_api_pb2 as pb
from pulsar_bruce.frame.codec import FrameDecoder

from tests.support.fakes_asyncio import FakeClock

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


@dataclass(frozen=True)
class Attempt:
    """One ``open_connection`` call the pool made."""

    host: str
    port: int
    tls: bool
    server_hostname: str | None
    connect: pb.CommandConnect


class Brokers:
    """The fake ``open_connection``: one script per ``host:port``, every connection kept."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch):
        self.scripts: dict[str, Answer] = {}
        self.opened: list[FakeConnection] = []
        #: Every connection attempt, refused ones included.
        self.attempts: list[Attempt] = []
        monkeypatch.setattr(pool_module, "open_connection", self.open)

    async def open(
        self,
        host: str,
        port: int,
        core: ConnectionCore,
        *,
        ssl_context: ssl.SSLContext | None = None,
        server_hostname: str | None = None,
        **_: Any,
    ) -> FakeConnection:
        await asyncio.sleep(0)  # let concurrent callers meet the same attempt
        (connect,) = FrameDecoder().feed(core.data_to_send())  # what would go on the wire
        assert connect.command.type == _T.CONNECT
        c = connect.command.connect
        self.attempts.append(Attempt(host, port, ssl_context is not None, server_hostname, c))
        script = self.scripts.get(f"{host}:{port}")
        if script is None:
            raise ConnectionRefusedError(111, f"nothing listens on {host}:{port}")
        proxy_to = c.proxy_to_broker_url if c.HasField("proxy_to_broker_url") else None
        connection = FakeConnection(host, port, proxy_to, script)
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


def test_proxy_through_the_service_url_to_itself_is_the_lookup_connection(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Apache Pulsar standalone answers "through the service URL" with its own address:
    the producer shares the lookup's connection, with no proxy target (the Java client's
    ``ConnectionPool.createConnection`` sets one only when the two differ)."""
    brokers = Brokers(monkeypatch)
    brokers.scripts["svc:6650"] = lookup_answer("pulsar://svc:6650", proxy=True)
    pool = ConnectionPool("pulsar://svc:6650")

    async def lookup_and_connect() -> Any:
        address = await pool.lookup("t")
        assert address == BrokerAddress("pulsar://svc:6650")
        return await pool.get(address)

    connection = run(lookup_and_connect())
    assert connection.proxy_to is None and brokers.opened == [connection]
    assigned = pool.assigned_address(
        "pulsar://svc:6650", BrokerAddress("pulsar://svc:6650", proxy_to="old:6650")
    )
    assert assigned == BrokerAddress("pulsar://svc:6650")


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


# -- lookups: the edges of the redirect rules ------------------------------------------------------


def test_the_last_redirect_within_the_limit_is_followed(monkeypatch: pytest.MonkeyPatch) -> None:
    brokers = Brokers(monkeypatch)
    redirect = lookup_answer("pulsar://svc:6650", _Lookup.Redirect)
    found = lookup_answer("pulsar://owner:6650")
    answered = 0

    def answer(command: pb.BaseCommand) -> pb.BaseCommand:
        nonlocal answered
        answered += 1
        return redirect(command) if answered <= MAX_REDIRECTS else found(command)

    brokers.scripts["svc:6650"] = answer
    assert run(ConnectionPool("pulsar://svc:6650").lookup("t")) == BrokerAddress(
        "pulsar://owner:6650"
    )
    assert answered == MAX_REDIRECTS + 1
    assert len(brokers.opened) == 1  # every redirect to the same broker reuses its connection


def test_a_redirect_to_a_proxied_broker_is_looked_up_through_the_proxy(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """BinaryProtoLookupService.getBroker: a Redirect with ``proxy_through_service_url`` is
    asked again on a service-URL connection that names the broker as its proxy target."""
    brokers = Brokers(monkeypatch)
    redirect = lookup_answer("pulsar://b:6650", _Lookup.Redirect, authoritative=True, proxy=True)
    found = lookup_answer("pulsar://b:6650", proxy=True)

    def answer(command: pb.BaseCommand) -> pb.BaseCommand:
        proxied = brokers.opened[-1].proxy_to is not None  # the connection being asked
        return found(command) if proxied else redirect(command)

    brokers.scripts["svc:6650"] = answer
    address = run(ConnectionPool("pulsar://svc:6650").lookup("t"))
    assert address == BrokerAddress("pulsar://svc:6650", proxy_to="b:6650")
    asked = [
        (c.host, c.proxy_to, [r.lookupTopic.authoritative for r in c.requests])
        for c in brokers.opened
    ]
    assert asked == [("svc", None, [False]), ("svc", "b:6650", [True])]


def test_tls_takes_the_tls_url_and_names_each_host_for_verification(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def answer(url_tls: str, response: int) -> Answer:
        def reply(command: pb.BaseCommand) -> pb.BaseCommand:
            command_reply = lookup_answer("pulsar://plain-only:6650", response)(command)
            command_reply.lookupTopicResponse.brokerServiceUrlTls = url_tls
            return command_reply

        return reply

    brokers = Brokers(monkeypatch)
    brokers.scripts["svc:6651"] = answer("pulsar+ssl://owner:6651", _Lookup.Redirect)
    brokers.scripts["owner:6651"] = answer("pulsar+ssl://owner:6651", _Lookup.Connect)
    address = run(ConnectionPool("pulsar+ssl://svc:6651").lookup("t"))
    assert address == BrokerAddress("pulsar+ssl://owner:6651")
    assert [(a.host, a.port, a.tls, a.server_hostname) for a in brokers.attempts] == [
        ("svc", 6651, True, "svc"),
        ("owner", 6651, True, "owner"),
    ]


# -- connections: failures, service hosts, credentials ---------------------------------------------


def test_a_refused_connection_raises_for_every_waiting_caller_and_the_next_get_tries_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    brokers = Brokers(monkeypatch)
    pool = ConnectionPool("pulsar://svc:6650")
    address = pool.service_address()

    async def scenario() -> None:
        refused = await asyncio.gather(pool.get(address), pool.get(address), return_exceptions=True)
        assert [type(error) for error in refused] == [ConnectionRefusedError] * 2
        assert len(brokers.attempts) == 1  # one shared attempt
        brokers.scripts["svc:6650"] = lookup_answer("pulsar://svc:6650")
        assert (await pool.get(address)).is_usable

    run(scenario())
    assert len(brokers.attempts) == 2 and len(brokers.opened) == 1


def test_the_service_url_hosts_are_used_in_turn(monkeypatch: pytest.MonkeyPatch) -> None:
    brokers = Brokers(monkeypatch)
    brokers.scripts["a:6650"] = brokers.scripts["b:6650"] = metadata_answer(2)
    pool = ConnectionPool("pulsar://a:6650,b")

    async def scenario() -> None:
        for _ in range(3):
            assert await pool.partition_count("t") == 2

    run(scenario())
    assert [a.host for a in brokers.attempts] == ["a", "b"]  # then a's connection again
    assert [len(c.requests) for c in brokers.opened] == [2, 1]


def test_a_service_host_that_is_down_is_skipped_within_one_lookup(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """One broker of a multi-host service URL is down: lookups and metadata requests go on
    to the next host at once (the Java client's lookup picks the next host too), and fail
    only when no host answers; hosts that refused are asked last meanwhile."""
    brokers = Brokers(monkeypatch)
    brokers.scripts["c:6650"] = lookup_answer("pulsar://owner:6650")
    pool = ConnectionPool("pulsar://a:6650,b:6650,c:6650")  # a and b refuse
    assert run(pool.lookup("t")) == BrokerAddress("pulsar://owner:6650")
    assert [a.host for a in brokers.attempts] == ["a", "b", "c"]
    brokers.scripts.clear()
    brokers.opened[0].close()  # c goes down too
    with pytest.raises(ServiceUnreachable, match="no host of the service URL answers"):
        run(pool.lookup("t"))
    assert [a.host for a in brokers.attempts[3:]] == ["c", "a", "b"]  # each tried once


def test_each_new_connection_asks_the_auth_provider_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    tokens = iter([b"token-1", b"token-2"])

    class Rotating:
        method_name = "token"

        async def ready(self) -> None:
            """Nothing to wait for (an OAuth2 provider waits for its first token here)."""

        def auth_data(self) -> bytes:
            return next(tokens)

    brokers = Brokers(monkeypatch)
    brokers.scripts["svc:6650"] = lookup_answer("pulsar://svc:6650")
    pool = ConnectionPool("pulsar://svc:6650", auth=Rotating())

    async def scenario() -> None:
        first = await pool.get(pool.service_address())
        assert await pool.get(pool.service_address()) is first  # no new credentials
        first.close()  # lost: the next get connects anew
        await pool.get(pool.service_address())

    run(scenario())
    assert [(a.connect.auth_method_name, a.connect.auth_data) for a in brokers.attempts] == [
        ("token", b"token-1"),
        ("token", b"token-2"),
    ]


def test_concurrent_lookups_each_try_every_host_and_a_refusing_one_is_set_aside(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Hosts [down, up], eight partitions looked up at once (a topic's producers start
    together): every lookup succeeds.  They used to share one walk through the hosts, so two
    of the eight met the down host twice and failed.  The down host is then asked last while
    it is set aside (``PulsarServiceNameResolver.markHostAvailability``), and in turn again
    once its time is up."""
    brokers = Brokers(monkeypatch)
    brokers.scripts["up:6650"] = lookup_answer("pulsar://owner:6650")
    clock = FakeClock()
    pool = ConnectionPool("pulsar://down:6650,up:6650", clock=clock)

    async def lookups(count: int) -> list[Any]:
        topics = [f"t-partition-{i}" for i in range(count)]
        return await asyncio.gather(*(pool.lookup(t) for t in topics), return_exceptions=True)

    assert run(lookups(8)) == [BrokerAddress("pulsar://owner:6650")] * 8
    assert [a.host for a in brokers.attempts].count("down") == 1  # one attempt, shared
    before = len(brokers.attempts)
    assert run(lookups(8)) == [BrokerAddress("pulsar://owner:6650")] * 8
    assert "down" not in [a.host for a in brokers.attempts[before:]]  # set aside
    clock.advance(FIRST_ASIDE_S)
    before = len(brokers.attempts)
    assert run(lookups(2)) == [BrokerAddress("pulsar://owner:6650")] * 2
    assert [a.host for a in brokers.attempts[before:]].count("down") == 1  # asked again
