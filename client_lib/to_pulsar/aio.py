"""asyncio variants of :class:`to_pulsar.Sender` and :class:`to_pulsar.stream.StreamSender`.

Sends never block the event loop.

AsyncSender's socket is non-blocking. A send that finds the daemon's queue full
(EAGAIN) waits for the socket to become writable with ``loop.add_writer`` (the
kernel wakes it when the daemon reads), up to ``timeout``, then raises
:class:`SendTimeoutError`. Sends that had to wait go out in the order they were
made; a send only skips the line when nobody is waiting.

AsyncStreamSender waits the same way for a stream socket the daemon has stopped
reading (backpressure), and with ``loop.add_reader`` for flush confirmations.
"""

from __future__ import annotations

import asyncio
import socket

from .aio_stream import AsyncStreamSender
from .core import (
    RECONNECT,
    WAIT,
    connect_unix,
    gone_again_error,
    send_action,
    send_error,
)
from .errors import SendTimeoutError, ToPulsarError
from .protocol import FlushResult
from .sending import AsyncSend, DatagramEndpoint

__all__ = ["AsyncSender", "AsyncStreamSender", "FlushResult"]


class AsyncSender(AsyncSend, DatagramEndpoint):
    """Send Bruce-format messages to the local pulsar-bruce daemon from asyncio code.

    Connects at construction (no event loop needed) so a missing daemon is reported
    early. ``timeout`` is how long a send may wait for room in the daemon's socket
    queue: ``None`` waits forever, ``0`` never waits. Errors are those of the sync
    :class:`~to_pulsar.Sender`; reconnecting after a daemon restart is best-effort.
    """

    __slots__ = ("_closed", "_lock", "_sock", "_waiter", "_waiting")

    def _setup(self) -> None:
        self._closed = False
        # Serialises the sends that have to wait; created lazily in the running loop.
        self._lock: asyncio.Lock | None = None
        self._waiting = 0  # sends in _send_waiting(); later sends queue behind them
        # The future a waiting send sleeps on, so close() can wake it.
        self._waiter: asyncio.Future[None] | None = None
        self._sock = self._connect()

    async def send_raw(self, datagram: bytes) -> None:
        """Send an already encoded datagram, waiting (up to the timeout) while the queue is full."""
        if self._closed:
            raise ToPulsarError("AsyncSender is closed")
        if not self._waiting or self._timeout == 0:
            # Fast path: nobody is waiting, so trying right away keeps the order.
            if self._try_send(datagram):
                return
            if self._timeout == 0:
                raise SendTimeoutError(f"daemon socket {self._path} queue is full (timeout=0)")
        await self._send_waiting(datagram)

    _submit = send_raw

    def close(self) -> None:
        """Close the socket; a send waiting for room and later sends raise ToPulsarError.

        Idempotent. Nothing is buffered here: every send was one datagram.
        """
        if self._closed:
            return
        self._closed = True
        waiter = self._waiter
        if waiter is not None:
            # Unregister before closing: the selector must not keep a closed (reusable) fd.
            waiter.get_loop().remove_writer(self._sock.fileno())
            if not waiter.done():
                waiter.set_exception(ToPulsarError("AsyncSender was closed while sending"))
        self._sock.close()

    def __repr__(self) -> str:
        state = "closed" if self._closed else "open"
        return f"<AsyncSender {self._path!r} timeout={self._timeout} {state}>"

    # Slow paths.

    def _try_send(self, datagram: bytes) -> bool:
        """One non-blocking send: True if sent, False if the queue is full; raises otherwise.

        The daemon gone (restarted, or shutting down: EPIPE) means one reconnect.
        """
        try:
            self._sock.send(datagram)
            return True
        except OSError as exc:
            action = send_action(exc)
            if action == WAIT:
                return False
            if action != RECONNECT:
                raise send_error(exc, self._path, len(datagram), self._timeout) from exc
        self._reconnect()
        try:
            self._sock.send(datagram)
            return True
        except OSError as retry_exc:
            action = send_action(retry_exc)
            if action == WAIT:
                return False
            if action == RECONNECT:
                raise gone_again_error(retry_exc, self._path) from retry_exc
            raise send_error(retry_exc, self._path, len(datagram), self._timeout) from retry_exc

    async def _send_waiting(self, datagram: bytes) -> None:
        """Wait in line, then wait for writability and retry until sent or timed out."""
        loop = asyncio.get_running_loop()
        lock = self._lock
        if lock is None:
            lock = self._lock = asyncio.Lock()
        deadline = None if self._timeout is None else loop.time() + self._timeout
        self._waiting += 1
        try:
            async with asyncio.timeout_at(deadline), lock:
                while not self._try_send(datagram):
                    await self._wait_writable(loop)
        except TimeoutError:
            raise SendTimeoutError(
                f"daemon socket {self._path} queue stayed full for longer than "
                f"the {self._timeout}s timeout"
            ) from None
        finally:
            self._waiting -= 1

    async def _wait_writable(self, loop: asyncio.AbstractEventLoop) -> None:
        """Sleep until the kernel reports room in the queue (or close() is called)."""
        if self._closed:
            raise ToPulsarError("AsyncSender was closed while sending")
        waiter: asyncio.Future[None] = loop.create_future()
        fd = self._sock.fileno()

        def on_writable() -> None:
            if not waiter.done():
                waiter.set_result(None)

        loop.add_writer(fd, on_writable)
        self._waiter = waiter
        try:
            await waiter
        finally:
            self._waiter = None
            if not self._closed:  # else close() has unregistered it
                loop.remove_writer(fd)

    def _connect(self) -> socket.socket:
        """A new non-blocking socket connected to the daemon."""
        sock = connect_unix(self._path, socket.SOCK_DGRAM)
        sock.setblocking(False)
        return sock

    def _reconnect(self) -> None:
        """Replace the socket after a daemon restart; on failure keep the old, dead one."""
        new = self._connect()
        old = self._sock
        self._sock = new
        old.close()
