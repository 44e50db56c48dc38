"""The daemon's lifecycle: wire the parts, start, serve, shut down (after uvicorn's server.py).

Startup opens the metrics endpoint and the input sockets and reads until
SIGTERM or SIGINT.  Shutdown stops reading, drains what is already queued in
the sockets, seals and writes every batch and waits for receipts up to
``shutdown_timeout_s`` (a second SIGTERM or SIGINT ends the wait at once);
what is left goes to the spool if there is one, else is discarded as
``shutdown``.  Signal handlers are restored on the way out.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import logging
import signal
import socket
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from pulsar_bruce.config import TOPIC_OPTIONS, Config, ConfigError
from pulsar_bruce.config.names import stable_producer_name
from pulsar_bruce.connection.pool import ConnectionPool
from pulsar_bruce.input.pipeline import Pipeline
from pulsar_bruce.input.socket_reader import DatagramReader
from pulsar_bruce.input.stream_server import StreamServer
from pulsar_bruce.input.unix_sockets import open_unix_socket
from pulsar_bruce.metrics.discard_log import discard_log_of
from pulsar_bruce.metrics.http import MetricsServer
from pulsar_bruce.metrics.registry import Metrics, SpoolGauges
from pulsar_bruce.metrics.reject_log import RejectLog
from pulsar_bruce.metrics.status import status_document
from pulsar_bruce.model.ledger import Ledger
from pulsar_bruce.producer.delivery import DeliveryPolicy
from pulsar_bruce.route.intake import Intake
from pulsar_bruce.route.outcomes import Outcomes
from pulsar_bruce.route.topic_settings import TopicConfigurator
from pulsar_bruce.service import descriptors, shutdown, systemd
from pulsar_bruce.service.connection_options import connection_security
from pulsar_bruce.spool.journal import Journal
from pulsar_bruce.spool.journal_stage import NO_JOURNAL, JournalStage
from pulsar_bruce.spool.policy import SpoolPolicy
from pulsar_bruce.spool.spooler import Spooler
from pulsar_bruce.spool.store import SpoolStore
from pulsar_bruce.topics.manager import TopicManager

log = logging.getLogger(__name__)

_STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)
#: How often the counts of senders' mistakes are looked at (the first one is logged this soon).
_REJECT_CHECK_S = 1.0


class Server:
    """Owns every part of a running daemon; :meth:`serve` runs it until a stop signal."""

    def __init__(self, config: Config, reload: Callable[[], Config] | None = None):
        self.config = config
        self._reload = reload
        self.ledger = Ledger()
        # TLS context and credentials, built once (ConfigError naming the option if unusable).
        self.security = connection_security(config)
        self.pool = ConnectionPool(
            config.service_url,
            ssl_context=self.security.ssl_context,
            auth=self.security.auth,
            advertised_listener=config.advertised_listener,
        )
        self.store = (
            SpoolStore(config.spool_dir, config.spool_max_bytes, config.spool_fsync)
            if config.spool_dir
            else None
        )
        self.journal: JournalStage = (
            Journal(config.spool_dir, config.spool_fsync)
            if config.spool_dir and config.spool_journal
            else NO_JOURNAL
        )
        self.outcomes = Outcomes(self.ledger, discard_log_of(config), journal=self.journal)
        self.policy = SpoolPolicy(
            self.ledger,
            config.buffer_max_bytes,
            self.store,
            config.spool_after_s,
            refused=functools.partial(self.outcomes.refused, sample=False),
        )
        self.topic_settings = TopicConfigurator(config)
        self.topics = TopicManager(
            self.pool,
            self.outcomes,
            self.topic_settings,
            DeliveryPolicy(
                receipt_timeout_s=config.receipt_timeout_s,
                send_timeout_s=config.send_timeout_s,
                max_send_attempts=config.max_send_attempts,
            ),
            producer_name=stable_producer_name(config.producer_name_prefix, config.socket),
            metadata_refresh_s=config.metadata_refresh_s,
            journal=self.journal,
        )
        registry, pool = self.topics.registry, self.pool
        self.metrics = Metrics(
            self.ledger, lambda: registry, lambda: len(pool.connections), self._spool_gauges
        )
        self.outcomes.observer = self.metrics
        self.intake = Intake(
            self.topics.registry,
            self.topics.appender,
            self.ledger,
            self.policy,
            self.outcomes,
            max_message_bytes=self.topic_settings.largest_message_bytes(),
        )
        self.spooler = (
            Spooler(
                self.store,
                self.policy,
                self.intake,
                broker_reachable=lambda: bool(pool.connections),
                after_replay=self.topics.flush_dirty,
                journal=self.journal,
            )
            if self.store is not None
            else None
        )
        self.pipeline = Pipeline(self.intake, self.policy, self.topics, self.journal)
        self.reader: DatagramReader | None = None
        self.stream_server: StreamServer | None = None
        self.metrics_server: MetricsServer | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._stop = asyncio.Event()
        self._stop_now = asyncio.Event()
        self.started = asyncio.Event()
        self.started_at = time.time()
        self.notifier = systemd.Notifier.from_environ()
        self.socket_activated = False
        self.socket_name = config.socket

    # -- main loop ------------------------------------------------------------------

    async def serve(self) -> None:
        with self.capture_signals():
            try:
                await self.startup()
            except BaseException:
                await self._abandon_startup()
                raise
            await self._stop.wait()
            await self.shutdown()

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        """SIGTERM/SIGINT stop, SIGHUP reloads; the previous handlers come back on exit."""
        loop = asyncio.get_running_loop()
        handlers: dict[signal.Signals, Callable[..., Any]] = {
            **dict.fromkeys(_STOP_SIGNALS, self.request_stop),
            signal.SIGHUP: lambda _signum: self.reload(),
        }
        previous = {signum: signal.getsignal(signum) for signum in handlers}
        for signum, handler in handlers.items():
            loop.add_signal_handler(signum, handler, signum)
        try:
            yield
        finally:
            for signum, original in previous.items():
                loop.remove_signal_handler(signum)
                signal.signal(signum, original)

    async def startup(self) -> None:
        config = self.config
        if config.metrics_listen is not None:
            host, port = config.metrics_listen
            metrics = self.metrics
            self.metrics_server = MetricsServer(
                metrics.registry, host, port, status=self.status_document, select=metrics.select
            )
            await self.metrics_server.start()
        datagram_socket, stream_socket = self._open_input_sockets()
        # What a crash left, before anything new.
        self.intake.replay_journal(self.journal.open())
        self.journal.drop_previous()
        self.reader = self.pipeline.datagram_reader(datagram_socket)
        self.reader.start()
        stream_path = config.stream_socket_path
        if stream_path is not None or stream_socket is not None:
            self.stream_server = self.pipeline.stream_server(
                stream_path or "",
                config.socket_mode,
                config.socket_group,
                self._stream_connection_cap(),
                config.buffer_max_bytes,
            )
            await self.stream_server.start(stream_socket)
        if self.spooler is not None:
            self.spooler.open()
            self._spawn(self.spooler.run())
        self.topics.start()
        self._spawn(self._log_rejects_periodically())
        if self.notifier.enabled:
            self._spawn(self._notify_periodically())
        log.info(
            "pulsar-bruce receiving on %s%s, forwarding to %s, metrics on %s",
            self.socket_name,
            " (socket activation)" if self.socket_activated else "",
            config.service_url,
            "{}:{}".format(*config.metrics_listen) if config.metrics_listen else "off",
        )
        for warning in self.security.warnings:
            log.warning("%s", warning)
        self.started.set()
        self.notifier.ready(self._status())

    async def _abandon_startup(self) -> None:
        """A start refused half-way (a stream socket in use, an unusable spool) leaves no
        socket file of ours behind for senders to write into, and no port open."""
        if self.reader is not None:
            self.reader.stop()
            self.reader.sock.close()
            if not self.socket_activated:
                with contextlib.suppress(OSError):
                    Path(self.config.socket).unlink()
        if self.stream_server is not None:
            await self.stream_server.stop()  # unlinks only a socket it made
        if self.metrics_server is not None:
            await self.metrics_server.stop()

    def request_stop(self, signum: int | None = None) -> None:
        """First stop signal: shut down gracefully; a second one: stop waiting for receipts."""
        name = signal.Signals(signum).name if signum is not None else "stop request"
        if self._stop.is_set():
            if not self._stop_now.is_set():
                log.warning("received %s again: not waiting for receipts any longer", name)
            self._stop_now.set()
            return
        if signum is not None:
            log.info("received %s, shutting down", name)
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
        self.policy.write_held()
        self.topics.seal_all()
        await shutdown.wait_for_receipts(
            self.ledger, self.config.shutdown_timeout_s, self._stop_now, self.spooler is not None
        )
        shutdown.keep_or_discard_the_rest(
            self.topics.registry, self.ledger, self.outcomes, self.spooler, self._stop_now.is_set()
        )
        self.journal.close()  # all of it is acked, spooled or discarded now
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self.topics.stop()
        self.pool.close_all()
        if self.stream_server is not None:
            await self.stream_server.stop()
        if self.metrics_server is not None:
            await self.metrics_server.stop()
        ledger = self.ledger
        log.info(
            "stopped: received %d, acked %d, discarded %d",
            ledger.received,
            ledger.acked,
            ledger.discarded_total,
        )

    def reload(self) -> None:
        """SIGHUP: re-read the configuration and apply its per-topic settings, dropping nothing."""
        if self._reload is None:
            return
        try:
            config = self._reload()
            self.topic_settings.reconfigure(config, [])  # reads the encryption keys again
        except ConfigError as exc:
            log.error("SIGHUP: configuration not reloaded: %s", exc)
            return
        for topic in self.topics.registry:
            self.topics.apply_settings(topic)
        ignored = [
            f.name
            for f in dataclasses.fields(config)
            if getattr(config, f.name) != getattr(self.config, f.name)
            and f.name not in (*TOPIC_OPTIONS, "topic_overrides")
        ]
        if ignored:
            log.warning("SIGHUP: %s take effect only on restart", ", ".join(ignored))
        self.intake.max_message_bytes = min(
            self.intake.max_message_bytes, self.topic_settings.largest_message_bytes()
        )  # the socket buffer cannot grow without a restart
        log.info(
            "SIGHUP: per-topic settings reloaded (%d overrides, %d topics)",
            len(config.topic_overrides),
            len(self.topics.registry),
        )

    # -- edges ---------------------------------------------------------------------------

    def _stream_connection_cap(self) -> int:
        """``--stream-max-connections``, lowered if the descriptor limit would not leave a
        reserve for /metrics, broker connections and the spool (said in one line)."""
        requested = self.config.stream_max_connections
        limit = descriptors.raise_soft_limit()
        cap = descriptors.stream_connection_cap(requested, limit, descriptors.in_use())
        if cap < requested:
            log.warning(
                "stream socket: at most %d connections, not --stream-max-connections %d: the "
                "file descriptor limit is %d and %d stay free for /metrics, broker connections "
                "and the spool (raise LimitNOFILE= or ulimit -n)",
                cap, requested, limit, descriptors.RESERVE,
            )  # fmt: skip
        return cap

    def _open_input_sockets(self) -> tuple[socket.socket, socket.socket | None]:
        """The sockets systemd passed us (socket activation), else our own at --socket."""
        passed, activated_stream = systemd.activated_sockets()
        if passed is not None:
            passed.setblocking(False)
            self.socket_activated = True
            self.socket_name = systemd.socket_name(passed)
            return passed, activated_stream
        config = self.config
        own = open_unix_socket(
            config.socket, socket.SOCK_DGRAM, config.socket_mode, config.socket_group
        )
        return own, activated_stream

    def _spool_gauges(self) -> SpoolGauges:
        store = self.store
        return SpoolGauges(store.size_bytes, store.corrupt_records) if store else SpoolGauges(0, 0)

    def status_document(self) -> dict[str, Any]:
        return status_document(
            started_at=self.started_at,
            socket=self.socket_name,
            service_url=self.config.service_url,
            config_file=self.config.config_file,
            stats=self.ledger,
            topics=self.topics.registry,
            connections=[c.address for c in self.pool.connections],
            recent_rejects=self.outcomes.recent_rejects,
        )

    def _status(self) -> str:
        ledger = self.ledger
        return systemd.status_line(
            "stopping" if self._stop.is_set() else f"receiving on {self.socket_name}",
            ledger.buffered_messages,
            len(self.pool.connections),
            ledger.received,
            ledger.acked,
            ledger.discarded_total,
        )

    async def _log_rejects_periodically(self) -> None:
        """Senders' mistakes, told from here, never per message (``metrics/reject_log.py``)."""
        rejects = RejectLog(time.monotonic(), self.ledger.discarded)
        while True:
            await asyncio.sleep(_REJECT_CHECK_S)
            now, samples = time.monotonic(), self.outcomes.recent_rejects
            for line in rejects.lines(now, self.ledger.discarded, samples):
                log.warning("%s", line)

    async def _notify_periodically(self) -> None:
        """STATUS= every few seconds; WATCHDOG=1 pings from the event loop itself."""
        while True:
            await asyncio.sleep(self.notifier.tick_s)
            self.notifier.tick(self._status())

    def _spawn(self, coroutine: Any) -> None:
        task = asyncio.get_running_loop().create_task(coroutine)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
