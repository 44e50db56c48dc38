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
import time
from pathlib import Path
from typing import Protocol

from pulsar_bruce import reasons
from pulsar_bruce.input.stream_session import (
    API_KEY_FLUSH_REQUEST,
    FramingError,
    RecordBudget,
    RecordRefused,
    StreamSession,
)
from pulsar_bruce.input.unix_sockets import open_unix_socket
from pulsar_bruce.model.confirmation import Confirmation
from pulsar_bruce.parse.producer_record import decode_producer_record, is_producer_record

log = logging.getLogger(__name__)

_RETRY_S = 0.005
#: The largest stream record accepted as framing (larger ones are too_large) is this
#: multiple of --max-message-bytes; beyond it the stream is considered out of sync.
_FRAMING_SLACK = 4
#: At most one log line per this many seconds about connections refused over the cap.
_REFUSAL_LOG_INTERVAL_S = 10.0
#: The default of --stream-max-connections.
DEFAULT_MAX_CONNECTIONS = 256


class StreamIntake(Protocol):
    """Where stream records go (the route layer's intake)."""

    @property
    def max_message_bytes(self) -> int: ...

    def admit_records(
        self, records: list[bytes], start: int, tag: Confirmation, stop_api_key: int, /
    ) -> int: ...

    def refuse_record(
        self, reason: str, head: bytes, size: int, tag: Confirmation | None, /
    ) -> None: ...


class SequencedStream(Protocol):
    """Where the records of a connection that began with a Producer record go
    (``route/sequenced.py``): admitted as by :class:`StreamIntake`, under its name and ids."""

    def admit_records(
        self, records: list[bytes], start: int, tag: Confirmation, stop_api_key: int, /
    ) -> int: ...

    def refuse_record(
        self, reason: str, head: bytes, size: int, tag: Confirmation | None, /
    ) -> None: ...

    def end(self) -> None: ...


class StreamStage(Protocol):
    """The pipeline as the stream edge sees it (``Pipeline``): the edge's only calls up,
    once per read or per Producer record, never per record."""

    def after_drain(self) -> None:
        """Records were taken (admitted or refused): send the batches they sealed."""

    def sequenced_sender(self, name: str, first_sequence_id: int, /) -> SequencedStream:
        """A connection began with a Producer record: where its records go from now on."""


class StreamConnection(asyncio.Protocol):
    """One client connection.

    Reading stops while the intake has no room (``_full``) and while the client does not
    read its flush responses (``_write_blocked``, the transport's write buffer is over its
    high-water mark): a client that never reads cannot make its answers pile up in memory.
    """

    def __init__(
        self, intake: StreamIntake, stage: StreamStage, budget: RecordBudget | None = None
    ):
        self.intake = intake
        #: Told when records were taken, and asked for a Producer record's sender.
        self.stage = stage
        #: Set by a Producer record as the connection's first record; ``_started``: a record
        #: other than that has been taken.
        self.sequenced: SequencedStream | None = None
        self._started = False
        self._budget = budget
        self.session = StreamSession(
            max(intake.max_message_bytes * _FRAMING_SLACK, 1 << 20), self._settled
        )
        self.transport: asyncio.Transport | None = None
        self._closed = False
        #: The client went: the server lets the connection go when it next counts them.
        self.ended = False
        self._full = False
        self._write_blocked = False
        self._reading = True
        self._retry: asyncio.TimerHandle | None = None
        #: Bytes of the budget this connection holds for the record it is receiving.
        self._reserved = 0
        self._response_scheduled = False
        self._loop = asyncio.get_running_loop()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        session = self.session
        session.feed(data)
        if session.skipped:
            self._refuse_skipped()
        if not (self._full or self._write_blocked):
            self._process()

    def _refuse_skipped(self) -> None:
        """Records too large to take, skipped as they came: each one discarded as
        ``too_large`` in order, so the next flush tells the sender."""
        session = self.session
        refuse = (self.sequenced or self.intake).refuse_record
        for head, size in session.skipped:
            refuse(reasons.TOO_LARGE, head, size, session.current)
        session.skipped.clear()
        self.stage.after_drain()

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None
        self._closed = True
        self.ended = True
        self._release()
        self.session.clear()  # what the client sent and we did not take: it resends it
        if self._retry is not None:
            self._retry.cancel()
        if self.sequenced is not None:
            self.sequenced.end()

    def pause_writing(self) -> None:
        """The client is not reading its responses: read nothing more until it does."""
        self._write_blocked = True
        self._update_reading()

    def resume_writing(self) -> None:
        self._write_blocked = False
        self._update_reading()
        self._process()  # what was read before the pause

    def stop_reading(self) -> None:
        """Shutdown: read nothing more (records not read are the client's to resend), but
        keep answering flushes for what was read while the daemon delivers it."""
        self._closed = True
        if self.transport is not None and self._reading:
            self._reading = False
            self.transport.pause_reading()

    def close(self) -> None:
        self._closed = True
        if self.transport is not None:
            self.transport.close()

    def _process(self) -> None:
        if self._closed or self._write_blocked:
            return
        session = self.session
        full = False
        try:
            while not full and (records := session.complete_records()):
                done = 0
                while done < len(records):
                    if self._producer_record(records[done]):
                        session.consume(records[done])
                        done += 1
                        continue
                    self._started = True
                    admit = self.sequenced or self.intake
                    stop = admit.admit_records(
                        records, done, session.current, API_KEY_FLUSH_REQUEST
                    )
                    session.consume_run(records, done, stop)
                    if stop == len(records):
                        break
                    if self._producer_record(records[stop]):
                        done = stop
                        continue
                    if not session.is_flush_request(records[stop]):
                        full = True  # no memory: offered again after a pause
                        break
                    session.flush_request(records[stop])
                    session.consume(records[stop])
                    done = stop + 1
            if not full:
                self._reserve(session.pending_size())
            self._full = full
            self._update_reading()
            if full and self._retry is None:
                self._retry = self._loop.call_later(_RETRY_S, self._retry_now)
        except RecordRefused as exc:
            if exc.reason == reasons.TOO_LARGE:
                session.skip_record(exc.size)  # the sender learns it at its next flush
                self._full = False  # everything before it was taken
                self._update_reading()
                self.stage.after_drain()
                self._write_responses()
                return
            self.intake.refuse_record(exc.reason, session.head(), exc.size, None)
            log.warning(
                "stream connection closed: %s (--max-message-bytes %d, --buffer-max-bytes %s)",
                exc,
                self.intake.max_message_bytes,
                self._budget.buffer_max_bytes if self._budget is not None else "?",
            )
            self._abort()
        except FramingError as exc:
            log.warning("stream connection closed: %s", exc)
            if self.transport is not None:
                self.transport.close()
        self.stage.after_drain()
        self._write_responses()

    def _producer_record(self, record: bytes) -> bool:
        """Act on ``record`` if it is a Producer record the connection may send: its first
        record, or any on a connection that began with one.  Elsewhere it is a message record
        of an unsupported kind, for the intake to discard."""
        if self._started and self.sequenced is None:
            return False
        if not is_producer_record(record):
            return False
        try:
            name, first_sequence_id = decode_producer_record(record)
        except ValueError as exc:
            raise FramingError(str(exc)) from None
        if self.sequenced is not None:
            self.sequenced.end()
        self.sequenced = self.stage.sequenced_sender(name, first_sequence_id)
        self._started = True
        return True

    def _retry_now(self) -> None:
        self._retry = None
        self._process()

    def _reserve(self, size: int) -> None:
        """Hold budget for the record still arriving (refused at its header if none is left)."""
        budget = self._budget
        if budget is None:
            return
        if size < budget.reserve_from:
            size = 0
        if size == self._reserved:
            return
        self._release()
        if size:
            budget.reserve(size)
            self._reserved = size

    def _release(self) -> None:
        if self._budget is not None and self._reserved:
            self._budget.release(self._reserved)
        self._reserved = 0

    def _abort(self) -> None:
        self._closed = True
        self.session.clear()
        if self.transport is not None:
            self.transport.close()

    def _update_reading(self) -> None:
        """Pause or resume the transport's reading to match why we want it (once each)."""
        transport = self.transport
        if transport is None or self._closed:
            return
        wanted = not (self._full or self._write_blocked)
        if wanted != self._reading:
            self._reading = wanted
            if wanted:
                transport.resume_reading()
            else:
                transport.pause_reading()

    def _settled(self) -> None:
        if not self._response_scheduled:
            self._response_scheduled = True
            self._loop.call_soon(self._write_responses)

    def _write_responses(self) -> None:
        self._response_scheduled = False
        data = self.session.responses()
        if data and self.transport is not None and not self.transport.is_closing():
            self.transport.write(data)


class _Refused(asyncio.Protocol):
    """A connection over --stream-max-connections: closed at once."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        transport.close()


class StreamServer:
    """Listens on the stream socket path."""

    def __init__(
        self,
        path: str,
        mode: int,
        intake: StreamIntake,
        stage: StreamStage,
        group: str | None = None,
        *,
        max_connections: int = DEFAULT_MAX_CONNECTIONS,
        budget: RecordBudget | None = None,
    ):
        self.path = path
        self.mode = mode
        self.group = group
        self.intake = intake
        self.max_connections = max_connections
        self.budget = budget
        self.stage = stage
        self._server: asyncio.AbstractServer | None = None
        self._activated = False
        self._connections: set[StreamConnection] = set()
        #: Connections refused over the cap, in all and since the last log line.
        self.refused_connections = 0
        self._refused_unlogged = 0
        self._next_refusal_log = 0.0

    def open_connections(self) -> set[StreamConnection]:
        """The connections whose client is still there (those that ended are let go now)."""
        self._connections = {c for c in self._connections if not c.ended}
        return self._connections

    def _connection(self) -> asyncio.Protocol:
        """The protocol for a connection just accepted: a new one, or one that refuses it."""
        if len(self.open_connections()) >= self.max_connections:
            self._refused()
            return _Refused()
        connection = StreamConnection(self.intake, self.stage, self.budget)
        self._connections.add(connection)
        return connection

    def _refused(self) -> None:
        """Count a connection over the cap; log it at most once per interval."""
        self.refused_connections += 1
        self._refused_unlogged += 1
        now = time.monotonic()
        if now >= self._next_refusal_log:
            log.warning(
                "stream socket: refused %d connection(s): --stream-max-connections %d are open",
                self._refused_unlogged,
                self.max_connections,
            )
            self._refused_unlogged = 0
            self._next_refusal_log = now + _REFUSAL_LOG_INTERVAL_S

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
        for connection in list(self.open_connections()):
            connection.stop_reading()

    async def stop(self) -> None:
        """Shutdown, last step: close every connection and the listening socket."""
        for connection in list(self.open_connections()):
            connection.close()
        if self._server is not None:
            self._server.close()
            if not self._activated:
                with contextlib.suppress(OSError):
                    Path(self.path).unlink()
