"""The UNIX datagram socket, drained on every wake-up (``unix_sockets`` creates it).

Per datagram the reader does one ``recv_into`` into a preallocated buffer,
one copy of the bytes actually received, and one call into the intake.
"""

from __future__ import annotations

import asyncio
import contextlib
import mmap
import socket
from collections.abc import Callable

#: Datagrams handled per wake-up before yielding to timers and receipts.
_MAX_PER_WAKEUP = 20_000


class DatagramReader:
    """Reads every queued datagram when the socket becomes readable."""

    def __init__(
        self,
        sock: socket.socket,
        handle: Callable[[bytes], object],
        after_drain: Callable[[], None],
        max_datagram_bytes: int,
    ):
        self.sock = sock
        self._handle = handle
        self._after_drain = after_drain
        # One byte more than the limit, so an oversized datagram is seen as such, not
        # truncated.  Anonymous mmap: pages cost memory only once a datagram that large
        # has been written into them (a zero-filled bytearray would cost it all up front).
        self._buffer = mmap.mmap(-1, max_datagram_bytes + 1)
        self._view = memoryview(self._buffer)
        self._loop: asyncio.AbstractEventLoop | None = None

    def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._loop.add_reader(self.sock.fileno(), self.drain)

    def stop(self) -> None:
        """Stop watching the socket (datagrams keep queueing in the kernel)."""
        if self._loop is not None:
            self._loop.remove_reader(self.sock.fileno())
            self._loop = None

    def close_after_final_drain(self, refuse_new: bool) -> None:
        """Shutdown: take what is queued, then close.

        ``refuse_new`` (our own socket, not systemd's): shut the receive side
        first, so a sender that is still connected gets EPIPE instead of
        queueing a datagram that ``close()`` would silently drop.  A shut,
        empty non-blocking socket still answers EAGAIN, which ends the drain
        (a 0-byte read is a real, empty datagram, and is counted).
        """
        self.stop()
        if refuse_new:
            with contextlib.suppress(OSError):
                self.sock.shutdown(socket.SHUT_RD)
        while self.drain():
            pass
        self.sock.close()

    def drain(self) -> int:
        """Handle every datagram queued right now (bounded per call); returns how many."""
        recv_into = self.sock.recv_into
        view = self._view
        handle = self._handle
        count = 0
        try:
            while count < _MAX_PER_WAKEUP:
                size = recv_into(view)
                handle(view[:size].tobytes())
                count += 1
        except (BlockingIOError, InterruptedError):
            pass
        self._after_drain()
        return count
