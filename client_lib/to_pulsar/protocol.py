"""The stream socket's own record types: Producer, FlushRequest, FlushResponse (sans-IO).

On the daemon's UNIX *stream* socket a client writes message records back to back,
byte-identical to the datagrams (AnyPartition, PartitionKey; ``Size`` delimits
them), and asks for confirmation with a flush. All integers big-endian::

    FlushRequest  (ApiKey 258, ApiVersion 0)
        Size:int32 (=18) ApiKey:int16 ApiVersion:int16 Flags:int16 (=0) RequestId:int64
    FlushResponse (ApiKey 259, ApiVersion 0)
        Size:int32 ApiKey:int16 ApiVersion:int16 Flags:int16 (=0) RequestId:int64
        Acked:int64 ReasonCount:int16 {ReasonSize:int16 Reason (ASCII) Count:int64}*
    Producer      (ApiKey 261, ApiVersion 0)
        Size:int32 ApiKey:int16 ApiVersion:int16 Flags:int16 (=0)
        NameSize:int16 Name (UTF-8, 1..255 bytes, printable) FirstSequenceId:int64 (>= 0)

A Producer record, first on its connection, makes the daemon publish the message
records after it under producer name ``Name``, the n-th on each partition with
sequence id ``FirstSequenceId + n``, so that a broker with deduplication on stores
what a retried sender sends again only once. It is not a message: flushes do not
count it.

The daemon answers every flush, in order, once each record the connection sent
before it is acked by the broker or discarded; the counts cover the records sent
since the previous flush (or since connecting).

:class:`StreamState` is the bookkeeping both stream clients share: the outgoing
buffer, request ids, the flushes still unanswered and the decoding of responses.
It does no I/O, so the sync and the asyncio client differ only in how they wait.
"""

from __future__ import annotations

import struct
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field

from .errors import StreamProtocolError, ToPulsarError

__all__ = [
    "API_KEY_FLUSH_REQUEST",
    "API_KEY_FLUSH_RESPONSE",
    "API_KEY_PRODUCER",
    "FLUSH_REQUEST_SIZE",
    "MAX_PRODUCER_NAME_BYTES",
    "FlushResult",
    "StreamState",
    "decode_flush_response",
    "encode_flush_request",
    "encode_flush_response",
    "encode_producer_record",
]

API_KEY_FLUSH_REQUEST = 258
API_KEY_FLUSH_RESPONSE = 259
API_KEY_PRODUCER = 261
FLUSH_API_VERSION = 0
PRODUCER_API_VERSION = 0
MAX_PRODUCER_NAME_BYTES = 255

_FLUSH_REQUEST = struct.Struct(">ihhhq")  # Size ApiKey ApiVersion Flags RequestId
_RESPONSE_HEAD = struct.Struct(">ihhhqqh")  # Size ApiKey ApiVersion Flags RequestId Acked Count
_RECORD_HEAD = struct.Struct(">ihh")  # Size ApiKey ApiVersion: every record starts so
_SIZE = struct.Struct(">i")
_REASON_SIZE = struct.Struct(">h")
_COUNT = struct.Struct(">q")
_PRODUCER_HEAD = struct.Struct(">ihhhh")  # Size ApiKey ApiVersion Flags NameSize

FLUSH_REQUEST_SIZE = _FLUSH_REQUEST.size  # 18
FLUSH_RESPONSE_MIN_SIZE = _RESPONSE_HEAD.size  # 28
# A response lists each discard reason once; anything near this is not a response.
FLUSH_RESPONSE_MAX_SIZE = 1 << 20
INT64_MAX = 2**63 - 1


@dataclass(frozen=True)
class FlushResult:
    """What the daemon did with the records covered by one or more flushes.

    ``acked``: messages the broker confirmed; ``discarded``: messages given up, by
    reason (the daemon's discard reasons: ``too_large``, ``bad_topic``, ...).
    """

    acked: int = 0
    discarded: Mapping[str, int] = field(default_factory=dict)

    @property
    def discarded_total(self) -> int:
        """All discarded messages, whatever the reason."""
        return sum(self.discarded.values())

    @property
    def total(self) -> int:
        """Every message accounted for: acked plus discarded."""
        return self.acked + self.discarded_total

    @property
    def ok(self) -> bool:
        """True when nothing was discarded (every message was acked)."""
        return self.discarded_total == 0

    def describe_discards(self) -> str:
        """``too_large 1, bad_topic 2`` (reasons sorted; empty when nothing was discarded)."""
        return ", ".join(
            f"{reason} {count}" for reason, count in sorted(self.discarded.items()) if count
        )

    def __add__(self, other: FlushResult) -> FlushResult:
        if not isinstance(other, FlushResult):
            return NotImplemented
        discarded = dict(self.discarded)
        for reason, count in other.discarded.items():
            discarded[reason] = discarded.get(reason, 0) + count
        return FlushResult(self.acked + other.acked, discarded)


def encode_flush_request(request_id: int) -> bytes:
    """A FlushRequest record asking for the counts up to here under ``request_id`` (int64)."""
    return _FLUSH_REQUEST.pack(
        FLUSH_REQUEST_SIZE, API_KEY_FLUSH_REQUEST, FLUSH_API_VERSION, 0, request_id
    )


def encode_flush_response(request_id: int, acked: int, discarded: Mapping[str, int]) -> bytes:
    """A FlushResponse record (what the daemon sends; here for fakes and tests)."""
    parts = []
    for reason, count in sorted(discarded.items()):
        name = reason.encode("ascii")
        parts.append(_REASON_SIZE.pack(len(name)) + name + _COUNT.pack(count))
    size = FLUSH_RESPONSE_MIN_SIZE + sum(map(len, parts))
    head = _RESPONSE_HEAD.pack(
        size, API_KEY_FLUSH_RESPONSE, FLUSH_API_VERSION, 0, request_id, acked, len(parts)
    )
    return head + b"".join(parts)


def encode_producer_record(name: str, first_sequence_id: int) -> bytes:
    """A Producer record: the messages after it go out under producer ``name``, the n-th
    on each partition with sequence id ``first_sequence_id + n``.

    ``name``: 1 to 255 bytes of UTF-8, printable (no control characters, no separator but
    the space; ``str.isprintable``, as the daemon checks it); ``first_sequence_id``:
    0 to 2**63-1. Anything else raises :class:`ValueError` saying why.
    """
    if not isinstance(name, str):
        raise TypeError(f"producer name must be a str, not {type(name).__name__}")
    if isinstance(first_sequence_id, bool) or not isinstance(first_sequence_id, int):
        raise TypeError(f"first sequence id must be an int, not {type(first_sequence_id).__name__}")
    try:
        raw = name.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError(f"producer name {name!r} is not valid UTF-8 (lone surrogate)") from None
    if not 1 <= len(raw) <= MAX_PRODUCER_NAME_BYTES:
        raise ValueError(
            f"producer name must be 1 to {MAX_PRODUCER_NAME_BYTES} bytes of UTF-8, "
            f"got {len(raw)}: {name[:40]!r}{'...' if len(name) > 40 else ''}"
        )
    if not name.isprintable():  # the daemon's rule: it closes the connection otherwise
        char = next(char for char in name if not char.isprintable())
        raise ValueError(
            f"producer name {name!r} contains a control or other unprintable character "
            f"(U+{ord(char):04X})"
        )
    if not 0 <= first_sequence_id <= INT64_MAX:
        raise ValueError(f"first sequence id must be 0 to 2**63-1, got {first_sequence_id}")
    head = _PRODUCER_HEAD.pack(
        _PRODUCER_HEAD.size + len(raw) + _COUNT.size,
        API_KEY_PRODUCER,
        PRODUCER_API_VERSION,
        0,
        len(raw),
    )
    return head + raw + _COUNT.pack(first_sequence_id)


def decode_flush_response(record: bytes | bytearray | memoryview) -> tuple[int, FlushResult]:
    """``(request_id, result)`` from one complete FlushResponse record.

    Anything that is not a well-formed version-0 response raises
    :class:`StreamProtocolError`: the connection can no longer be trusted.
    """
    if len(record) < FLUSH_RESPONSE_MIN_SIZE:
        raise StreamProtocolError(f"flush response of {len(record)} bytes is too short")
    size, api_key, version, flags, request_id, acked, reason_count = _RESPONSE_HEAD.unpack_from(
        record, 0
    )
    if size != len(record):
        raise StreamProtocolError(f"flush response Size {size} != record length {len(record)}")
    if api_key != API_KEY_FLUSH_RESPONSE:
        raise StreamProtocolError(f"expected a flush response (ApiKey 259), got ApiKey {api_key}")
    if version != FLUSH_API_VERSION:
        raise StreamProtocolError(f"unsupported flush response version {version}")
    if flags != 0:
        raise StreamProtocolError(f"unsupported flush response flags {flags:#x}")
    if acked < 0 or reason_count < 0:
        raise StreamProtocolError(f"negative count in flush response {request_id}")
    discarded: dict[str, int] = {}
    offset = FLUSH_RESPONSE_MIN_SIZE
    try:
        for _ in range(reason_count):
            (reason_size,) = _REASON_SIZE.unpack_from(record, offset)
            offset += _REASON_SIZE.size
            if reason_size <= 0 or offset + reason_size > size:
                raise StreamProtocolError(f"bad reason size {reason_size} in flush response")
            reason = bytes(record[offset : offset + reason_size]).decode("ascii")
            offset += reason_size
            (count,) = _COUNT.unpack_from(record, offset)
            offset += _COUNT.size
            if count < 0:
                raise StreamProtocolError(f"negative count {count} for reason {reason!r}")
            discarded[reason] = discarded.get(reason, 0) + count
    except (struct.error, UnicodeDecodeError) as exc:
        raise StreamProtocolError(f"malformed flush response: {exc}") from exc
    if offset != size:
        raise StreamProtocolError(f"{size - offset} bytes left over after a flush response")
    return request_id, FlushResult(acked, discarded)


def check_record(record: bytes | bytearray | memoryview) -> None:
    """Refuse a raw record that would break the stream's framing or its flush bookkeeping."""
    if len(record) < 8:
        raise ToPulsarError(f"a record is at least 8 bytes, got {len(record)}")
    size, api_key, _ = _RECORD_HEAD.unpack_from(record, 0)
    if size != len(record):
        raise ToPulsarError(f"record Size field {size} != its length {len(record)}")
    if api_key in (API_KEY_FLUSH_REQUEST, API_KEY_FLUSH_RESPONSE):
        raise ToPulsarError("flush records are sent by flush(), not as raw records")
    if api_key == API_KEY_PRODUCER:
        raise ToPulsarError("a Producer record is sent by publish_as(), not as a raw record")


class StreamState:
    """Sans-IO bookkeeping of one stream connection (shared by the sync and async clients).

    ``out`` holds encoded bytes not yet written; after a write the caller removes
    exactly what the kernel took (:meth:`wrote`), so a write interrupted by a timeout
    never leaves half a record behind: the rest goes out with the next write.

    Each flush waits for its own answer (:meth:`is_answered`, :meth:`take`). The
    counts of a flush that gives up waiting (:meth:`abandon`), whenever they come,
    are added to the result of the next flush that returns.
    """

    __slots__ = (
        "_abandoned",
        "_answers",
        "_carry",
        "_inbuf",
        "_next_id",
        "_pending",
        "named",
        "out",
        "unconfirmed",
    )

    def __init__(self) -> None:
        self.out = bytearray()
        self.unconfirmed = 0  # records appended since the last flush request
        self._next_id = 1
        # (request id, records it covers), oldest first: the answers come in this order
        self._pending: deque[tuple[int, int]] = deque()
        self._answers: dict[int, FlushResult] = {}  # answered, not yet taken
        self._abandoned: set[int] = set()  # pending, but nobody waits for them any more
        self._carry = FlushResult()  # counts of abandoned flushes, for the next result
        self._inbuf = bytearray()
        self.named = False  # a Producer record went first: messages carry sequence ids

    def check_producer(self) -> None:
        """Refuse a Producer record where it is not allowed: once anything else went out
        first (a message or a flush), unless the connection began with one."""
        if not self.named and (self.unconfirmed or self._next_id != 1):
            raise ToPulsarError(
                "publish_as() must come first on a stream connection: "
                f"{self.unconfirmed_total} messages or a flush were sent before it "
                "(open a new sender)"
            )

    def append(self, records: bytes, count: int = 1) -> None:
        """Queue ``count`` encoded records (back to back) for the next write."""
        self.out += records
        self.unconfirmed += count

    def wrote(self, n: int) -> None:
        del self.out[:n]

    def request_flush(self) -> int:
        """Append a FlushRequest for everything so far; return its id."""
        request_id = self._next_id
        self._next_id = 1 if request_id == INT64_MAX else request_id + 1
        self.out += encode_flush_request(request_id)
        self._pending.append((request_id, self.unconfirmed))
        self.unconfirmed = 0
        return request_id

    @property
    def unconfirmed_total(self) -> int:
        """Records no answered flush has covered: the unflushed ones and the pending flushes'."""
        return self.unconfirmed + sum(covered for _, covered in list(self._pending))

    def is_answered(self, request_id: int) -> bool:
        return request_id in self._answers

    def take(self, request_id: int) -> FlushResult:
        """The answer to ``request_id`` plus the counts of abandoned flushes answered so far."""
        result = self._answers.pop(request_id) + self._carry
        self._carry = FlushResult()
        return result

    def abandon(self, request_id: int) -> None:
        """Nobody waits for this flush any more: its counts go to the next result."""
        answer = self._answers.pop(request_id, None)
        if answer is not None:
            self._carry = self._carry + answer
        else:
            self._abandoned.add(request_id)

    def received(self, data: bytes) -> None:
        """Feed bytes read from the socket; decodes every complete response."""
        self._inbuf += data
        buf = self._inbuf
        offset = 0
        try:
            while len(buf) - offset >= 4:
                (size,) = _SIZE.unpack_from(buf, offset)
                if not FLUSH_RESPONSE_MIN_SIZE <= size <= FLUSH_RESPONSE_MAX_SIZE:
                    raise StreamProtocolError(f"daemon sent a record of Size {size}")
                if len(buf) - offset < size:
                    break
                self._answer(bytes(buf[offset : offset + size]))
                offset += size
        finally:
            del buf[:offset]

    def _answer(self, record: bytes) -> None:
        request_id, result = decode_flush_response(record)
        if not self._pending:
            raise StreamProtocolError(f"unrequested flush response {request_id}")
        expected, covered = self._pending[0]
        if request_id != expected:
            raise StreamProtocolError(
                f"flush response {request_id} out of order (expected {expected})"
            )
        if result.total != covered:
            raise StreamProtocolError(
                f"flush response {request_id} accounts for {result.total} records, "
                f"{covered} were sent"
            )
        self._pending.popleft()
        if request_id in self._abandoned:
            self._abandoned.discard(request_id)
            self._carry = self._carry + result
        else:
            self._answers[request_id] = result
