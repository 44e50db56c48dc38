"""The sending side: one connected UNIX datagram socket to the local daemon."""

from __future__ import annotations

import math
import socket
import struct
import time
from collections.abc import Callable, Iterable, Sequence

from . import mmsg
from .core import (
    RECONNECT,
    connect_unix,
    encode_message,
    gone_again_error,
    send_action,
    send_error,
)
from .encoding import Payload
from .errors import ToPulsarError
from .sending import DatagramEndpoint, SyncSend

__all__ = ["Message", "Sender"]

#: One message for :meth:`Sender.send_many`: ``(topic, value)``, ``(topic, value, key)``
#: or ``(topic, value, key, partition_key)``; a key or partition key may be None.
Message = (
    tuple[str | bytes, Payload]
    | tuple[str | bytes, Payload, Payload | None]
    | tuple[str | bytes, Payload, Payload | None, int | None]
)

_time_ns = time.time_ns


def _apply_timeout(sock: socket.socket, timeout: float | None) -> None:
    """Let the kernel wait for queue space: one syscall per send even with a timeout.

    A blocking socket with SO_SNDTIMEO fails with EAGAIN once the timeout expires;
    0 means non-blocking (SO_SNDTIMEO 0 would mean "forever").
    """
    if timeout == 0:
        sock.setblocking(False)
        return
    sock.setblocking(True)
    if timeout is not None:
        micros = max(1, math.ceil(timeout * 1_000_000))
        sec, usec = divmod(micros, 1_000_000)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, struct.pack("@ll", sec, usec))


def _encode_tuple(message: Message, timestamp_ms: int) -> bytes:
    """One :data:`Message` tuple, encoded."""
    key: Payload | None = None
    partition_key: int | None = None
    if len(message) == 2:
        topic, value = message
    elif len(message) == 3:
        topic, value, key = message
    else:
        topic, value, key, partition_key = message
    return encode_message(topic, value, key, partition_key, timestamp_ms)


def _closed_send(datagram: bytes, /) -> int:
    """Stands in for ``socket.send`` after close(), so send() needs no "closed?" check."""
    raise ToPulsarError("Sender is closed")


class Sender(SyncSend, DatagramEndpoint):
    """Send Bruce-format messages to the local pulsar-bruce daemon.

    Connects at construction so a missing daemon is reported early. ``timeout`` is
    how long a send may wait for room in the daemon's socket queue: ``None`` blocks
    forever, ``0`` never blocks. Sending from several threads is safe (each datagram
    is one atomic syscall); reconnecting after a daemon restart is best-effort.

    The timeout is enforced by the kernel (SO_SNDTIMEO), not ``socket.settimeout()``,
    which would poll() before every send and double the syscalls per message.
    """

    __slots__ = ("_send", "_sock")

    _send: Callable[[bytes], int]

    def _setup(self) -> None:
        self._sock = self._connect()
        self._send = self._sock.send

    def send_raw(self, datagram: bytes) -> None:
        """Send an already encoded datagram (e.g. one encoded once and sent many times)."""
        try:
            self._send(datagram)
        except OSError as exc:
            self._recover(datagram, exc)

    _submit = send_raw

    def send_many(self, messages: Iterable[Message], *, timestamp_ms: int | None = None) -> None:
        """Encode and send many messages, in order, with as few system calls as possible.

        Each message is a tuple ``(topic, value[, key[, partition_key]])``. All of them
        get the same ``timestamp_ms`` (default: now, once for the call). On Linux the
        datagrams go out up to 1024 per ``sendmmsg`` call; elsewhere one ``send`` each.
        Errors and reconnecting are those of :meth:`send`; when one is raised, the
        messages before the failed one were sent and it and those after it were not
        (the exception's note says how many were sent). Every message is encoded
        before anything is sent, so an invalid one sends nothing.
        """
        if timestamp_ms is None:
            timestamp_ms = _time_ns() // 1_000_000
        datagrams = [_encode_tuple(message, timestamp_ms) for message in messages]
        self.send_many_raw(datagrams)

    def send_many_raw(self, datagrams: Sequence[bytes]) -> None:
        """Send already encoded datagrams, in order, as :meth:`send_many` does."""
        sent = 0
        try:
            while sent < len(datagrams):
                if self._send is _closed_send:
                    _closed_send(b"")
                sendmmsg = mmsg.load()
                if sendmmsg is None:
                    self.send_raw(datagrams[sent])
                    sent += 1
                    continue
                try:
                    sent += sendmmsg(self._sock.fileno(), datagrams, sent)
                except OSError as exc:
                    self._recover(datagrams[sent], exc)  # resends it, or raises
                    sent += 1
        except ToPulsarError as exc:
            exc.add_note(f"{sent} of {len(datagrams)} messages were sent before this error")
            raise

    def close(self) -> None:
        """Close the socket; later sends raise ToPulsarError. Idempotent.

        Nothing is buffered here: every send was one datagram, handed to the daemon.
        """
        self._send = _closed_send
        self._sock.close()

    def __repr__(self) -> str:
        state = "closed" if self._send is _closed_send else "open"
        return f"<Sender {self._path!r} timeout={self._timeout} {state}>"

    # Slow paths: kept out of send() so the common case stays a single call.

    def _connect(self) -> socket.socket:
        sock = connect_unix(self._path, socket.SOCK_DGRAM)
        _apply_timeout(sock, self._timeout)
        return sock

    def _reconnect(self) -> None:
        """Replace the socket after a daemon restart; on failure keep the old, dead one.

        The old socket is disconnected by the kernel, so the next send fails with
        ENOTCONN and tries to reconnect again.
        """
        new = self._connect()
        old = self._sock
        self._sock = new
        self._send = new.send
        old.close()

    def _recover(self, datagram: bytes, exc: OSError) -> None:
        """Handle a failed send: reconnect once if the daemon went away, else translate."""
        if send_action(exc) == RECONNECT:
            self._reconnect()
            try:
                self._send(datagram)
                return
            except OSError as retry_exc:
                if send_action(retry_exc) == RECONNECT:
                    raise gone_again_error(retry_exc, self._path) from retry_exc
                exc = retry_exc
        raise send_error(exc, self._path, len(datagram), self._timeout) from exc
