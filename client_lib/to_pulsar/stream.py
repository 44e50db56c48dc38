"""Confirmed delivery: send records over the daemon's UNIX stream socket, then flush.

A datagram says nothing about what became of it. On the stream socket the client
writes the same records back to back and asks, with :meth:`StreamSender.flush`,
what happened to everything it sent since the previous flush: the daemon answers
once each of those records is acked by the broker or discarded, with the counts
(see :mod:`to_pulsar.protocol` for the wire format)::

    from to_pulsar.stream import StreamSender

    with StreamSender("/run/pulsar-bruce/bruce.stream.sock") as sender:
        for event in events:
            sender.send("clicks", event, key=b"user-42")
        result = sender.flush()        # waits for the broker's acks
        if not result.ok:
            raise RuntimeError(f"discarded: {result.describe_discards()}")

Records are buffered and written in chunks. When the daemon's buffer is full it
stops reading the connection, so a write blocks: that is the backpressure, bounded
by ``timeout``. Standard library only.
"""

from __future__ import annotations

import math
import select
import socket
import threading
import time

from .core import check_timeout, connect_unix
from .errors import (
    SendTimeoutError,
    StreamProtocolError,
    ToPulsarError,
)
from .protocol import FlushResult, check_record, encode_producer_record
from .sending import DEFAULT_CHUNK_BYTES, StreamEndpoint, SyncSend, closed_error

__all__ = ["DEFAULT_CHUNK_BYTES", "FlushResult", "StreamSender"]

RECV_BYTES = 64 * 1024
# Linux: report EPIPE instead of raising SIGPIPE when the daemon has gone away.
SEND_FLAGS = getattr(socket, "MSG_NOSIGNAL", 0)
# Errors on a write or read that mean the daemon closed the connection.

_time_ns = time.time_ns
_monotonic = time.monotonic


class StreamSender(SyncSend, StreamEndpoint):
    """Send messages over the daemon's stream socket and confirm them with :meth:`flush`.

    Connects at construction (:class:`DaemonUnavailableError` if no daemon is
    listening). ``socket_path`` defaults to ``$TO_PULSAR_STREAM_SOCKET``, else
    ``/run/pulsar-bruce/bruce.stream.sock``. ``timeout`` (seconds; None: forever)
    bounds how long a write may block while the daemon applies backpressure, and is
    the default wait of :meth:`flush`.

    Threads may share a sender: writes are serialised, and a flush holds the write
    side only while it writes, so other threads keep sending while it waits for its
    answer. A :class:`SendTimeoutError` keeps the connection usable: a timed-out
    ``send()`` did not take its message, and the counts of a timed-out ``flush()``
    are added to the result of the next one. Leaving the ``with`` block normally
    writes out what is still buffered (without waiting for a confirmation); leaving
    it with an exception drops the buffer.
    """

    __slots__ = ("_read_lock", "_sock", "_state_lock", "_write_lock")

    def _setup(self) -> None:
        self._write_lock = threading.Lock()  # the outgoing buffer and the socket's send side
        self._read_lock = threading.Lock()  # one thread at a time reads answers
        self._state_lock = threading.Lock()  # answers, briefly
        self._sock = connect_unix(self._path, socket.SOCK_STREAM, self._timeout)
        # Non-blocking, with waits in poll(): a socket timeout would be shared by the
        # thread writing and the thread reading.
        self._sock.setblocking(False)

    def send_raw(self, record: bytes) -> None:
        """Queue an already encoded AnyPartition/PartitionKey record (e.g. encoded once)."""
        check_record(record)
        self._append(bytes(record))

    def send_encoded(self, records: bytes, count: int) -> None:
        """Queue ``count`` records encoded back to back (e.g. a batch from
        :func:`to_pulsar.bulk.encode_columns`): one lock and one copy for all of them.

        Unlike :meth:`send_raw` the records are not parsed here, so ``count`` is taken
        on trust: a wrong one fails the next flush (the daemon counts what it parsed)
        with :class:`StreamProtocolError`, never a silently wrong confirmation.
        """
        if count < 0 or (count == 0) != (not records):
            raise ValueError(f"{count} records in {len(records)} bytes")
        if count:
            self._append(records, count)

    def publish_as(self, name: str, first_sequence_id: int = 0) -> None:
        """Publish the messages sent after this under producer ``name``, the n-th on each
        partition with sequence id ``first_sequence_id + n``: with deduplication on, the
        broker stores once what a retry under the same name and ids sends again.

        Must come first on the connection (:class:`ToPulsarError` otherwise); a connection
        that began with it may call it again to switch name or base. A bad name or id
        (:func:`~to_pulsar.protocol.encode_producer_record`): :class:`ValueError`.
        """
        record = encode_producer_record(name, first_sequence_id)
        with self._write_lock:
            self._check_open()
            state = self._state
            state.check_producer()
            state.append(record, 0)  # not a message: no flush counts it
            state.named = True

    def flush(self, timeout: float | None = None) -> FlushResult:
        """Write out everything buffered and wait until the daemon has settled it.

        Returns the counts for every message sent since the previous flush (plus
        those of flushes that timed out before). ``timeout`` (seconds) defaults to
        the sender's; past it :class:`SendTimeoutError`. If the daemon closes the
        connection: :class:`StreamClosedError`.
        """
        wait = self._timeout if timeout is None else check_timeout(timeout)
        deadline = None if wait is None else _monotonic() + wait
        state = self._state
        with self._write_lock:
            self._check_open()
            request_id = state.request_flush()
            try:
                self._write_out(deadline, wait)
            except SendTimeoutError:
                self._abandon(request_id)  # its request goes out with the next write
                raise
        try:
            self._await_answer(request_id, deadline)
        except TimeoutError:
            self._abandon(request_id)
            raise SendTimeoutError(
                f"no flush confirmation from the daemon on {self._path} within {wait}s "
                f"({self.unconfirmed} messages unconfirmed; they count in the next flush)"
            ) from None
        with self._state_lock:
            return state.take(request_id)

    def close(self) -> None:
        """Write out what is still buffered (up to ``timeout``) and close. Idempotent.

        Nothing is confirmed by closing: call :meth:`flush` first for that. If the
        buffer cannot be written, the socket is closed anyway and the error raised.
        """
        with self._write_lock:
            if self._closed is not None:
                return
            try:
                if self._state.out:
                    deadline = None if self._timeout is None else _monotonic() + self._timeout
                    self._write_out(deadline, self._timeout)
            finally:
                self._shut(ToPulsarError("StreamSender is closed"))

    def abort(self) -> None:
        """Close at once, dropping whatever is still buffered. Idempotent."""
        self._shut(ToPulsarError("StreamSender is closed"))

    def __repr__(self) -> str:
        state = "closed" if self._closed is not None else "open"
        return f"<StreamSender {self._path!r} timeout={self._timeout} {state}>"

    # Internals.

    def _append(self, record: bytes, count: int = 1) -> None:
        with self._write_lock:
            self._check_open()
            state = self._state
            if len(state.out) >= self._chunk:
                # May time out: then this record is not taken (the buffer stays as it was).
                deadline = None if self._timeout is None else _monotonic() + self._timeout
                self._write_out(deadline, self._timeout)
            state.append(record, count)

    def _submit(self, record: bytes, /) -> None:
        """:meth:`send`'s path: while the buffer has room the record joins it right here,
        two Python calls fewer per message than :meth:`_append`, which does the rest."""
        with self._write_lock:
            state = self._state
            if self._closed is None and len(state.out) < self._chunk:
                state.out += record
                state.unconfirmed += 1
                return
        self._append(record)

    def _write_out(self, deadline: float | None, wait: float | None) -> None:
        """Write the whole buffer; on timeout the unwritten rest (even half a record) stays."""
        state = self._state
        sock = self._sock
        written = 0
        try:
            with memoryview(state.out) as view:
                while written < len(view):
                    try:
                        written += sock.send(view[written:], SEND_FLAGS)
                    except BlockingIOError:
                        self._poll(select.POLLOUT, deadline)
        except TimeoutError:
            raise SendTimeoutError(
                f"daemon stream socket {self._path} took no data for longer than {wait}s "
                "(its buffer stays full)"
            ) from None
        except OSError as exc:
            raise self._io_error(exc, "while writing") from exc
        finally:
            state.wrote(written)

    def _await_answer(self, request_id: int, deadline: float | None) -> None:
        """Read answers until ``request_id``'s has come (TimeoutError past the deadline)."""
        state = self._state
        while True:
            with self._state_lock:
                if state.is_answered(request_id):
                    return
            if not self._read_lock.acquire(timeout=_remaining(deadline)):
                raise TimeoutError
            try:
                # Another thread may have read our answer while we waited for the lock.
                with self._state_lock:
                    if state.is_answered(request_id):
                        return
                self._check_open()
                try:
                    data = self._sock.recv(RECV_BYTES)
                except BlockingIOError:
                    self._poll(select.POLLIN, deadline)
                    continue
                except OSError as exc:
                    raise self._io_error(exc, "while waiting for a flush confirmation") from exc
                if not data:
                    raise self._fail(
                        closed_error(self._path, self.unconfirmed, "before answering a flush")
                    )
                try:
                    with self._state_lock:
                        state.received(data)
                except StreamProtocolError as exc:
                    raise self._fail(exc) from None
            finally:
                self._read_lock.release()

    def _abandon(self, request_id: int) -> None:
        with self._state_lock:
            self._state.abandon(request_id)

    def _poll(self, events: int, deadline: float | None) -> None:
        """Wait until the socket is ready for ``events``; TimeoutError past the deadline."""
        self._check_open()  # closed by another thread: no fd to wait on
        poller = select.poll()
        poller.register(self._sock, events | select.POLLERR | select.POLLHUP)
        remaining = _remaining(deadline)
        timeout_ms = None if remaining < 0 else math.ceil(remaining * 1000)
        if not poller.poll(timeout_ms):
            raise TimeoutError

    def _shut(self, reason: ToPulsarError) -> None:
        if self._closed is None:
            self._closed = reason
            self._sock.close()


def _remaining(deadline: float | None) -> float:
    """Seconds left until ``deadline`` (-1: no deadline); TimeoutError once it has passed."""
    if deadline is None:
        return -1
    remaining = deadline - _monotonic()
    if remaining <= 0:
        raise TimeoutError
    return remaining
