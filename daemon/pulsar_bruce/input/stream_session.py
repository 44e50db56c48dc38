"""One stream-socket connection, sans-IO: record framing, flush requests, flush responses.

Records arrive back to back; ``Size`` (int32, counting itself) delimits
them.  Message records are Bruce AnyPartition/PartitionKey records, exactly
as datagrams.  Two record types of our own complete the protocol::

    FlushRequest  (ApiKey 258, v0) => Flags:int16 RequestId:int64
    FlushResponse (ApiKey 259, v0) => Flags:int16 RequestId:int64 Acked:int64
                                      ReasonCount:int16 (ReasonSize:int16 Reason Count:int64)*

A flush is answered, in order, once every record the connection sent before it
is acked or discarded; the counts cover the records since the previous flush.

A connection may begin with a Producer record (ApiKey 261, ``parse/producer_record.py``):
its messages are then published under that record's producer name and sequence ids
(``route/sequenced.py``); the stream edge (``stream_server.py``) acts on it.
"""

from __future__ import annotations

import struct
from collections import deque
from collections.abc import Callable
from typing import Final, Protocol

from pulsar_bruce import reasons
from pulsar_bruce.model.confirmation import Confirmation
from pulsar_bruce.native import pick

API_KEY_FLUSH_REQUEST: Final = 258
API_KEY_FLUSH_RESPONSE: Final = 259

_SIZE = struct.Struct(">i")
_FLUSH_REQUEST_KEY = API_KEY_FLUSH_REQUEST.to_bytes(2, "big")
_FLUSH_REQUEST = struct.Struct(">ihhhq")  # Size, ApiKey, ApiVersion, Flags, RequestId
_RESPONSE_HEAD = struct.Struct(">ihhhqqh")  # Size .. Acked, ReasonCount
_REASON_SIZE = struct.Struct(">h")
_COUNT = struct.Struct(">q")


#: A record still arriving is reserved memory from this size on; a smaller one is bounded by
#: what one read brings (asyncio reads at most 256 KiB) times the connection cap.
RESERVE_FROM: Final = 256 * 1024
#: Of a record skipped as it arrives, the first bytes kept: its topic and key for the
#: discard evidence (a longer header is cut; the value's prefix is all the log shows).
SKIP_HEAD_KEPT: Final = 64 * 1024


class FramingError(Exception):
    """The byte stream no longer splits into records: the connection must be closed."""


class RecordRefused(FramingError):
    """A record refused at its header (``reason``: too_large, buffer_full): buffering it
    could exceed the memory limit.  A too_large one is skipped as it arrives
    (:meth:`StreamSession.skip_record`); for buffer_full the connection is closed."""

    def __init__(self, reason: str, size: int):
        super().__init__(f"a record of {size} bytes is refused as {reason}")
        self.reason = reason
        self.size = size


class MessageLimit(Protocol):
    """The largest message any topic takes (``route/intake.py``'s ``Intake``)."""

    @property
    def max_message_bytes(self) -> int: ...


class Buffered(Protocol):
    """The bytes memory holds (``model/ledger.py``'s ``Ledger``)."""

    @property
    def buffered_bytes(self) -> int: ...


class RecordBudget:
    """Memory that stream records still arriving may hold, shared by every connection, so
    that many connections declaring large records cannot add up past --buffer-max-bytes."""

    def __init__(
        self,
        intake: MessageLimit,
        buffer_max_bytes: int,
        memory: Buffered,
        reserve_from: int = RESERVE_FROM,
    ):
        #: Read at each reservation: the largest message, and the bytes memory holds now.
        self.intake, self.memory = intake, memory
        self.buffer_max_bytes = buffer_max_bytes
        self.reserve_from = reserve_from
        #: Bytes reserved by records still arriving, on every connection.
        self.reserved = 0

    def reserve(self, size: int) -> None:
        """Reserve ``size`` bytes for a record; :class:`RecordRefused` when it cannot fit."""
        if size > self.intake.max_message_bytes or size > self.buffer_max_bytes:
            raise RecordRefused(reasons.TOO_LARGE, size)
        if size > self.buffer_max_bytes - self.memory.buffered_bytes - self.reserved:
            raise RecordRefused(reasons.BUFFER_FULL, size)
        self.reserved += size

    def release(self, size: int) -> None:
        self.reserved -= size


def split_records_py(buffer: bytearray, offset: int, max_record_bytes: int) -> list[bytes]:
    """The complete records in ``buffer`` from ``offset``, oldest first.

    Stops before a record whose size cannot be right; raises ValueError when that
    is the first one.  The pure-Python twin of ``native._intake.split_records``.
    """
    records: list[bytes] = []
    end = len(buffer)
    while end - offset >= 8:
        (size,) = _SIZE.unpack_from(buffer, offset)
        if size < 8 or size > max_record_bytes:
            if records:
                break
            raise ValueError(f"record size {size} is outside 8..{max_record_bytes}")
        if end - offset < size:
            break
        records.append(bytes(buffer[offset : offset + size]))
        offset += size
    return records


#: The record splitter the daemon uses: the compiled one where the compiled intake runs.
split_records = pick("split_records", split_records_py)


def encode_flush_request(request_id: int) -> bytes:
    return _FLUSH_REQUEST.pack(_FLUSH_REQUEST.size, API_KEY_FLUSH_REQUEST, 0, 0, request_id)


def encode_flush_response(request_id: int, acked: int, discarded: dict[str, int]) -> bytes:
    parts = []
    for reason, count in sorted(discarded.items()):
        name = reason.encode("ascii")
        parts.append(_REASON_SIZE.pack(len(name)) + name + _COUNT.pack(count))
    body = b"".join(parts)
    size = _RESPONSE_HEAD.size + len(body)
    head = _RESPONSE_HEAD.pack(size, API_KEY_FLUSH_RESPONSE, 0, 0, request_id, acked, len(parts))
    return head + body


class StreamSession:
    """Framing and confirmation bookkeeping of one stream connection."""

    def __init__(self, max_record_bytes: int, on_settled: Callable[[], None]):
        self.max_record_bytes = max_record_bytes
        self._on_settled = on_settled
        self._buffer = bytearray()
        self._offset = 0
        #: Confirmation of the records since the last flush request.
        self.current = Confirmation(on_settled)
        self._flushes: deque[Confirmation] = deque()
        #: The record being skipped: bytes still to come, its first bytes, its size.
        self._skip_left = 0
        self._skip_head = bytearray()
        self._skip_size = 0
        #: Records skipped to their end since the edge last looked: (first bytes, size).
        self.skipped: list[tuple[bytes, int]] = []

    def skip_record(self, size: int) -> None:
        """Drop the record at the head of the buffer, which is still arriving and declares
        ``size`` bytes, as its bytes come (kept: its first :data:`SKIP_HEAD_KEPT`); once it
        has all come it is in :attr:`skipped`, and the records after it are read as ever."""
        start = self._offset
        self._skip_head = bytearray(self._buffer[start : start + SKIP_HEAD_KEPT])
        self._skip_size = size
        self._skip_left = size - self.buffered_bytes
        self.clear()

    def feed(self, data: bytes) -> None:
        if self._skip_left:
            data = self._skipping(data)
        if self._offset:
            del self._buffer[: self._offset]
            self._offset = 0
        self._buffer += data

    def _skipping(self, data: bytes) -> bytes:
        """What of ``data`` follows the record being skipped."""
        taken = min(self._skip_left, len(data))
        room = SKIP_HEAD_KEPT - len(self._skip_head)
        if room > 0:
            self._skip_head += data[: min(taken, room)]
        self._skip_left -= taken
        if self._skip_left:
            return b""
        self.skipped.append((bytes(self._skip_head), self._skip_size))
        self._skip_head = bytearray()
        return data[taken:]

    def complete_records(self) -> list[bytes]:
        """The complete records buffered now, oldest first (each stays until :meth:`consume`).

        Raises :class:`FramingError` when the next record's size cannot be right.
        """
        try:
            return split_records(self._buffer, self._offset, self.max_record_bytes)
        except ValueError as exc:
            raise FramingError(str(exc)) from None

    def consume(self, record: bytes) -> None:
        self._offset += len(record)

    def consume_run(self, records: list[bytes], start: int, stop: int) -> None:
        """``consume`` each of ``records[start:stop]``."""
        self._offset += sum(map(len, records[start:stop]))

    @property
    def buffered_bytes(self) -> int:
        return len(self._buffer) - self._offset

    def pending_size(self) -> int:
        """The declared size of the record at the head of the buffer once its size field has
        arrived and the record has not (0 otherwise): what it will take to buffer it."""
        if self.buffered_bytes < _SIZE.size:
            return 0
        (size,) = _SIZE.unpack_from(self._buffer, self._offset)
        return size if size > self.buffered_bytes else 0

    def head(self) -> bytes:
        """The first bytes buffered (a refused record's header, for the discard evidence)."""
        return bytes(self._buffer[self._offset : self._offset + 64])

    def clear(self) -> None:
        """Drop what is buffered (the connection is being closed)."""
        self._buffer = bytearray()
        self._offset = 0

    @staticmethod
    def is_flush_request(record: bytes) -> bool:
        return record[4:6] == _FLUSH_REQUEST_KEY

    def flush_request(self, record: bytes) -> None:
        """Close the current confirmation under the request's id; a new one starts."""
        if len(record) != _FLUSH_REQUEST.size:
            raise FramingError(f"flush request of {len(record)} bytes")
        _, _, version, _, request_id = _FLUSH_REQUEST.unpack(record)
        if version != 0:
            raise FramingError(f"flush request version {version}")
        self.current.request_id = request_id
        self._flushes.append(self.current)
        self.current = Confirmation(self._on_settled)

    def responses(self) -> bytes:
        """Responses for every flush that is now complete, in request order."""
        out = []
        flushes = self._flushes
        while flushes and flushes[0].outstanding == 0:
            done = flushes.popleft()
            assert done.request_id is not None
            out.append(encode_flush_response(done.request_id, done.acked, done.discarded))
        return b"".join(out)
