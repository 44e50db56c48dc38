"""The daemon: startup, main loop, graceful shutdown (in the manner of uvicorn's server.py).

Startup opens the metrics endpoint and the datagram socket, then reads until
SIGTERM or SIGINT.  Shutdown stops reading, drains what is already queued in
the socket, seals and writes every batch, waits for receipts up to
``shutdown_timeout_s``, discards the rest as ``shutdown`` and returns.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import hashlib
import itertools
import logging
import signal
import socket
import time
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

from pulsar_bruce import reasons
from pulsar_bruce.config import TOPIC_OPTIONS, Config, ConfigError
from pulsar_bruce.connection.broker_connection import ConnectionClosedError, ServerError
from pulsar_bruce.connection.pool import ConnectionPool, TopicLookupError
from pulsar_bruce.connection.security import ConnectionSecurity, SecuritySetupError
from pulsar_bruce.input.socket_reader import DatagramReader
from pulsar_bruce.input.stream_server import StreamServer
from pulsar_bruce.input.unix_sockets import open_unix_socket
from pulsar_bruce.metrics.http import MetricsServer
from pulsar_bruce.metrics.registry import Metrics
from pulsar_bruce.metrics.stats import Stats
from pulsar_bruce.metrics.status import status_document
from pulsar_bruce.parse.topic import is_partition_name, partition_name
from pulsar_bruce.producer.backoff import Backoff
from pulsar_bruce.producer.driver import DeliveryPolicy, ProducerDriver
from pulsar_bruce.producer.faults import is_permanent
from pulsar_bruce.producer.partition_producer import PartitionProducer
from pulsar_bruce.route.forwarder import Forwarder
from pulsar_bruce.route.router import Topic
from pulsar_bruce.route.topic_settings import TopicConfigurator
from pulsar_bruce.service import systemd
from pulsar_bruce.spool.spooler import Spooler
from pulsar_bruce.spool.store import SpoolStore

log = logging.getLogger(__name__)

_SHUTDOWN_POLL_S = 0.02


class Server:
    """Owns every part of a running daemon; :meth:`serve` runs it until a stop signal."""

    def __init__(self, config: Config, reload: Callable[[], Config] | None = None):
        self.config = config
        self._reload = reload
        self.stats = Stats()
        self.topic_settings = TopicConfigurator(config)
        self.forwarder = Forwarder(
            self.stats,
            self,
            buffer_max_bytes=config.buffer_max_bytes,
            max_message_bytes=self.topic_settings.largest_message_bytes(),
        )
        self._rate_refills: dict[str, asyncio.TimerHandle] = {}
        self.spooler: Spooler | None = None
        self.stream_server: StreamServer | None = None
        self._activated_stream: socket.socket | None = None
        if config.spool_dir:
            self.spooler = Spooler(
                SpoolStore(config.spool_dir, config.spool_max_bytes, config.spool_fsync),
                self.forwarder,
                broker_reachable=lambda: bool(self.pool.connections),
                after_flush=self._flush_dirty,
                unreachable_after_s=config.spool_after_s,
            )
        if config.discard_log:
            from pulsar_bruce.metrics.discard_log import DiscardLog  # optional, lazily

            self.forwarder.discard_log = DiscardLog(
                config.discard_log, config.discard_log_max_bytes, config.discard_log_archives
            )
        self.producer_name = stable_producer_name(config.producer_name_prefix, config.socket)
        self.delivery = DeliveryPolicy(
            receipt_timeout_s=config.receipt_timeout_s,
            send_timeout_s=config.send_timeout_s,
            max_send_attempts=config.max_send_attempts,
        )
        # TLS context and credentials, built once (ConfigError naming the option if unusable).
        self.security = connection_security(config)
        self.pool = ConnectionPool(
            config.service_url, ssl_context=self.security.ssl_context, auth=self.security.auth
        )
        self.metrics = Metrics(
            self.stats,
            lambda: self.forwarder.topics_by_name.values(),
            lambda: len(self.pool.connections),
        )
        self.drivers: dict[int, ProducerDriver] = {}
        self._dirty: set[ProducerDriver] = set()
        self._producer_ids = itertools.count(1)
        self._tasks: set[asyncio.Task[None]] = set()
        self._stop = asyncio.Event()
        self.reader: DatagramReader | None = None
        self.metrics_server: MetricsServer | None = None
        self.started = asyncio.Event()
        self.started_at = time.time()
        self.notifier = systemd.Notifier.from_environ()
        self.socket_activated = False
        self.socket_name = config.socket

    # -- main loop ------------------------------------------------------------------

    async def serve(self) -> None:
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, self.request_stop, signum)
        loop.add_signal_handler(signal.SIGHUP, self.reload_topic_settings)
        if self.config.metrics_listen is not None:
            host, port = self.config.metrics_listen
            self.metrics_server = MetricsServer(
                self.metrics.registry, host, port, status=self.status_document
            )
            await self.metrics_server.start()
        sock = self._open_input_socket()
        self.reader = DatagramReader(
            sock,
            self.forwarder.handle_datagram,
            self._flush_dirty,
            self.forwarder.max_message_bytes,
        )
        self.reader.start()
        stream_path = self.config.stream_socket_path
        if stream_path is not None or self._activated_stream is not None:
            self.stream_server = StreamServer(
                stream_path or "",
                self.config.socket_mode,
                self.forwarder,
                self._flush_dirty,
                group=self.config.socket_group,
            )
            await self.stream_server.start(self._activated_stream)
        if self.spooler is not None:
            self.spooler.open()
            self._spawn(self.spooler.run())
        if self.config.metadata_refresh_s > 0:
            self._spawn(self._refresh_metadata_periodically())
        if self.notifier.enabled:
            self._spawn(self._notify_periodically())
        log.info(
            "pulsar-bruce receiving on %s%s, forwarding to %s, metrics on %s",
            self.socket_name,
            " (socket activation)" if self.socket_activated else "",
            self.config.service_url,
            "{}:{}".format(*self.config.metrics_listen) if self.config.metrics_listen else "off",
        )
        for warning in self.security.warnings:
            log.warning("%s", warning)
        self.started.set()
        self.notifier.ready(self._status())
        await self._stop.wait()
        await self.shutdown()

    def status_document(self) -> dict[str, Any]:
        return status_document(
            started_at=self.started_at,
            socket=self.socket_name,
            service_url=self.config.service_url,
            stats=self.stats,
            topics=self.forwarder.topics_by_name.values(),
            connections=[c.address for c in self.pool.connections],
            recent_rejects=self.forwarder.recent_rejects,
        )

    def request_stop(self, signum: int | None = None) -> None:
        if signum is not None and not self._stop.is_set():
            log.info("received %s, shutting down", signal.Signals(signum).name)
        self._stop.set()

    async def shutdown(self) -> None:
        self.notifier.stopping(self._status())
        reader = self.reader
        if reader is not None:
            if not self.socket_activated:  # systemd's socket outlives us, and keeps queueing
                with contextlib.suppress(OSError):
                    Path(self.config.socket).unlink()
            # What senders queued before we stopped is ours to deliver.
            reader.close_after_final_drain(refuse_new=not self.socket_activated)
        if self.stream_server is not None:
            self.stream_server.stop_reading()
        if self.spooler is not None:
            self.spooler.stop_replaying()  # what is on disk stays there for the next start
        self.forwarder.seal_all(self.batch_sealed)
        self._flush_dirty()
        deadline = time.monotonic() + self.config.shutdown_timeout_s
        stats = self.stats
        while stats.buffered_messages > stats.spooled_messages and time.monotonic() < deadline:
            await asyncio.sleep(_SHUTDOWN_POLL_S)
        if self.spooler is not None and stats.buffered_messages > stats.spooled_messages:
            spooled = self.spooler.shutdown()
            if spooled:
                log.warning(
                    "shutdown timeout: %d unacknowledged messages kept in the spool", spooled
                )
        elif self.spooler is not None:
            self.spooler.shutdown()
        left = self.forwarder.discard_everything(reasons.SHUTDOWN)
        if left:
            log.warning("shutdown timeout: discarded %d unacknowledged messages", left)
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await asyncio.gather(*(driver.stop() for driver in self.drivers.values()))
        self.pool.close_all()
        if self.stream_server is not None:
            await self.stream_server.stop()
        if self.metrics_server is not None:
            await self.metrics_server.stop()
        log.info(
            "stopped: received %d, acked %d, discarded %d",
            self.stats.received,
            self.stats.acked,
            sum(self.stats.discarded.values()),
        )

    def _open_input_socket(self) -> socket.socket:
        """The datagram socket systemd passed us (socket activation), else our own at --socket."""
        passed, self._activated_stream = systemd.activated_sockets()
        if passed is not None:
            passed.setblocking(False)
            self.socket_activated = True
            self.socket_name = systemd.socket_name(passed)
            return passed
        return open_unix_socket(
            self.config.socket, socket.SOCK_DGRAM, self.config.socket_mode, self.config.socket_group
        )

    # -- systemd notifications ---------------------------------------------------------

    def _status(self) -> str:
        stats = self.stats
        return systemd.status_line(
            "stopping" if self._stop.is_set() else f"receiving on {self.socket_name}",
            stats.buffered_messages,
            len(self.pool.connections),
            stats.received,
            stats.acked,
            sum(stats.discarded.values()),
        )

    async def _notify_periodically(self) -> None:
        """STATUS= every few seconds; WATCHDOG=1 pings from the event loop itself."""
        while True:
            await asyncio.sleep(self.notifier.tick_s)
            self.notifier.tick(self._status())

    # -- ForwarderEvents -------------------------------------------------------------

    def topic_added(self, topic: Topic) -> None:
        self._apply_topic_settings(topic)
        self._spawn(self._resolve_partitions(topic))

    def _apply_topic_settings(self, topic: Topic) -> None:
        settings = self.topic_settings.apply(topic)
        timer = self._rate_refills.pop(topic.name, None)
        if timer is not None:
            timer.cancel()
        if settings.rate_limit_messages:
            self._schedule_refill(topic, settings.rate_limit_interval_s)

    def _schedule_refill(self, topic: Topic, interval_s: float) -> None:
        def refill() -> None:
            self.topic_settings.refill(topic)
            self._schedule_refill(topic, interval_s)

        loop = asyncio.get_running_loop()
        self._rate_refills[topic.name] = loop.call_later(interval_s, refill)

    def reload_topic_settings(self) -> None:
        """SIGHUP: re-read the configuration and apply its per-topic settings, dropping nothing."""
        if self._reload is None:
            return
        try:
            config = self._reload()
        except ConfigError as exc:
            log.error("SIGHUP: configuration not reloaded: %s", exc)
            return
        self.topic_settings.reconfigure(config, [])
        for topic in self.forwarder.topics_by_name.values():
            self._apply_topic_settings(topic)
        ignored = [
            f.name
            for f in dataclasses.fields(config)
            if getattr(config, f.name) != getattr(self.config, f.name)
            and f.name not in (*TOPIC_OPTIONS, "topic_overrides")
        ]
        if ignored:
            log.warning("SIGHUP: %s take effect only on restart", ", ".join(ignored))
        self.forwarder.max_message_bytes = min(
            self.forwarder.max_message_bytes, self.topic_settings.largest_message_bytes()
        )  # the socket buffer cannot grow without a restart
        log.info(
            "SIGHUP: per-topic settings reloaded (%d overrides, %d topics)",
            len(config.topic_overrides),
            len(self.forwarder.topics_by_name),
        )

    def batch_opened(self, producer: PartitionProducer) -> None:
        self.drivers[producer.producer_id].arm_linger()

    def batch_sealed(self, producer: PartitionProducer) -> None:
        self._dirty.add(self.drivers[producer.producer_id])

    def _flush_dirty(self) -> None:
        """After a socket drain: write the batches that filled up during it."""
        if self._dirty:
            for driver in self._dirty:
                driver.flush()
            self._dirty.clear()

    # -- topics and producers ---------------------------------------------------------

    async def _resolve_partitions(self, topic: Topic) -> None:
        """Find the partition count (retrying with backoff) and start the producers."""
        backoff = Backoff()
        while True:
            try:
                count = await self._partition_count(topic.name)
                break
            except (
                TopicLookupError,
                ConnectionClosedError,
                ServerError,
                OSError,
                TimeoutError,
            ) as exc:
                delay = backoff.next_delay()
                dropped = 0
                if is_permanent(getattr(exc, "error", None)):
                    # Refused for good (no such topic, not allowed): waiting cannot help.
                    dropped = self.forwarder.discard_unrouted(topic, reasons.BROKER_REJECTED)
                log.warning(
                    "partition count of %s unknown (%s)%s; retrying in %.1f s",
                    topic.name,
                    exc or type(exc).__name__,
                    f"; {dropped} waiting messages discarded as broker_rejected" if dropped else "",
                    delay,
                )
                await asyncio.sleep(delay)
        self._grow(topic, count)

    async def _partition_count(self, name: str) -> int:
        # A "-partition-N" name is one partition, addressed directly.
        return 0 if is_partition_name(name) else await self.pool.partition_count(name)

    def _grow(self, topic: Topic, count: int) -> None:
        """Attach producers for partitions ``len(topic.producers) .. count-1``."""
        if count == 0:
            if topic.producers:
                return
            names = [topic.name]
        else:
            if topic.producers and not topic.partitioned:
                log.warning(
                    "%s became partitioned; keeping its non-partitioned producer", topic.name
                )
                return
            names = [partition_name(topic.name, i) for i in range(len(topic.producers), count)]
            if not names:
                return
            if topic.producers:
                log.info("%s grew to %d partitions", topic.name, count)
        new = []
        for index, name in enumerate(names, start=len(topic.producers)):
            producer = PartitionProducer(
                name, index, next(self._producer_ids), self.topic_settings.policy(topic)
            )
            if self.producer_name:
                producer.name, producer.name_is_ours = self.producer_name, True
            driver = ProducerDriver(
                producer,
                topic,
                self.pool,
                self.forwarder,
                self.metrics,
                self.delivery,
            )
            self.drivers[producer.producer_id] = driver
            new.append(producer)
        self.forwarder.add_producers(topic, new, partitioned=count > 0)
        for producer in new:
            self.drivers[producer.producer_id].start()
        self._flush_dirty()

    async def _refresh_metadata_periodically(self) -> None:
        while True:
            await asyncio.sleep(self.config.metadata_refresh_s)
            for topic in list(self.forwarder.topics_by_name.values()):
                if not topic.partitioned:
                    continue
                try:
                    count = await self._partition_count(topic.name)
                except (
                    TopicLookupError,
                    ConnectionClosedError,
                    ServerError,
                    OSError,
                    TimeoutError,
                ):
                    continue
                if count > len(topic.producers):
                    self._grow(topic, count)

    def _spawn(self, coroutine: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(coroutine)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)


def connection_security(config: Config) -> ConnectionSecurity:
    """The TLS context and credentials the options ask for (a ConfigError if unusable)."""
    try:
        return ConnectionSecurity.build(
            service_url=config.service_url,
            ca_file=config.tls_ca_file,
            cert_file=config.tls_cert_file,
            key_file=config.tls_key_file,
            verify_hostname=config.tls_verify_hostname,
            token_file=config.auth_token_file,
            token=config.auth_token,
            metrics_listen=config.metrics_listen,
        )
    except SecuritySetupError as exc:
        raise ConfigError(str(exc)) from None


def stable_producer_name(prefix: str, socket_path: str) -> str | None:
    """The producer name used on every partition, the same after a restart.

    ``auto``: ``pulsar-bruce-<host>-<hash of the socket path>`` (two daemons on
    one host differ by socket); empty: none, the broker names producers.
    """
    if not prefix:
        return None
    if prefix != "auto":
        return prefix
    digest = hashlib.sha1(socket_path.encode(), usedforsecurity=False).hexdigest()[:6]
    return f"pulsar-bruce-{socket.gethostname()}-{digest}"
