"""The stream socket's asyncio edge: accept connections, read records, answer flushes.

Backpressure: when the intake has no room for a record, the connection
stops reading (the sender's writes block in the kernel) and the record is
offered again a little later; nothing is discarded for lack of memory.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

from pulsar_bruce.input.stream_session import (
    API_KEY_FLUSH_REQUEST,
    FramingError,
    StreamSession,
)
from pulsar_bruce.input.unix_sockets import open_unix_socket
from pulsar_bruce.model.confirmation import Confirmation

log = logging.getLogger(__name__)

_RETRY_S = 0.005
#: The largest stream record accepted as framing (larger ones are too_large) is this
#: multiple of --max-message-bytes; beyond it the stream is considered out of sync.
_FRAMING_SLACK = 4


class StreamIntake(Protocol):
    """Where stream records go (the route layer's intake)."""

    @property
    def max_message_bytes(self) -> int: ...

    def admit_records(
        self, records: list[bytes], start: int, tag: Confirmation, stop_api_key: int, /
    ) -> int: ...


class StreamConnection(asyncio.Protocol):
    """One client connection."""

    def __init__(self, intake: StreamIntake, after_records: Callable[[], None]):
        self.intake = intake
        self._after_records = after_records
        self.session = StreamSession(
            max(intake.max_message_bytes * _FRAMING_SLACK, 1 << 20), self._settled
        )
        self.transport: asyncio.Transport | None = None
        self._closed = False
        self._paused = False
        self._response_scheduled = False
        self._loop = asyncio.get_running_loop()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self.session.feed(data)
        if not self._paused:
            self._process()

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None

    def stop_reading(self) -> None:
        """Shutdown: read nothing more (records not read are the client's to resend), but
        keep answering flushes for what was read while the daemon delivers it."""
        self._closed = True
        if self.transport is not None:
            self.transport.pause_reading()

    def close(self) -> None:
        self._closed = True
        if self.transport is not None:
            self.transport.close()

    def _process(self) -> None:
        if self._closed:
            return
        session = self.session
        admit_records = self.intake.admit_records
        full = False
        try:
            while not full and (records := session.complete_records()):
                done = 0
                while done < len(records):
                    stop = admit_records(records, done, session.current, API_KEY_FLUSH_REQUEST)
                    session.consume_run(records, done, stop)
                    if stop == len(records):
                        break
                    if not session.is_flush_request(records[stop]):
                        full = True  # no memory: offered again after a pause
                        break
                    session.flush_request(records[stop])
                    session.consume(records[stop])
                    done = stop + 1
            if full:
                self._pause()
            else:
                self._resume()
        except FramingError as exc:
            log.warning("stream connection closed: %s", exc)
            if self.transport is not None:
                self.transport.close()
        self._after_records()
        self._write_responses()

    def _pause(self) -> None:
        if not self._paused and self.transport is not None:
            self._paused = True
            self.transport.pause_reading()
        self._loop.call_later(_RETRY_S, self._process)

    def _resume(self) -> None:
        if self._paused and self.transport is not None:
            self._paused = False
            self.transport.resume_reading()

    def _settled(self) -> None:
        if not self._response_scheduled:
            self._response_scheduled = True
            self._loop.call_soon(self._write_responses)

    def _write_responses(self) -> None:
        self._response_scheduled = False
        data = self.session.responses()
        if data and self.transport is not None and not self.transport.is_closing():
            self.transport.write(data)


class StreamServer:
    """Listens on the stream socket path."""

    def __init__(
        self,
        path: str,
        mode: int,
        intake: StreamIntake,
        after_records: Callable[[], None],
        group: str | None = None,
    ):
        self.path = path
        self.mode = mode
        self.group = group
        self.intake = intake
        self._after_records = after_records
        self._server: asyncio.AbstractServer | None = None
        self._activated = False
        self._connections: weakref.WeakSet[StreamConnection] = weakref.WeakSet()

    def _connection(self) -> StreamConnection:
        connection = StreamConnection(self.intake, self._after_records)
        self._connections.add(connection)
        return connection

    async def start(self, activated: socket.socket | None = None) -> None:
        """Listen on ``path``, or on the socket systemd passed (it keeps its file)."""
        loop = asyncio.get_running_loop()
        self._activated = activated is not None
        if activated is not None:
            sock = activated
        else:
            sock = open_unix_socket(self.path, socket.SOCK_STREAM, self.mode, self.group)
        try:
            self._server = await loop.create_unix_server(self._connection, sock=sock)
        except BaseException:
            if not self._activated:
                sock.close()
                with contextlib.suppress(OSError):
                    Path(self.path).unlink()
            raise

    def stop_reading(self) -> None:
        """Shutdown, step 1: accept and read nothing more."""
        if self._server is not None:
            self._server.close()
        for connection in list(self._connections):
            connection.stop_reading()

    async def stop(self) -> None:
        """Shutdown, last step: close every connection and the listening socket."""
        for connection in list(self._connections):
            connection.close()
        if self._server is not None:
            self._server.close()
            if not self._activated:
                with contextlib.suppress(OSError):
                    Path(self.path).unlink()
