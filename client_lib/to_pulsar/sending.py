"""What the four senders share above the wire: their two properties and ``send()``.

``send()`` encodes (``core.encode_message``) and hands the bytes to the sender's
``_submit``: one datagram for :class:`~to_pulsar.Sender` and
:class:`~to_pulsar.aio.AsyncSender`, one buffered record for the stream senders.
The sync and asyncio ``send()`` are the same but for ``await``.
"""

from __future__ import annotations

import errno
import os
import struct
import time
from collections.abc import Mapping
from types import TracebackType
from typing import Self

from .core import check_timeout, encode_message
from .encoding import Payload, encode_plain, plain_heads
from .errors import StreamClosedError, StreamProtocolError, ToPulsarError
from .paths import resolve_socket_path, resolve_stream_socket_path
from .protocol import StreamState

_time_ns = time.time_ns
#: Stream records are written once this many bytes are buffered (and at every flush).
DEFAULT_CHUNK_BYTES = 256 * 1024
#: Errors on a stream write or read that mean the daemon closed the connection.
CLOSED_ERRNOS = frozenset({errno.EPIPE, errno.ECONNRESET, errno.ENOTCONN, errno.ECONNABORTED})


def closed_error(path: str, unconfirmed: int, when: str) -> StreamClosedError:
    return StreamClosedError(
        f"daemon closed the stream connection on {path} {when} "
        f"({unconfirmed} {'message' if unconfirmed == 1 else 'messages'} unconfirmed)"
    )


class Endpoint:
    """The daemon socket a sender talks to, and how long a send may wait."""

    __slots__ = ()
    _path: str
    _timeout: float | None

    @property
    def socket_path(self) -> str:
        """The daemon socket this sender is (re)connected to."""
        return self._path

    @property
    def timeout(self) -> float | None:
        """Seconds a send may wait for room (None: forever; 0: not at all, datagrams only)."""
        return self._timeout


class SyncSend(Endpoint):
    """``send()`` and ``with`` of the blocking senders: leaving the block normally
    closes (what was sent is handed over), an exception aborts (what is buffered is
    dropped; the datagram senders buffer nothing, so for them both just close)."""

    __slots__ = ()

    def close(self) -> None:
        raise NotImplementedError

    def abort(self) -> None:
        self.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()

    def send(
        self,
        topic: str | bytes,
        value: Payload,
        *,
        key: Payload | None = None,
        partition_key: int | None = None,
        timestamp_ms: int | None = None,
        properties: Mapping[str, str] | None = None,
        deliver_at_ms: int | None = None,
        deliver_after_ms: int | None = None,
    ) -> None:
        """Encode and send one message.

        Without ``partition_key`` the daemon picks the partition (AnyPartition);
        ``timestamp_ms`` defaults to now, 0 means "no event time"; ``properties``
        (str to str) become the message's Pulsar properties. ``deliver_at_ms`` (epoch ms)
        or ``deliver_after_ms`` (counted on the daemon's clock from when it reads the
        message) delay its delivery to Shared and Key_Shared subscriptions; such a message
        is sent unbatched. Waits only while the daemon takes nothing, up to ``timeout``.
        """
        # The usual message (a bytes value, no key, properties or delivery time) is encoded
        # here, inline, as ``encode_message`` would: with many processes sending a few
        # thousand messages a second each, the calls around the system call were most of
        # a send's cost.
        if (
            type(value) is bytes
            and key is None
            and properties is None
            and deliver_at_ms is None
            and deliver_after_ms is None
        ):
            if timestamp_ms is None:
                timestamp_ms = _time_ns() // 1_000_000
            if partition_key is None:
                pack, size, head, _, _, _ = plain_heads[topic]
                value_size = len(value)
                try:
                    datagram = pack(size + value_size, head, timestamp_ms, 0, value_size) + value
                except (struct.error, TypeError):  # out of range: the encoder names it
                    datagram = encode_plain(topic, value, None, timestamp_ms)
            else:
                datagram = encode_plain(topic, value, partition_key, timestamp_ms)
            self._submit(datagram)
            return
        self._submit(
            encode_message(
                topic,
                value,
                key,
                partition_key,
                timestamp_ms,
                properties,
                deliver_at_ms,
                deliver_after_ms,
            )
        )

    def _submit(self, message: bytes, /) -> None:
        raise NotImplementedError


class AsyncSend(Endpoint):
    """``send()`` and ``async with`` of the asyncio senders (as :class:`SyncSend`)."""

    __slots__ = ()

    def close(self) -> None:
        raise NotImplementedError

    def abort(self) -> None:
        self.close()

    async def aclose(self) -> None:
        self.close()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc_type is None:
            await self.aclose()
        else:
            self.abort()

    async def send(
        self,
        topic: str | bytes,
        value: Payload,
        *,
        key: Payload | None = None,
        partition_key: int | None = None,
        timestamp_ms: int | None = None,
        properties: Mapping[str, str] | None = None,
        deliver_at_ms: int | None = None,
        deliver_after_ms: int | None = None,
    ) -> None:
        """Encode and send one message (same arguments as :meth:`SyncSend.send`); a full
        queue is waited out on the event loop, up to ``timeout``."""
        await self._submit(
            encode_message(
                topic,
                value,
                key,
                partition_key,
                timestamp_ms,
                properties,
                deliver_at_ms,
                deliver_after_ms,
            )
        )

    async def _submit(self, message: bytes, /) -> None:
        raise NotImplementedError


class DatagramEndpoint:
    """Construction of both datagram senders: resolve, validate, then ``_setup()`` connects."""

    __slots__ = ("_path", "_timeout")

    def __init__(
        self, socket_path: str | os.PathLike[str] | None = None, timeout: float | None = 5.0
    ) -> None:
        self._timeout = check_timeout(timeout)
        self._path = resolve_socket_path(socket_path)
        self._setup()

    def _setup(self) -> None:
        raise NotImplementedError


class StreamEndpoint:
    """Construction of both stream senders, and what they report about their connection."""

    __slots__ = ("_chunk", "_closed", "_path", "_state", "_timeout")

    def __init__(
        self,
        socket_path: str | os.PathLike[str] | None = None,
        timeout: float | None = 30.0,
        *,
        chunk_bytes: int = DEFAULT_CHUNK_BYTES,
    ) -> None:
        self._timeout = check_timeout(timeout)
        self._path = resolve_stream_socket_path(socket_path)
        self._chunk = max(1, chunk_bytes)
        self._state = StreamState()
        self._closed: ToPulsarError | None = None
        self._setup()

    def _setup(self) -> None:
        raise NotImplementedError

    @property
    def closed(self) -> bool:
        return self._closed is not None

    @property
    def unconfirmed(self) -> int:
        """Messages sent on this connection that no answered flush has covered yet."""
        return self._state.unconfirmed_total

    def _io_error(self, exc: OSError, when: str) -> ToPulsarError:
        if self._closed is not None:  # closed meanwhile, e.g. by another thread or task
            return StreamClosedError(f"the stream connection is unusable: {self._closed}")
        if exc.errno in CLOSED_ERRNOS or isinstance(exc, ConnectionError):
            return self._fail(closed_error(self._path, self.unconfirmed, when))
        return self._fail(
            ToPulsarError(f"stream socket {self._path} failed {when} ({exc.strerror or exc})")
        )

    def _fail(self, exc: ToPulsarError) -> ToPulsarError:
        """The connection is unusable: close it and remember why; returns ``exc`` to raise."""
        self._shut(exc)
        return exc

    def _shut(self, reason: ToPulsarError) -> None:
        raise NotImplementedError

    def _check_open(self) -> None:
        """Raise why the sender is closed (a broken connection as StreamClosedError)."""
        if self._closed is not None:
            if isinstance(self._closed, StreamClosedError | StreamProtocolError):
                raise StreamClosedError(f"the stream connection is unusable: {self._closed}")
            raise self._closed
