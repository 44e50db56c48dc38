"""The senders' shared core: the errno table, timeouts, and the same behaviour from every sender.

Sender and AsyncSender must react alike to a daemon that shuts its socket for
reading (EPIPE, as pulsar-bruce does at shutdown) and to one that is gone; every
sender's close() keeps what it was handed (none drops silently).
"""

from __future__ import annotations

import asyncio
import errno
import math
import socket
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from to_pulsar import AsyncSender, Sender
from to_pulsar.aio import AsyncStreamSender
from to_pulsar.core import (
    RAISE,
    RECONNECT,
    WAIT,
    check_timeout,
    encode_message,
    send_action,
    send_error,
)
from to_pulsar.encoding import encode_any_partition, encode_partition_key
from to_pulsar.errors import (
    DaemonUnavailableError,
    MessageTooLargeError,
    SendTimeoutError,
    ToPulsarError,
)
from to_pulsar.stream import StreamSender


@pytest.mark.parametrize(
    ("exc", "action"),
    [
        (BrokenPipeError(errno.EPIPE, "Broken pipe"), RECONNECT),
        (ConnectionRefusedError(errno.ECONNREFUSED, "refused"), RECONNECT),
        (FileNotFoundError(errno.ENOENT, "gone"), RECONNECT),
        (OSError(errno.ENOTCONN, "not connected"), RECONNECT),
        (BlockingIOError(errno.EAGAIN, "again"), WAIT),
        (TimeoutError(errno.EAGAIN, "timed out"), WAIT),
        (OSError(errno.EMSGSIZE, "too long"), RAISE),
        (OSError(errno.EACCES, "denied"), RAISE),
    ],
)
def test_one_errno_table(exc: OSError, action: str) -> None:
    assert send_action(exc) == action


def test_send_errors_are_the_clients_exceptions() -> None:
    assert isinstance(send_error(OSError(errno.EMSGSIZE, "x"), "/s", 9, 1.0), MessageTooLargeError)
    full = send_error(BlockingIOError(errno.EAGAIN, "x"), "/s", 9, 0)
    assert isinstance(full, SendTimeoutError) and "timeout=0" in str(full)
    assert "2.5s" in str(send_error(TimeoutError(errno.EAGAIN, "x"), "/s", 9, 2.5))
    gone = send_error(BrokenPipeError(errno.EPIPE, "Broken pipe"), "/s", 9, 1.0)
    assert isinstance(gone, DaemonUnavailableError)
    other = send_error(OSError(errno.EACCES, "denied"), "/s", 9, 1.0)
    assert type(other) is ToPulsarError and "denied" in str(other)


def test_check_timeout() -> None:
    assert check_timeout(None) is None and check_timeout(math.inf) is None
    assert check_timeout(0) == 0.0 and check_timeout(2) == 2.0
    for bad in (-1, math.nan):
        with pytest.raises(ValueError, match="timeout must be >= 0"):
            check_timeout(bad)
    for sender in (Sender, AsyncSender, StreamSender, AsyncStreamSender):
        with pytest.raises(ValueError, match="timeout must be >= 0"):
            sender("/nonexistent", timeout=-1)


def test_encode_message_is_the_wire_format() -> None:
    assert encode_message("t", b"v", b"k", None, 5) == encode_any_partition("t", b"v", b"k", 5)
    assert encode_message("t", b"v", None, 7, 0) == encode_partition_key(7, "t", b"v", b"", 0)


# -- the same daemon behaviour seen by both datagram senders --------------------------------


@pytest.fixture
def path() -> Iterator[Path]:
    with tempfile.TemporaryDirectory() as directory:
        yield Path(directory) / "bruce.sock"


def _daemon(path: Path) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(str(path))
    sock.settimeout(5)
    return sock


def _restart(path: Path, old: socket.socket) -> socket.socket:
    """What the daemon does at shutdown (shut the receive side: senders get EPIPE while it
    drains) and a new daemon after it; the old one is still open."""
    old.shutdown(socket.SHUT_RD)
    path.unlink()
    return _daemon(path)


def _sync_send(path: Path) -> Callable[[bytes], None]:
    sender = Sender(path, timeout=1)
    return lambda value: sender.send("t", value)


def _async_send(path: Path) -> Callable[[bytes], None]:
    sender = AsyncSender(path, timeout=1)
    return lambda value: asyncio.run(sender.send("t", value))


@pytest.mark.parametrize("make", [_sync_send, _async_send], ids=["Sender", "AsyncSender"])
def test_both_reconnect_after_a_daemon_restart_with_epipe(
    path: Path, make: Callable[[Path], Callable[[bytes], None]]
) -> None:
    daemon = _daemon(path)
    send = make(path)
    send(b"one")
    assert daemon.recv(1024).endswith(b"one")
    new = _restart(path, daemon)
    send(b"two")  # EPIPE on the old socket: reconnected, sent to the new daemon
    assert new.recv(1024).endswith(b"two")
    daemon.close()
    new.close()


@pytest.mark.parametrize("make", [_sync_send, _async_send], ids=["Sender", "AsyncSender"])
def test_both_raise_daemon_unavailable_when_it_is_gone(
    path: Path, make: Callable[[Path], Callable[[bytes], None]]
) -> None:
    daemon = _daemon(path)
    send = make(path)
    daemon.shutdown(socket.SHUT_RD)
    path.unlink()
    with pytest.raises(DaemonUnavailableError):
        send(b"lost")
    daemon.close()


def test_datagram_senders_close_then_refuse(path: Path) -> None:
    daemon = _daemon(path)
    sender = Sender(path)
    sender.close()
    sender.close()
    with pytest.raises(ToPulsarError, match="closed"):
        sender.send("t", b"x")
    aio = AsyncSender(path)
    aio.close()
    with pytest.raises(ToPulsarError, match="closed"):
        asyncio.run(aio.send("t", b"x"))
    daemon.close()


# -- close() of the stream senders writes out what was sent ---------------------------------


def _listener(path: Path) -> socket.socket:
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(path))
    listener.listen(1)
    listener.settimeout(5)
    return listener


def _read_all(conn: socket.socket) -> bytes:
    data = b""
    while chunk := conn.recv(65536):
        data += chunk
    return data


def test_stream_senders_close_writes_out_the_buffer(path: Path) -> None:
    listener = _listener(path)
    sender = StreamSender(path, timeout=5)
    conn, _ = listener.accept()
    sender.send("t", b"buffered", timestamp_ms=0)
    sender.close()
    assert _read_all(conn) == encode_any_partition("t", b"buffered", b"", 0)
    conn.close()

    async def async_side() -> None:
        aio = AsyncStreamSender(path, timeout=5)
        await aio.send("t", b"buffered too", timestamp_ms=0)
        aio.close()

    asyncio.run(async_side())
    conn, _ = listener.accept()
    assert _read_all(conn) == encode_any_partition("t", b"buffered too", b"", 0)
    conn.close()
    listener.close()


def test_async_stream_close_raises_for_what_it_could_not_write(path: Path) -> None:
    """A daemon that reads nothing (backpressure): close() cannot wait, so it says so."""
    listener = _listener(path)

    async def main() -> None:
        aio = AsyncStreamSender(path, timeout=5, chunk_bytes=1 << 30)
        for _ in range(2000):  # far more than the socket buffers take without a reader
            await aio.send("t", b"x" * 4096, timestamp_ms=0)
        with pytest.raises(SendTimeoutError, match="bytes not written"):
            aio.close()
        assert aio.closed

    asyncio.run(main())
    listener.close()
