"""Sans-IO pieces every sender shares: argument checks, encoding, connecting, and what an
OSError from a datagram send means.

:class:`~to_pulsar.Sender` and :class:`~to_pulsar.aio.AsyncSender` differ only in how
they wait (the kernel's SO_SNDTIMEO vs the event loop); the decisions are made here
once, as :class:`~to_pulsar.protocol.StreamState` does for the stream senders.
"""

from __future__ import annotations

import errno
import math
import os
import socket
import sys
import time
from collections.abc import Mapping
from typing import Final

from .encoding import (
    Payload,
    encode_any_partition,
    encode_message_record,
    encode_partition_key,
    encode_plain,
)
from .errors import DaemonUnavailableError, MessageTooLargeError, SendTimeoutError, ToPulsarError
from .paths import stream_socket_beside

_time_ns = time.time_ns

#: What a failed datagram send asks for.
RECONNECT: Final = "reconnect"  # the daemon we were connected to is gone: reconnect once
WAIT: Final = "wait"  # its queue is full: wait for room (up to the timeout)
RAISE: Final = "raise"  # anything else: translate and raise

#: errnos meaning "the daemon went away"; EPIPE: it is shutting down and refuses datagrams.
_GONE_ERRNOS = frozenset({errno.ECONNREFUSED, errno.ENOENT, errno.ENOTCONN, errno.EPIPE})
_FULL_ERRNOS = frozenset({errno.EAGAIN, errno.EWOULDBLOCK, errno.ETIMEDOUT})


def send_action(exc: OSError) -> str:
    """The one errno table of the datagram senders: RECONNECT, WAIT or RAISE."""
    if exc.errno in _GONE_ERRNOS:
        return RECONNECT
    if isinstance(exc, BlockingIOError | TimeoutError) or exc.errno in _FULL_ERRNOS:
        return WAIT
    return RAISE


def send_error(exc: OSError, path: str, size: int, timeout: float | None) -> ToPulsarError:
    """The client exception for an OSError from a datagram send."""
    action = send_action(exc)
    if action == WAIT:
        if not timeout:
            return SendTimeoutError(f"daemon socket {path} queue is full (timeout=0)")
        return SendTimeoutError(
            f"daemon socket {path} queue stayed full for longer than the {timeout}s timeout"
        )
    if action == RECONNECT:
        return DaemonUnavailableError(f"no daemon listening on {path} ({exc.strerror})")
    if exc.errno == errno.EMSGSIZE:
        return MessageTooLargeError(size, datagram_limit())
    return ToPulsarError(f"send to {path} failed ({exc.strerror or exc})")


def datagram_limit() -> int | None:
    """The largest datagram this host's UNIX sockets take by default (Linux: the send
    buffer, ``net.core.wmem_default``, less 32 bytes), or None if unknown."""
    if not sys.platform.startswith("linux"):
        return None
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as probe:
        return int(probe.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF)) - 32


def gone_again_error(exc: OSError, path: str) -> DaemonUnavailableError:
    """The send after a reconnect failed the same way."""
    return DaemonUnavailableError(
        f"daemon on {path} went away and did not come back ({exc.strerror})"
    )


def check_timeout(timeout: float | None, what: str = "timeout") -> float | None:
    """Validate a timeout: seconds >= 0, or None (and inf) for "wait forever"."""
    if timeout is None or timeout == math.inf:
        return None
    if not timeout >= 0:  # also rejects NaN
        raise ValueError(f"{what} must be >= 0 or None, got {timeout}")
    return float(timeout)


def encode_message(
    topic: str | bytes,
    value: Payload,
    key: Payload | None,
    partition_key: int | None,
    timestamp_ms: int | None,
    properties: Mapping[str, str] | None = None,
    deliver_at_ms: int | None = None,
    deliver_after_ms: int | None = None,
) -> bytes:
    """One AnyPartition (no ``partition_key``) or PartitionKey message, or with
    ``properties`` or a delivery time a Message record; ``timestamp_ms`` None means now, 0
    means no event time."""
    if deliver_at_ms is not None or deliver_after_ms is not None:
        now = _time_ns() // 1_000_000 if timestamp_ms is None else timestamp_ms
        return encode_message_record(
            topic, value, b"" if key is None else key, now, partition_key, properties,
            deliver_at_ms, deliver_after_ms,
        )  # fmt: skip
    if key is None and not properties and type(value) is bytes:  # the common case first
        if timestamp_ms is None:
            return encode_plain(topic, value, partition_key, _time_ns() // 1_000_000)
        return encode_plain(topic, value, partition_key, timestamp_ms)
    if timestamp_ms is None:
        timestamp_ms = _time_ns() // 1_000_000
    if properties:
        key = b"" if key is None else key
        return encode_message_record(topic, value, key, timestamp_ms, partition_key, properties)
    if partition_key is None:
        return encode_any_partition(topic, value, b"" if key is None else key, timestamp_ms)
    return encode_partition_key(
        partition_key, topic, value, b"" if key is None else key, timestamp_ms
    )


def connect_unix(path: str, kind: socket.SocketKind, timeout: float | None = None) -> socket.socket:
    """A socket of ``kind`` connected to the daemon; nobody there is DaemonUnavailableError."""
    what = "stream socket" if kind == socket.SOCK_STREAM else "socket"
    sock = socket.socket(socket.AF_UNIX, kind)
    try:
        sock.settimeout(timeout)
        sock.connect(path)
    except (FileNotFoundError, ConnectionRefusedError) as exc:
        sock.close()
        where = f"stream socket {path}" if kind == socket.SOCK_STREAM else path
        if os.path.isdir(path):
            raise DaemonUnavailableError(
                f"{path} is a directory, not the daemon's {what}: name the socket in it "
                f"({os.path.join(path, 'bruce.sock')} where make run or systemd put it)"
            ) from exc
        raise DaemonUnavailableError(f"no daemon listening on {where} ({exc.strerror})") from exc
    except TimeoutError as exc:
        sock.close()
        raise DaemonUnavailableError(
            f"daemon did not accept a connection on {path} within {timeout}s"
        ) from exc
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EPROTOTYPE:  # a socket of the other kind is bound there
            raise DaemonUnavailableError(_wrong_kind(path, kind)) from exc
        raise DaemonUnavailableError(
            f"cannot connect to daemon {what} {path} ({exc.strerror or exc})"
        ) from exc
    return sock


def _wrong_kind(path: str, kind: socket.SocketKind) -> str:
    """The daemon's two sockets, told apart: what ``path`` is, and where to send."""
    if kind == socket.SOCK_DGRAM:
        datagram = "the daemon's datagram socket"
        if path.endswith(".stream.sock"):
            datagram = path.removesuffix(".stream.sock") + ".sock"
        return (
            f"{path} is a stream socket (the daemon's for confirmed delivery: StreamSender, "
            f"to_pulsar --confirm); datagrams go to {datagram}"
        )
    return (
        f"{path} is a datagram socket (the daemon's --socket); confirmed delivery goes to "
        f"its stream socket, {stream_socket_beside(path)} by default"
    )
