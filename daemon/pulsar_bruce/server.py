"""The daemon's lifecycle: build the pipeline, start, serve, shut down (after uvicorn's server.py).

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
import logging
import signal
import socket
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

from pulsar_bruce import reasons
from pulsar_bruce.config import TOPIC_OPTIONS, Config, ConfigError
from pulsar_bruce.input.unix_sockets import open_unix_socket
from pulsar_bruce.metrics.http import MetricsServer
from pulsar_bruce.metrics.registry import BatchHistograms, Metrics
from pulsar_bruce.metrics.reject_log import RateLimitLog, RejectLog
from pulsar_bruce.metrics.status import status_document
from pulsar_bruce.model.ledger import Ledger
from pulsar_bruce.pipeline.flow import Pipeline
from pulsar_bruce.service import descriptors, status_file, systemd
from pulsar_bruce.service.connection_options import connection_security

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
        self.histograms = BatchHistograms()
        self.pipeline = Pipeline(config, self.ledger, self.security, observer=self.histograms)
        self.metrics = self._metrics()
        self._lifecycle_state()

    # -- construction steps -------------------------------------------------------------

    def _metrics(self) -> Metrics:
        """The Prometheus families; they read the pipeline's topics, connections and spool
        when scraped, and expose the histograms the pipeline reports its batches to."""
        pipeline = self.pipeline
        return Metrics(
            self.ledger, pipeline.manager.registry, pipeline.pool, pipeline.store, self.histograms
        )

    def _lifecycle_state(self) -> None:
        """What startup, the main loop and shutdown keep: tasks, stop events, the sockets'
        names, the metrics endpoint (opened at startup) and systemd's notifier."""
        self.metrics_server: MetricsServer | None = None
        self._status_url: str | None = None  # where /status is served, once it is
        self._tasks: set[asyncio.Task[None]] = set()
        self._stop = asyncio.Event()
        self._stop_now = asyncio.Event()
        self.started = asyncio.Event()
        self.started_at = time.time()
        self.notifier = systemd.Notifier.from_environ()
        self.socket_activated = False
        self.socket_name = self.config.socket

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
            self.metrics_server = MetricsServer(self.metrics, host, port, status=self)
            await self.metrics_server.start()
            self._status_url = status_file.status_url(host, self.metrics_server.port)
        datagram_socket, stream_socket = self._open_input_sockets()
        if self._status_url is not None:
            status_file.write(config.socket, self._status_url)  # for `pulsar-bruce status`
        cap = self._stream_connection_cap() if self._has_stream_socket(stream_socket) else 0
        await self.pipeline.start(datagram_socket, stream_socket, cap)
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
        reader, stream_server = self.pipeline.reader, self.pipeline.stream_server
        if reader is not None:
            reader.stop()
            reader.sock.close()
            if not self.socket_activated:
                with contextlib.suppress(OSError):
                    Path(self.config.socket).unlink()
        if stream_server is not None:
            await stream_server.stop()  # unlinks only a socket it made
        if self.metrics_server is not None:
            await self.metrics_server.stop()
        if self._status_url is not None:
            status_file.remove(self.config.socket, self._status_url)

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
        pipeline = self.pipeline
        if pipeline.reader is not None and not self.socket_activated:
            # systemd's socket outlives us, and keeps queueing.
            with contextlib.suppress(OSError):
                Path(self.config.socket).unlink()
        # What senders queued before we stopped is ours to deliver.
        pipeline.stop_reading(refuse_new=not self.socket_activated)
        pipeline.seal_all()
        await pipeline.settle(self.config.shutdown_timeout_s, self._stop_now)
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await pipeline.stop()
        if self.metrics_server is not None:
            await self.metrics_server.stop()
        if self._status_url is not None:
            status_file.remove(self.config.socket, self._status_url)
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
        pipeline = self.pipeline
        try:
            config = self._reload()
            pipeline.topic_settings.reconfigure(config, [])  # reads the encryption keys again
        except ConfigError as exc:
            log.error("SIGHUP: configuration not reloaded: %s", exc)
            return
        for topic in pipeline.manager.registry:
            pipeline.manager.apply_settings(topic)
        ignored = [
            f.name
            for f in dataclasses.fields(config)
            if getattr(config, f.name) != getattr(self.config, f.name)
            and f.name not in (*TOPIC_OPTIONS, "topic_overrides")
        ]
        if ignored:
            log.warning(
                "SIGHUP: changed, but applied only by a restart: %s; the daemon goes on with "
                "the values it started with (pulsar-bruce status reads the running one)",
                ", ".join(ignored),
            )
        intake = pipeline.intake
        intake.max_message_bytes = min(
            intake.max_message_bytes, pipeline.topic_settings.largest_message_bytes()
        )  # the socket buffer cannot grow without a restart
        log.info(
            "SIGHUP: per-topic settings reloaded (%d overrides, %d topics)",
            len(config.topic_overrides),
            len(pipeline.manager.registry),
        )

    # -- edges ---------------------------------------------------------------------------

    def _has_stream_socket(self, activated: socket.socket | None) -> bool:
        return self.config.stream_socket_path is not None or activated is not None

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

    def status_document(self) -> dict[str, Any]:
        """What ``/status`` shows (the metrics server asks at each request)."""
        return status_document(
            started_at=self.started_at,
            socket=self.socket_name,
            service_url=self.config.service_url,
            config_file=self.config.config_file,
            stats=self.ledger,
            topics=self.pipeline.manager.registry,
            connections=[c.address for c in self.pipeline.pool.connections],
            recent_rejects=self.pipeline.outcomes.recent_rejects,
        )

    def _status(self) -> str:
        ledger = self.ledger
        return systemd.status_line(
            "stopping" if self._stop.is_set() else f"receiving on {self.socket_name}",
            ledger.buffered_messages,
            len(self.pipeline.pool.connections),
            ledger.received,
            ledger.acked,
            ledger.discarded_total,
        )

    async def _log_rejects_periodically(self) -> None:
        """Senders' mistakes and rate-limited topics, told from here, never per message
        (``metrics/reject_log.py``)."""
        rejects = RejectLog(time.monotonic(), self.ledger.discarded)
        limited = RateLimitLog(time.monotonic(), self._rate_limited())
        while True:
            await asyncio.sleep(_REJECT_CHECK_S)
            now, samples = time.monotonic(), self.pipeline.outcomes.recent_rejects
            for line in rejects.lines(now, self.ledger.discarded, samples):
                log.warning("%s", line)
            if self.ledger.discarded.get(reasons.RATE_LIMITED):
                counts = self._rate_limited()
                for line in limited.lines(now, counts, self._rate_limits(counts)):
                    log.warning("%s", line)

    def _rate_limited(self) -> dict[str, int]:
        """Each topic's rate_limited count, of the topics that have one."""
        counts = {}
        for topic in self.pipeline.manager.registry:
            count = topic.stats.discarded.get(reasons.RATE_LIMITED)
            if count:
                counts[topic.name] = count
        return counts

    def _rate_limits(self, topics: Iterable[str]) -> dict[str, str]:
        """The rate limit of each of ``topics``, in words."""
        limits = {}
        for name in topics:
            settings = self.pipeline.topic_settings.settings.get(name)
            if settings is not None and settings.rate_limit_messages:
                limits[name] = (
                    f"rate_limit_messages {settings.rate_limit_messages} per "
                    f"rate_limit_interval_s {settings.rate_limit_interval_s:g}"
                )
        return limits

    async def _notify_periodically(self) -> None:
        """STATUS= every few seconds; WATCHDOG=1 pings from the event loop itself."""
        while True:
            await asyncio.sleep(self.notifier.tick_s)
            self.notifier.tick(self._status())

    def _spawn(self, coroutine: Any) -> None:
        task = asyncio.get_running_loop().create_task(coroutine)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
