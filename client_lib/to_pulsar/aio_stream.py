"""asyncio :class:`~to_pulsar.stream.StreamSender`: confirmed delivery without blocking the loop.

A write the daemon does not take (backpressure) waits for writability with
``loop.add_writer``, and a flush waits for the confirmation with ``loop.add_reader``;
the framing and bookkeeping are :class:`~to_pulsar.protocol.StreamState`, shared
with the sync sender.
"""

from __future__ import annotations

import asyncio
import socket

from .core import check_timeout, connect_unix
from .errors import SendTimeoutError, StreamProtocolError, ToPulsarError
from .protocol import FlushResult, check_record, encode_producer_record
from .sending import AsyncSend, StreamEndpoint, closed_error
from .stream import RECV_BYTES, SEND_FLAGS

__all__ = ["AsyncStreamSender"]


class AsyncStreamSender(AsyncSend, StreamEndpoint):
    """asyncio :class:`~to_pulsar.stream.StreamSender`: ``await send()``, ``await flush()``.

    Connects at construction (no event loop needed; :class:`DaemonUnavailableError`
    if nobody listens). Same arguments, results and errors as the sync client; a
    write the daemon does not take (backpressure) waits on the event loop, up to
    ``timeout``. Sends from concurrent tasks keep their order, and go on while a
    flush waits for its answer. A cancelled or timed-out write keeps the connection
    usable: what was not written stays buffered.

    ``async with`` writes out what is buffered on a normal exit (:meth:`aclose`) and
    drops it on an exception (:meth:`abort`), as the sync sender does.
    :meth:`close`, like every sender's, never drops silently: it cannot wait, so it
    writes what the socket takes at once and raises for the rest.
    """

    __slots__ = ("_io_waits", "_read_lock", "_sock", "_waiting", "_write_lock")

    def _setup(self) -> None:
        # Created lazily in the running loop: writes (and flush requests) go out one
        # task at a time, and one task at a time reads answers.
        self._write_lock: asyncio.Lock | None = None
        self._read_lock: asyncio.Lock | None = None
        self._waiting = 0  # sends queued for the write lock; later sends queue behind them
        # The futures tasks sleep on for readiness (key: readable?), so close() can wake them.
        self._io_waits: dict[bool, asyncio.Future[None]] = {}
        self._sock = connect_unix(self._path, socket.SOCK_STREAM, self._timeout)
        self._sock.setblocking(False)

    async def send_raw(self, record: bytes) -> None:
        """Queue an already encoded AnyPartition/PartitionKey record."""
        check_record(record)
        await self._append(bytes(record))

    async def publish_as(self, name: str, first_sequence_id: int = 0) -> None:
        """Publish what is sent after this under producer ``name`` with sequence ids from
        ``first_sequence_id`` (as :meth:`StreamSender.publish_as`); first on the connection."""
        record = encode_producer_record(name, first_sequence_id)
        self._check_open()
        state = self._state
        state.check_producer()
        named = state.named
        state.named = True  # sends queued behind this record are the named producer's
        try:
            await self._append(record, 0)
        except BaseException:
            state.named = named
            raise

    async def flush(self, timeout: float | None = None) -> FlushResult:
        """Write out the buffer, wait for the daemon's counts (as :meth:`StreamSender.flush`)."""
        wait = self._timeout if timeout is None else check_timeout(timeout)
        loop = asyncio.get_running_loop()
        deadline = None if wait is None else loop.time() + wait
        state = self._state
        request_id: int | None = None
        try:
            async with asyncio.timeout_at(deadline):
                async with self._lock("_write_lock"):
                    self._check_open()
                    request_id = state.request_flush()
                    await self._write_out(loop)
                while not state.is_answered(request_id):
                    async with self._lock("_read_lock"):
                        if not state.is_answered(request_id):
                            await self._read_answers(loop)
        except TimeoutError:
            if request_id is None:  # still waiting for the write lock: nothing requested
                raise SendTimeoutError(
                    f"daemon stream socket {self._path}: no flush within {wait}s "
                    "(other writes held the connection)"
                ) from None
            state.abandon(request_id)
            raise SendTimeoutError(
                f"no flush confirmation from the daemon on {self._path} within {wait}s "
                f"({self.unconfirmed} messages unconfirmed; they count in the next flush)"
            ) from None
        except BaseException:
            if request_id is not None and not state.is_answered(request_id):
                state.abandon(request_id)  # e.g. cancelled: the next flush gets its counts
            raise
        return state.take(request_id)

    async def aclose(self) -> None:
        """Write out what is still buffered (up to ``timeout``), then close. Idempotent."""
        if self._closed is not None:
            return
        try:
            if self._state.out:
                async with asyncio.timeout(self._timeout), self._lock("_write_lock"):
                    if self._closed is None:
                        await self._write_out(asyncio.get_running_loop())
        except TimeoutError:
            raise self._write_timed_out(self._timeout) from None
        finally:
            self.close()

    def close(self) -> None:
        """Write out what the socket takes without waiting, then close. Idempotent.

        Records still buffered after that are not dropped silently: the sender is
        closed and :class:`SendTimeoutError` says how many bytes were not written
        (``await aclose()`` waits for room instead).
        """
        if self._closed is not None:
            return
        state = self._state
        written = 0
        if state.out and not self._io_waits:  # a waiting writer owns the buffer
            try:
                with memoryview(state.out) as view:
                    while written < len(view):
                        written += self._sock.send(view[written:], SEND_FLAGS)
            except OSError:
                pass
            state.wrote(written)
        left = len(state.out)
        self._shut(ToPulsarError("AsyncStreamSender is closed"))
        if left:
            raise SendTimeoutError(
                f"AsyncStreamSender closed with {left} bytes not written to {self._path} "
                "(the daemon took no more without waiting; use await aclose())"
            )

    def abort(self) -> None:
        """Close at once, dropping whatever is still buffered (as on an exception). Idempotent."""
        self._shut(ToPulsarError("AsyncStreamSender is closed"))

    def __repr__(self) -> str:
        state = "closed" if self._closed is not None else "open"
        return f"<AsyncStreamSender {self._path!r} timeout={self._timeout} {state}>"

    # Internals.

    def _lock(self, name: str) -> asyncio.Lock:
        lock: asyncio.Lock | None = getattr(self, name)
        if lock is None:
            lock = asyncio.Lock()
            setattr(self, name, lock)
        return lock

    async def _append(self, record: bytes, count: int = 1) -> None:
        self._check_open()
        state = self._state
        if not self._waiting and len(state.out) < self._chunk:
            state.append(record, count)  # fast path: room in the buffer, nobody queued before
            return
        self._waiting += 1
        try:
            async with asyncio.timeout(self._timeout), self._lock("_write_lock"):
                self._check_open()
                if len(state.out) >= self._chunk:
                    await self._write_out(asyncio.get_running_loop())
        except TimeoutError:
            raise self._write_timed_out(self._timeout) from None
        finally:
            self._waiting -= 1
        state.append(record, count)

    _submit = _append

    async def _write_out(self, loop: asyncio.AbstractEventLoop) -> None:
        """Write the whole buffer, waiting for writability on the loop (the caller's
        ``asyncio.timeout`` bounds it).

        No memoryview outlives an ``await`` (other tasks append to the buffer
        meanwhile); what the kernel took is removed even on timeout or cancellation.
        """
        state = self._state
        sock = self._sock
        written = 0
        try:
            while written < len(state.out):
                try:
                    with memoryview(state.out) as view:
                        written += sock.send(view[written:], SEND_FLAGS)
                    continue
                except BlockingIOError:
                    pass
                except OSError as exc:
                    raise self._io_error(exc, "while writing") from exc
                await self._wait_io(loop, readable=False)
        finally:
            state.wrote(written)

    async def _read_answers(self, loop: asyncio.AbstractEventLoop) -> None:
        """Read once (waiting for data) and decode what came."""
        while True:
            self._check_open()
            try:
                data = self._sock.recv(RECV_BYTES)
                break
            except BlockingIOError:
                await self._wait_io(loop, readable=True)
            except OSError as exc:
                raise self._io_error(exc, "while waiting for a flush confirmation") from exc
        if not data:
            raise self._fail(closed_error(self._path, self.unconfirmed, "before answering a flush"))
        try:
            self._state.received(data)
        except StreamProtocolError as exc:
            raise self._fail(exc) from None

    async def _wait_io(self, loop: asyncio.AbstractEventLoop, *, readable: bool) -> None:
        """Sleep until the socket is readable/writable, or close() is called."""
        waiter: asyncio.Future[None] = loop.create_future()
        fd = self._sock.fileno()

        def ready() -> None:
            if not waiter.done():
                waiter.set_result(None)

        if readable:
            loop.add_reader(fd, ready)
        else:
            loop.add_writer(fd, ready)
        self._io_waits[readable] = waiter
        try:
            await waiter
        finally:
            self._io_waits.pop(readable, None)
            if self._closed is None:  # else close() has unregistered it
                if readable:
                    loop.remove_reader(fd)
                else:
                    loop.remove_writer(fd)
        self._check_open()

    def _write_timed_out(self, wait: float | None) -> SendTimeoutError:
        return SendTimeoutError(
            f"daemon stream socket {self._path} took no data for longer than {wait}s "
            "(its buffer stays full)"
        )

    def _shut(self, reason: ToPulsarError) -> None:
        if self._closed is not None:
            return
        self._closed = reason
        fd = self._sock.fileno()
        for readable, waiter in list(self._io_waits.items()):
            # Unregister before closing: the selector must not keep a closed (reusable) fd.
            if readable:
                waiter.get_loop().remove_reader(fd)
            else:
                waiter.get_loop().remove_writer(fd)
            if not waiter.done():
                waiter.set_result(None)  # the woken task sees the sender closed
        self._io_waits.clear()
        self._sock.close()
