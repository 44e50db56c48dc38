"""The UNIX datagram socket: creation, and draining it on every wake-up.

Per datagram the reader does one ``recv_into`` into a preallocated buffer,
one copy of the bytes actually received, and one call into the forwarder.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import mmap
import os
import socket
import stat
from collections.abc import Callable
from pathlib import Path

from pulsar_bruce.model.groups import group_id

#: Receive buffer we ask the kernel for; it caps it at net.core.rmem_max.
_RCVBUF_BYTES = 8 * 1024 * 1024
#: Datagrams handled per wake-up before yielding to timers and receipts.
_MAX_PER_WAKEUP = 20_000


class SocketInUseError(Exception):
    """Another process is receiving on the socket path, or the path is not a socket."""


class InsecureSocketDirectoryError(PermissionError):
    """The socket's directory lets anyone replace the socket (world-writable, no sticky bit)."""


def check_socket_directory(path: str) -> None:
    """Refuse a directory where any user could delete or replace our socket file."""
    directory = Path(path).parent
    try:
        mode = directory.stat().st_mode
    except OSError:
        return  # binding will say what is wrong with it
    if mode & stat.S_IWOTH and not mode & stat.S_ISVTX:
        raise InsecureSocketDirectoryError(
            f"refusing to create the socket in {directory}: the directory is world-writable "
            "without the sticky bit, so anyone could replace the socket; use a directory "
            "only the daemon's user can write to (e.g. /run/pulsar-bruce)"
        )


def open_datagram_socket(path: str, mode: int, group: str | None = None) -> socket.socket:
    """Bind a UNIX datagram socket at ``path`` with permissions ``mode`` and group ``group``.

    A stale socket file (nobody receiving) is removed; a live one, or a path
    that is not a socket, makes us refuse to start, and so does a
    world-writable directory without the sticky bit.
    """
    check_socket_directory(path)
    target = Path(path)
    _remove_stale_socket(target)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    bound = False
    try:
        # Bind with no permissions at all, then set the group, then the mode: the file
        # never exists with looser permissions or for the wrong group.
        old_umask = os.umask(0o777)
        try:
            sock.bind(path)
            bound = True
        finally:
            os.umask(old_umask)
        if group is not None:
            try:
                os.chown(path, -1, group_id(group))
            except (KeyError, OSError) as exc:
                detail = "unknown group" if isinstance(exc, KeyError) else exc.strerror
                raise PermissionError(f"cannot give {path} to group {group!r}: {detail}") from None
        os.chmod(path, mode)
        sock.setblocking(False)
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, _RCVBUF_BYTES)
    except BaseException:
        sock.close()
        if bound:
            with contextlib.suppress(OSError):
                os.unlink(path)
        raise
    return sock


def _remove_stale_socket(target: Path) -> None:
    try:
        info = target.lstat()
    except FileNotFoundError:
        return
    if not stat.S_ISSOCK(info.st_mode):
        raise SocketInUseError(f"{target} exists and is not a socket; refusing to replace it")
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    try:
        probe.connect(str(target))
    except OSError as exc:
        if exc.errno not in (errno.ECONNREFUSED, errno.ENOENT):
            raise
        target.unlink(missing_ok=True)
        return
    finally:
        probe.close()
    raise SocketInUseError(f"another process is receiving on {target}")


class DatagramReader:
    """Reads every queued datagram when the socket becomes readable."""

    def __init__(
        self,
        sock: socket.socket,
        handle: Callable[[bytes], None],
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
