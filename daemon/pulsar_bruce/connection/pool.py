"""Connections by broker, topic lookups and partitioned-topic metadata.

One connection per (broker address, proxy target) is shared by everything on
that broker.  Lookups follow Pulsar's binary lookup protocol: ask the service
URL, follow ``Redirect`` answers (carrying ``authoritative`` along) up to
:data:`MAX_REDIRECTS` times, and honour ``proxy_through_service_url`` by
connecting to the service URL with ``proxy_to_broker_url`` set.  Every lookup
names the advertised listener, when one is configured.  A topic that migrated
to another cluster is looked up at that cluster's service URL instead.  A
service URL naming several brokers is tried host after host, each lookup in an
order of its own, a host that refused set aside for a while
(``service_hosts.py``): one broker down does not fail a lookup while another
answers.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import urlsplit

from pulsar_bruce.connection.auth import AuthProvider
from pulsar_bruce.connection.broker_connection import (
    BrokerConnection,
    ConnectionClosedError,
    ServerError,
    open_connection,
)
from pulsar_bruce.connection.protocol import ConnectionCore
from pulsar_bruce.connection.service_hosts import ServiceHosts, ServiceUnreachable
from pulsar_bruce.frame import commands
from pulsar_bruce.frame import pulsar_api_pb2 as pb
from pulsar_bruce.model.service_url import ServiceUrl

log = logging.getLogger(__name__)

MAX_REDIRECTS = 20
_Lookup = pb.CommandLookupTopicResponse


class TopicLookupError(Exception):
    """A lookup or metadata request failed; ``error`` is the broker's ServerError code, if any."""

    def __init__(self, message: str, error: int | None = None):
        super().__init__(message)
        self.error = error


@dataclass(frozen=True, slots=True)
class BrokerAddress:
    """Where a topic's producer connects: a broker URL, possibly through a proxy."""

    url: str
    proxy_to: str | None = None


class ConnectionPool:
    """Shared broker connections plus the lookup and metadata requests that need them."""

    def __init__(
        self,
        service_url: str,
        *,
        ssl_context: ssl.SSLContext | None = None,
        auth_method_name: str | None = None,
        auth_data: bytes | None = None,
        auth: AuthProvider | None = None,
        advertised_listener: str | None = None,
        clock: Callable[[], float] = time.monotonic,
    ):
        """``clock``: now, in seconds, for how long a refusing service host is set aside."""
        self.service = ServiceUrl.parse(service_url)
        self._clock = clock
        self._service_hosts = ServiceHosts(self.service.hosts, clock)
        self._ssl_context = ssl_context
        if self.service.tls and ssl_context is None:
            self._ssl_context = ssl.create_default_context()
        self._auth_method_name = auth_method_name
        self._auth_data = auth_data
        #: Asked for credentials on every new connection (a token file may have rotated).
        self._auth = auth
        #: Sent in every lookup: which of the brokers' listeners (addresses) to answer with.
        self.advertised_listener = advertised_listener or None
        self._clusters: dict[str, tuple[ServiceUrl, ServiceHosts]] = {}
        self._connections: dict[BrokerAddress, BrokerConnection] = {}
        self._connecting: dict[BrokerAddress, asyncio.Task[BrokerConnection]] = {}

    # -- connections --------------------------------------------------------------

    def service_address(self) -> BrokerAddress:
        """The host of the service URL the next lookup asks first."""
        return BrokerAddress(self.service.url_for(*self._service_hosts.order()[0]))

    def _hosts(self, cluster_url: str | None) -> tuple[ServiceUrl, ServiceHosts]:
        """Our service URL's hosts, or another cluster's (a topic migrated there)."""
        if cluster_url is None:
            return self.service, self._service_hosts
        if cluster_url not in self._clusters:
            cluster = ServiceUrl.parse(cluster_url)
            self._clusters[cluster_url] = (cluster, ServiceHosts(cluster.hosts, self._clock))
        return self._clusters[cluster_url]

    async def _service_connection(
        self, cluster_url: str | None = None
    ) -> tuple[BrokerAddress, BrokerConnection]:
        """A connection to a host of the service URL (``cluster_url``'s, if given): every host
        asked at most once, in this call's own order (``ServiceHosts.order``), so concurrent
        lookups never use up each other's hosts.  None reachable: :class:`ServiceUnreachable`,
        or the last host's refusal of our ``Connect`` (its text names the broker's error)."""
        service, hosts = self._hosts(cluster_url)
        failures: list[str] = []
        last: Exception | None = None
        for host in hosts.order():
            address = BrokerAddress(service.url_for(*host))
            try:
                connection = await self.get(address)
            except (OSError, ConnectionClosedError) as exc:
                hosts.refused(host)
                failures.append(f"{address.url}: {exc or type(exc).__name__}")
                last = exc
                log.debug("service host %s: %s; trying the next", address.url, exc)
                continue
            hosts.answered(host)
            return address, connection
        if isinstance(last, ConnectionClosedError):
            raise last
        raise ServiceUnreachable(f"no host of the service URL answers ({'; '.join(failures)})")

    @staticmethod
    def assigned_address(url: str, previous: BrokerAddress | None) -> BrokerAddress:
        """Where to reach the broker a CloseProducer assigned: directly, or through the same
        proxy when the producer was proxied (as the Java client's ``grabCnx`` does)."""
        if previous is not None and previous.proxy_to is not None:
            return _through(previous.url, url)
        return BrokerAddress(url)

    async def get(self, address: BrokerAddress) -> BrokerConnection:
        """A usable connection to ``address``; concurrent callers share one attempt."""
        existing = self._connections.get(address)
        if existing is not None and existing.is_usable:
            return existing
        task = self._connecting.get(address)
        if task is None:
            task = asyncio.get_running_loop().create_task(self._open(address))
            self._connecting[address] = task
        return await asyncio.shield(task)

    async def _open(self, address: BrokerAddress) -> BrokerConnection:
        try:
            parsed = urlsplit(address.url)
            host = parsed.hostname or ""
            port = parsed.port or (6651 if self.service.tls else 6650)
            auth = self._auth
            if auth is not None:
                await auth.ready()  # an OAuth2 token may still be on its way
            core = ConnectionCore(
                asyncio.get_running_loop().time(),
                proxy_to_broker_url=address.proxy_to,
                auth_method_name=auth.method_name if auth else self._auth_method_name,
                auth_data=auth.auth_data() if auth else self._auth_data,
                auth_refresh=auth.auth_data if auth else None,
            )
            connection = await open_connection(
                host, port, core, ssl_context=self._ssl_context, server_hostname=host
            )
            log.info(
                "connected to %s%s (max message size %d)",
                address.url,
                f" via proxy for {address.proxy_to}" if address.proxy_to else "",
                core.max_message_size,
            )
            self._connections[address] = connection
            return connection
        finally:
            self._connecting.pop(address, None)

    @property
    def connections(self) -> list[BrokerConnection]:
        return [c for c in self._connections.values() if c.is_usable]

    def close_all(self) -> None:
        for connection in self._connections.values():
            connection.close()
        self._connections.clear()

    # -- lookups ----------------------------------------------------------------------

    async def partition_count(self, topic: str) -> int:
        """Number of partitions of ``topic`` (0: not partitioned)."""
        _, connection = await self._service_connection()
        request_id = connection.next_request_id()
        try:
            response = await connection.request(
                request_id, commands.partitioned_metadata(topic, request_id)
            )
        except ServerError as exc:
            raise TopicLookupError(f"partitioned metadata for {topic}: {exc}", exc.error) from exc
        answer = response.partitionMetadataResponse
        if answer.response == pb.CommandPartitionedTopicMetadataResponse.Failed:
            raise TopicLookupError(
                f"partitioned metadata for {topic}: "
                f"{pb.ServerError.Name(answer.error)}: {answer.message}",
                answer.error,
            )
        return int(answer.partitions)

    async def lookup(self, topic: str, cluster_url: str | None = None) -> BrokerAddress:
        """The broker that owns ``topic`` (a partition or non-partitioned topic).

        ``cluster_url``: ask that cluster instead of ours (the topic migrated there).
        """
        service, connection = await self._service_connection(cluster_url)
        target = service
        authoritative = False
        for redirects in range(MAX_REDIRECTS + 1):
            if redirects:
                connection = await self.get(target)
            request_id = connection.next_request_id()
            try:
                response = await connection.request(
                    request_id,
                    commands.lookup(topic, request_id, authoritative, self.advertised_listener),
                )
            except ServerError as exc:
                raise TopicLookupError(f"lookup of {topic}: {exc}", exc.error) from exc
            answer = response.lookupTopicResponse
            if answer.response == _Lookup.Failed:
                raise TopicLookupError(
                    f"lookup of {topic}: {pb.ServerError.Name(answer.error)}: {answer.message}",
                    answer.error,
                )
            broker_url = answer.brokerServiceUrlTls if self.service.tls else answer.brokerServiceUrl
            if not broker_url:
                raise TopicLookupError(f"lookup of {topic}: broker sent no service URL")
            found = (
                _through(service.url, broker_url)
                if answer.proxy_through_service_url
                else BrokerAddress(broker_url)
            )
            if answer.response == _Lookup.Connect:
                return found
            authoritative = answer.authoritative
            target = found
        raise TopicLookupError(f"lookup of {topic}: more than {MAX_REDIRECTS} redirects")


def _through(proxy_url: str, broker_url: str) -> BrokerAddress:
    """``broker_url`` reached through ``proxy_url``; directly when they are the same
    address (a standalone broker answers lookups with "through the service URL" and its
    own address), so one connection serves both, as the Java client's
    ``ConnectionPool.createConnection`` names a target broker only when they differ."""
    target = _host_port(broker_url)
    if _host_port(proxy_url) == target:
        return BrokerAddress(proxy_url)
    return BrokerAddress(proxy_url, proxy_to=target)


def _host_port(url: str) -> str:
    """``pulsar://h:p`` -> ``h:p`` (the form ``proxy_to_broker_url`` takes)."""
    parsed = urlsplit(url)
    return f"{parsed.hostname}:{parsed.port or (6651 if url.startswith('pulsar+ssl') else 6650)}"
