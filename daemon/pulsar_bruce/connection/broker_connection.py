"""One TCP (or TLS) connection to a broker: the asyncio edge around :class:`ConnectionCore`.

Shared by every producer whose partition lives on that broker.  Requests
(lookups, producer creation) are matched by ``request_id`` to futures; producer
events (receipts, send errors, close-producer, topic-migrated) are routed by
``producer_id`` to the listener the producer registered.

Where the broker says a producer should go next, the URL matching this
connection's security is passed on (``...Tls`` on a TLS connection, as the
Java and Go clients choose): ``CloseProducer`` may name the broker a bundle
was assigned to (the extensible load manager), ``TopicMigrated`` the cluster
a topic moved to (blue-green migration, protocol v20).
"""

from __future__ import annotations

import asyncio
import logging
import ssl
import time
from collections.abc import Callable
from typing import Protocol

from pulsar_bruce.connection.protocol import (
    ConnectionCore,
    ConnectionState,
    HandshakeError,
    KeepaliveAction,
)
from pulsar_bruce.frame import pulsar_api_pb2 as pb
from pulsar_bruce.frame.codec import FrameError
from pulsar_bruce.model.service_url import ServiceUrl

log = logging.getLogger(__name__)
_T = pb.BaseCommand

#: Seconds between keep-alive checks; a broker silent for two of them is dropped.
KEEPALIVE_INTERVAL_S = 30.0
CONNECT_TIMEOUT_S = 10.0
REQUEST_TIMEOUT_S = 30.0


class ConnectionClosedError(Exception):
    """The connection went away before the answer came."""


class ProducerClosedError(ConnectionClosedError):
    """The broker closed the producer while we were creating it (e.g. its topic migrated)."""


class ServerError(Exception):
    """The broker answered a request with an error."""

    def __init__(self, error: int, message: str):
        self.error = error
        self.error_name = (
            pb.ServerError.Name(error) if error in pb.ServerError.values() else str(error)
        )
        super().__init__(f"{self.error_name}: {message}")


class ProducerListener(Protocol):
    """What a connection tells the producers that live on it."""

    def on_receipt(self, receipt: pb.CommandSendReceipt) -> None: ...
    def on_send_error(self, error: pb.CommandSendError) -> None: ...
    def on_close_producer(self, assigned_url: str | None) -> None:
        """The broker closed the producer; ``assigned_url``: reconnect there, no lookup."""

    def on_topic_migrated(self, cluster_url: str) -> None:
        """The topic moved to another cluster: look it up at ``cluster_url`` from now on."""

    def on_connection_lost(self) -> None: ...


class BrokerConnection(asyncio.Protocol):
    """asyncio protocol for one broker connection."""

    def __init__(
        self,
        address: str,
        core: ConnectionCore,
        keepalive_interval: float,
        tls: bool = False,
        *,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.address = address
        self.tls = tls
        self.core = core
        self.keepalive_interval = keepalive_interval
        #: Now, in seconds: when the broker was last heard, when a Ping is due.
        self.clock = clock
        self.transport: asyncio.Transport | None = None
        self.connected: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.closed: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._requests: dict[int, asyncio.Future[pb.BaseCommand]] = {}
        self._producers: dict[int, ProducerListener] = {}
        #: producer_id -> request_id of its pending creation (failed by a CloseProducer).
        self._creating: dict[int, int] = {}
        self._keepalive: asyncio.TimerHandle | None = None
        self._handlers: dict[int, Callable[[pb.BaseCommand], None]] = {
            _T.SEND_RECEIPT: self._on_send_receipt,
            _T.SEND_ERROR: self._on_send_error,
            _T.CLOSE_PRODUCER: self._on_close_producer,
            _T.TOPIC_MIGRATED: self._on_topic_migrated,
            _T.SUCCESS: self._on_response,
            _T.ERROR: self._on_response,
            _T.PRODUCER_SUCCESS: self._on_response,
            _T.LOOKUP_RESPONSE: self._on_response,
            _T.PARTITIONED_METADATA_RESPONSE: self._on_response,
        }

    # -- asyncio.Protocol -----------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # uvloop's is no asyncio.Transport
        self._flush_core()
        self._schedule_keepalive()

    def data_received(self, data: bytes) -> None:
        try:
            frames = self.core.receive(data, self.clock())
        except (FrameError, HandshakeError) as exc:
            self._fail(exc)
            return
        if self.core.state is ConnectionState.READY and not self.connected.done():
            self.connected.set_result(None)
        self._flush_core()
        handlers = self._handlers
        for frame in frames:
            handler = handlers.get(frame.command.type)
            if handler is None:
                log.debug("%s: ignoring %s", self.address, _T.Type.Name(frame.command.type))
            else:
                handler(frame.command)

    def connection_lost(self, exc: Exception | None) -> None:
        self._fail(exc or ConnectionClosedError(f"connection to {self.address} closed"))

    # -- requests and producers ---------------------------------------------------

    @property
    def is_usable(self) -> bool:
        return self.core.state is ConnectionState.READY and not self.closed.done()

    def next_request_id(self) -> int:
        return self.core.next_request_id()

    async def request(
        self,
        request_id: int,
        frame: bytes,
        *,
        producer_id: int | None = None,
        timeout: float | None = None,
    ) -> pb.BaseCommand:
        """Write a request frame and wait (``timeout``, default :data:`REQUEST_TIMEOUT_S`)
        for the response carrying ``request_id``.

        ``producer_id``: the request creates that producer; a CloseProducer for it
        fails the request at once (the Java broker answers nothing else then).
        """
        if not self.is_usable or self.transport is None:
            raise ConnectionClosedError(f"connection to {self.address} is not usable")
        future: asyncio.Future[pb.BaseCommand] = asyncio.get_running_loop().create_future()
        self._requests[request_id] = future
        if producer_id is not None:
            self._creating[producer_id] = request_id
        self.transport.write(frame)
        try:
            response = await asyncio.wait_for(future, timeout or REQUEST_TIMEOUT_S)
        finally:
            self._requests.pop(request_id, None)
            if producer_id is not None and self._creating.get(producer_id) == request_id:
                del self._creating[producer_id]
        if response.type == _T.ERROR:
            raise ServerError(response.error.error, response.error.message)
        return response

    def register_producer(self, producer_id: int, listener: ProducerListener) -> None:
        self._producers[producer_id] = listener

    def unregister_producer(self, producer_id: int) -> None:
        self._producers.pop(producer_id, None)

    def write(self, data: bytes) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.write(data)

    def writelines(self, frames: list[bytes]) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.writelines(frames)

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()

    def abort(self, reason: str) -> None:
        """Drop the connection now (e.g. after a receipt we cannot explain)."""
        log.warning("%s: closing connection: %s", self.address, reason)
        if self.transport is not None:
            self.transport.abort()

    # -- frame handlers -------------------------------------------------------------

    def _on_response(self, command: pb.BaseCommand) -> None:
        request_id = _response_request_id(command)
        future = self._requests.get(request_id)
        if future is None or future.done():
            return
        if command.type == _T.PRODUCER_SUCCESS and not command.producer_success.producer_ready:
            return  # waiting for exclusive access; a second ProducerSuccess follows
        future.set_result(command)

    def _on_send_receipt(self, command: pb.BaseCommand) -> None:
        listener = self._producers.get(command.send_receipt.producer_id)
        if listener is not None:
            listener.on_receipt(command.send_receipt)

    def _on_send_error(self, command: pb.BaseCommand) -> None:
        listener = self._producers.get(command.send_error.producer_id)
        if listener is not None:
            listener.on_send_error(command.send_error)

    def _on_close_producer(self, command: pb.BaseCommand) -> None:
        close = command.close_producer
        producer_id = close.producer_id
        assigned = self._pick_url(
            close.assignedBrokerServiceUrl, close.assignedBrokerServiceUrlTls, "assigned broker"
        )
        listener = self._producers.pop(producer_id, None)
        if listener is not None:
            listener.on_close_producer(assigned)
        creating = self._requests.get(self._creating.pop(producer_id, -1))
        if creating is not None and not creating.done():
            creating.set_exception(
                ProducerClosedError(
                    f"{self.address} closed producer {producer_id} while creating it"
                )
            )

    def _on_topic_migrated(self, command: pb.BaseCommand) -> None:
        migrated = command.topicMigrated
        if migrated.resource_type != pb.CommandTopicMigrated.Producer:
            return
        url = self._pick_url(migrated.brokerServiceUrl, migrated.brokerServiceUrlTls, "migrated")
        listener = self._producers.get(migrated.resource_id)
        if url is not None and listener is not None:
            listener.on_topic_migrated(url)

    def _pick_url(self, url: str, url_tls: str, what: str) -> str | None:
        """The URL for this connection's kind (TLS or not), if the broker sent a usable one."""
        chosen = url_tls if self.tls else url
        if not chosen:
            if url or url_tls:
                log.warning("%s: %s URL %r has no %s form", self.address, what,
                            url or url_tls, "TLS" if self.tls else "plain")  # fmt: skip
            return None
        try:
            ServiceUrl.parse(chosen)
        except ValueError as exc:
            log.warning("%s: ignoring %s URL: %s", self.address, what, exc)
            return None
        return chosen

    # -- internals --------------------------------------------------------------------

    def _flush_core(self) -> None:
        data = self.core.data_to_send()
        if data and self.transport is not None:
            self.transport.write(data)

    def _schedule_keepalive(self) -> None:
        loop = asyncio.get_running_loop()
        self._keepalive = loop.call_later(self.keepalive_interval, self._on_keepalive)

    def _on_keepalive(self) -> None:
        action = self.core.keepalive(self.clock(), self.keepalive_interval)
        if action is KeepaliveAction.CLOSE:
            self.abort("broker silent for two keep-alive intervals")
            return
        self._flush_core()
        self._schedule_keepalive()

    def _fail(self, exc: BaseException) -> None:
        if self.closed.done():
            return
        self.core.state = ConnectionState.CLOSED
        self.closed.set_result(None)
        if self._keepalive is not None:
            self._keepalive.cancel()
        if not self.connected.done():
            self.connected.set_exception(ConnectionClosedError(str(exc)))
            self.connected.exception()  # mark retrieved
        for future in self._requests.values():
            if not future.done():
                future.set_exception(ConnectionClosedError(str(exc)))
        self._requests.clear()
        self._creating.clear()
        producers = list(self._producers.values())
        self._producers.clear()
        for listener in producers:
            listener.on_connection_lost()
        if self.transport is not None:
            self.transport.abort()


def _response_request_id(command: pb.BaseCommand) -> int:
    kind = command.type
    if kind == _T.SUCCESS:
        return command.success.request_id
    if kind == _T.ERROR:
        return command.error.request_id
    if kind == _T.PRODUCER_SUCCESS:
        return command.producer_success.request_id
    if kind == _T.LOOKUP_RESPONSE:
        return command.lookupTopicResponse.request_id
    if kind == _T.PARTITIONED_METADATA_RESPONSE:
        return command.partitionMetadataResponse.request_id
    return -1


async def open_connection(
    host: str,
    port: int,
    core: ConnectionCore,
    *,
    ssl_context: ssl.SSLContext | None = None,
    server_hostname: str | None = None,
    keepalive_interval: float = KEEPALIVE_INTERVAL_S,
) -> BrokerConnection:
    """Connect and complete the Pulsar handshake."""
    loop = asyncio.get_running_loop()
    address = f"{host}:{port}"
    _, protocol = await asyncio.wait_for(
        loop.create_connection(
            lambda: BrokerConnection(address, core, keepalive_interval, ssl_context is not None),
            host,
            port,
            ssl=ssl_context,
            server_hostname=server_hostname if ssl_context else None,
        ),
        CONNECT_TIMEOUT_S,
    )
    try:
        await asyncio.wait_for(asyncio.shield(protocol.connected), CONNECT_TIMEOUT_S)
    except BaseException:
        protocol.close()
        raise
    return protocol
