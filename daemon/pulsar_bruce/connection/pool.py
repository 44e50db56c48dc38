"""Connections by broker, topic lookups and partitioned-topic metadata.

One connection per (broker address, proxy target) is shared by everything on
that broker.  Lookups follow Pulsar's binary lookup protocol: ask the service
URL, follow ``Redirect`` answers (carrying ``authoritative`` along) up to
:data:`MAX_REDIRECTS` times, and honour ``proxy_through_service_url`` by
connecting to the service URL with ``proxy_to_broker_url`` set.  Every lookup
names the advertised listener, when one is configured.  A topic that migrated
to another cluster is looked up at that cluster's service URL instead.  A
service URL naming several brokers is tried host after host: one broker down
does not fail a lookup while another answers.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import ssl
from collections.abc import Iterator
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
    ):
        self.service = ServiceUrl.parse(service_url)
        self._service_hosts = itertools.cycle(self.service.hosts)
        self._ssl_context = ssl_context
        if self.service.tls and ssl_context is None:
            self._ssl_context = ssl.create_default_context()
        self._auth_method_name = auth_method_name
        self._auth_data = auth_data
        #: Asked for credentials on every new connection (a token file may have rotated).
        self._auth = auth
        #: Sent in every lookup: which of the brokers' listeners (addresses) to answer with.
        self.advertised_listener = advertised_listener or None
        self._clusters: dict[str, tuple[ServiceUrl, Iterator[tuple[str, int]]]] = {}
        self._connections: dict[BrokerAddress, BrokerConnection] = {}
        self._connecting: dict[BrokerAddress, asyncio.Task[BrokerConnection]] = {}

    # -- connections --------------------------------------------------------------

    def service_address(self) -> BrokerAddress:
        host, port = next(self._service_hosts)
        return BrokerAddress(self.service.url_for(host, port))

    def _cluster(self, url: str) -> BrokerAddress:
        """Another cluster's service URL, its hosts taken in turn like ours."""
        if url not in self._clusters:
            cluster = ServiceUrl.parse(url)
            self._clusters[url] = (cluster, itertools.cycle(cluster.hosts))
        cluster, hosts = self._clusters[url]
        return BrokerAddress(cluster.url_for(*next(hosts)))

    async def _service_connection(
        self, cluster_url: str | None = None
    ) -> tuple[BrokerAddress, BrokerConnection]:
        """A connection to a host of the service URL (``cluster_url``'s, if given), trying
        each host once before the last one's failure is raised."""
        hosts = self.service.hosts if cluster_url is None else ServiceUrl.parse(cluster_url).hosts
        for attempt in range(len(hosts)):
            address = self.service_address() if cluster_url is None else self._cluster(cluster_url)
            try:
                return address, await self.get(address)
            except (OSError, ConnectionClosedError) as exc:
                if attempt == len(hosts) - 1:
                    raise
                log.debug("service host %s: %s; trying the next", address.url, exc)
        raise AssertionError("a service URL has at least one host")

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
