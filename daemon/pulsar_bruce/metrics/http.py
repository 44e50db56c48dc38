"""A small HTTP server on the event loop for ``/metrics`` and ``/status``.

Serving from the loop (not prometheus-client's thread) means a scrape runs
between datagrams, so the accounting identity holds in every scrape.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
from collections.abc import Iterable, Iterator
from typing import Any, Protocol
from urllib.parse import parse_qs

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.metrics_core import Metric

log = logging.getLogger(__name__)

_MAX_REQUEST_HEAD = 8192


class Exposition(Protocol):
    """What ``/metrics`` serves (``metrics/registry.py``'s ``Metrics``)."""

    @property
    def registry(self) -> CollectorRegistry: ...

    def select(self, sample_names: Iterable[str], /) -> Iterable[Metric]:
        """The families that may hold the named samples, built alone."""


class _Only:
    """The families that have a sample named in ``names`` (``?name[]=``): only those that
    may hold one are built (``select``)."""

    def __init__(self, metrics: Exposition, names: set[str]):
        self._metrics = metrics
        self._names = names

    def collect(self) -> Iterator[Metric]:
        for family in self._metrics.select(self._names):
            if any(sample.name in self._names for sample in family.samples):
                yield family


class StatusSource(Protocol):
    """What ``/status`` shows (``server.py``'s ``Server``), read at each request."""

    def status_document(self) -> dict[str, Any]: ...


class MetricsListenError(OSError):
    """The metrics address cannot be listened on; the message names ``--metrics-listen``
    (asyncio's own says only which address)."""


class MetricsServer:
    """``GET /metrics`` (Prometheus text), ``GET /status`` (JSON), ``GET /`` (pointers)."""

    def __init__(
        self,
        metrics: Exposition,
        host: str,
        port: int,
        status: StatusSource | None = None,
    ):
        self.metrics = metrics
        self.status = status
        self.host = host
        self.port = port
        self._server: asyncio.Server | None = None

    async def start(self) -> None:
        try:
            self._server = await asyncio.start_server(self._handle, self.host, self.port)
        except OSError as exc:
            reason = os.strerror(exc.errno) if exc.errno else str(exc)
            raise MetricsListenError(
                f"--metrics-listen {self.host}:{self.port}: cannot listen: {reason} "
                "(give another HOST:PORT, or off)"
            ) from None
        sockets = self._server.sockets
        if sockets:
            self.port = sockets[0].getsockname()[1]

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            # Newer Pythons wait for open handlers here; a stuck scraper must not hold us.
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._server.wait_closed(), 1.0)

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, TimeoutError, OSError):
            writer.close()
            return
        request_line = head[:_MAX_REQUEST_HEAD].split(b"\r\n", 1)[0].decode("latin-1")
        parts = request_line.split()
        method, target = (parts[0], parts[1]) if len(parts) >= 2 else ("", "")
        path, _, query = target.partition("?")
        if method not in ("GET", "HEAD"):
            status, content_type, body = "405 Method Not Allowed", "text/plain", b"GET only\n"
        elif path == "/metrics":
            # Prometheus' own filter: /metrics?name[]=a&name[]=b serves only those series
            # (a cheap scrape for a tight poll; the bench waits on the counters this way).
            names = parse_qs(query).get("name[]")
            served = _Only(self.metrics, set(names)) if names else self.metrics.registry
            status, content_type, body = "200 OK", CONTENT_TYPE_LATEST, generate_latest(served)
        elif path == "/status" and self.status is not None:
            body = json.dumps(self.status.status_document(), indent=1).encode() + b"\n"
            status, content_type = "200 OK", "application/json"
        elif path == "/":
            status, content_type = "200 OK", "text/plain"
            body = b"pulsar-bruce: /metrics (Prometheus), /status (JSON)\n"
        else:
            status, content_type, body = "404 Not Found", "text/plain", b"not found\n"
        header = (
            f"HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
        ).encode("latin-1")
        try:
            writer.write(header if method == "HEAD" else header + body)
            await asyncio.wait_for(writer.drain(), 10)
        except (OSError, TimeoutError):
            pass
        finally:
            writer.close()
