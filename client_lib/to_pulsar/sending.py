"""What the four senders share above the wire: their two properties and ``send()``.

``send()`` encodes (``core.encode_message``) and hands the bytes to the sender's
``_submit``: one datagram for :class:`~to_pulsar.Sender` and
:class:`~to_pulsar.aio.AsyncSender`, one buffered record for the stream senders.
The sync and asyncio ``send()`` are the same but for ``await``.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import TracebackType
from typing import TYPE_CHECKING, Self

from .core import encode_message
from .encoding import Payload

if TYPE_CHECKING:
    from .errors import ToPulsarError
    from .protocol import StreamState


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
    ) -> None:
        """Encode and send one message.

        Without ``partition_key`` the daemon picks the partition (AnyPartition);
        ``timestamp_ms`` defaults to now, 0 means "no event time"; ``properties``
        (str to str) become the message's Pulsar properties. Waits only while the
        daemon takes nothing, up to ``timeout``.
        """
        self._submit(encode_message(topic, value, key, partition_key, timestamp_ms, properties))

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
    ) -> None:
        """Encode and send one message (same arguments as :meth:`SyncSend.send`); a full
        queue is waited out on the event loop, up to ``timeout``."""
        await self._submit(
            encode_message(topic, value, key, partition_key, timestamp_ms, properties)
        )

    async def _submit(self, message: bytes, /) -> None:
        raise NotImplementedError


class StreamEndpoint:
    """What both stream senders report about their connection."""

    __slots__ = ()
    _closed: ToPulsarError | None
    _state: StreamState

    @property
    def closed(self) -> bool:
        return self._closed is not None

    @property
    def unconfirmed(self) -> int:
        """Messages sent on this connection that no answered flush has covered yet."""
        return self._state.unconfirmed_total
