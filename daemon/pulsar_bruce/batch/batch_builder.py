"""Pulsar batch payloads, built in place as messages arrive (sans-IO).

A batch payload is a run of entries ``[u32 size][SingleMessageMetadata][value]``.
Each message's ``SingleMessageMetadata`` is hand-encoded straight into the
batch buffer at append time (a few varint fields; a protobuf object per
message would cost more than everything else on the hot path together).
Compression happens once, when the batch is sealed.

Key-based batching (``--key-based-batching``): the open batch keeps one batch
per key (``keys``), like the Java client's ``BatchMessageKeyBasedContainer``;
they fill and are sealed together, each its own Send, in the order of their
first messages, so interleaved keys still make full batches of one key each.
"""

from __future__ import annotations

import base64
import struct
from collections import deque
from typing import TYPE_CHECKING

from pulsar_bruce.batch.compression import decompress
from pulsar_bruce.batch.entries import key_part
from pulsar_bruce.frame import pulsar_api_pb2 as pb
from pulsar_bruce.frame.codec import decode_frame_body
from pulsar_bruce.frame.wire import varint
from pulsar_bruce.model.batch import SealedBatch
from pulsar_bruce.model.confirmation import Confirmation, TagRun, add_tag, split_tags
from pulsar_bruce.native import pick

_U32 = struct.Struct(">I")

# SingleMessageMetadata field tags: (field_number << 3) | wire_type.
_TAG_PARTITION_KEY = b"\x12"  # 2, length-delimited
_TAG_PAYLOAD_SIZE = b"\x18"  # 3, varint
_TAG_EVENT_TIME = b"\x28"  # 5, varint
_B64_FLAG = b"\x30\x01"  # 6 = true


def encode_key_field(key: bytes) -> bytes:
    """``partition_key`` (+ the base64 flag for keys that are not UTF-8); empty key -> nothing."""
    if not key:
        return b""
    if not key.isascii():
        try:
            key.decode("utf-8")
        except UnicodeDecodeError:
            encoded = base64.b64encode(key)
            return _TAG_PARTITION_KEY + varint(len(encoded)) + encoded + _B64_FLAG
    return _TAG_PARTITION_KEY + varint(len(key)) + key


#: Precomputed ``payload_size`` fields for values up to 4 KiB (most messages).
_PAYLOAD_SIZE_TABLE = 4096
_PAYLOAD_SIZE_FIELDS = tuple(_TAG_PAYLOAD_SIZE + varint(n) for n in range(_PAYLOAD_SIZE_TABLE))


class _PyEntries:
    """A batch's entries: the pure-Python twin of ``native._intake.Entries``."""

    __slots__ = ("_event_time", "_event_time_field", "buffer", "charged", "count", "keys", "tags")

    def __init__(self) -> None:
        self.buffer = bytearray()
        self.count = 0
        #: Memory charged for the messages in the batch (the sum of their charges).
        self.charged = 0
        #: Key-based batching: the open batch of each key (``BatchBuilder``) by its
        #: ``partition_key`` field (``entries.key_part``), in the order of their first
        #: messages; ``count`` and ``charged`` are then their totals, and this buffer stays
        #: empty.  None: one batch for all keys.
        self.keys: dict[bytes, BatchBuilder] | None = None
        #: Run-length confirmation tags, allocated by the first stream message only.
        self.tags: list[TagRun] | None = None
        self._event_time = 0
        self._event_time_field = b""

    def append(
        self, key_field: bytes, timestamp: int, data: bytes, value_offset: int, charge: int
    ) -> int:
        """Add ``data[value_offset:]`` as a message charged ``charge`` bytes of memory;
        returns the bytes the batch grew by (at most ``charge``).

        ``key_field`` comes from :func:`encode_key_field`; ``timestamp`` 0 (or
        negative) means no event time.
        """
        payload_size = len(data) - value_offset
        size_field = (
            _PAYLOAD_SIZE_FIELDS[payload_size]
            if payload_size < _PAYLOAD_SIZE_TABLE
            else _TAG_PAYLOAD_SIZE + varint(payload_size)
        )
        if timestamp > 0:
            if timestamp != self._event_time:
                self._event_time = timestamp
                self._event_time_field = _TAG_EVENT_TIME + varint(timestamp)
            metadata = key_field + size_field + self._event_time_field
        else:
            metadata = key_field + size_field
        buffer = self.buffer
        buffer += _U32.pack(len(metadata)) + metadata
        buffer += data[value_offset:] if payload_size < 4096 else memoryview(data)[value_offset:]
        self.count += 1
        self.charged += charge
        return 4 + len(metadata) + payload_size

    @property
    def size(self) -> int:
        """Bytes of entries so far."""
        return len(self.buffer)

    def tail(self, start: int) -> bytes:
        """The entries from byte ``start`` on (what the write-ahead journal has not got yet)."""
        if not 0 <= start <= len(self.buffer):
            raise ValueError("tail start outside the entries")
        return bytes(self.buffer[start:])

    def take(self) -> bytes:
        """The entries as bytes; the buffer, count and charge start again from zero."""
        payload = bytes(self.buffer)
        self.buffer = bytearray()
        self.count = 0
        self.charged = 0
        return payload


# The compiled entries when the compiled intake runs (see ``native``); same interface
# (``_intake.pyi``, which mypy checks BatchBuilder against).
if TYPE_CHECKING:
    from pulsar_bruce.native import Entries as _Entries
else:
    _Entries = pick("Entries", _PyEntries)


class BatchBuilder(_Entries):
    """The open batch of one partition: its entries and confirmation tags (or, with
    key-based batching, one such batch per key in ``keys``)."""

    __slots__ = ()

    def seal(self) -> SealedBatch:
        """Close the batch and reset for the next one (compression happens at first send)."""
        count, charged, tags = self.count, self.charged, self.tags
        batch = SealedBatch(count=count, payload=self.take(), buffer_bytes=charged, tags=tags)
        self.tags = None
        return batch

    def seal_into(self, pending: deque[SealedBatch]) -> SealedBatch:
        """Seal the batch (or every key's batch, in the order of their first messages) into
        ``pending``; returns the last one sealed.  Not for an empty batch."""
        keys = self.keys
        if keys is None:
            sealed = self.seal()
            pending.append(sealed)
            return sealed
        for batch in keys.values():
            sealed = batch.seal()
            pending.append(sealed)
        self.keys = None
        self.count = self.charged = 0
        return sealed

    def key_batch(self, key_field: bytes, charge: int) -> BatchBuilder:
        """Key-based batching: the open batch for ``key_field``'s key (made on its first
        message), counted in this one's totals as holding one more message of ``charge``."""
        keys = self.keys
        if keys is None:
            keys = self.keys = {}
        key = key_part(key_field)
        batch = keys.get(key)
        if batch is None:
            batch = keys[key] = BatchBuilder()
        self.count += 1
        self.charged += charge
        return batch

    def tag_last(self, tag: Confirmation | None) -> None:
        """The message just appended belongs to ``tag`` (a stream connection's confirmation)."""
        tags = self.tags
        if tags is None:
            tags = self.tags = [TagRun(None, self.count - 1)] if self.count > 1 else []
        add_tag(tags, tag)


def entry_offsets(raw: bytes) -> list[int]:
    """Start offset of every entry of an uncompressed batch payload (rare path: splitting)."""
    offsets = []
    offset = 0
    while offset < len(raw):
        offsets.append(offset)
        (metadata_size,) = _U32.unpack_from(raw, offset)
        metadata = pb.SingleMessageMetadata.FromString(raw[offset + 4 : offset + 4 + metadata_size])
        offset += 4 + metadata_size + metadata.payload_size
    return offsets


def split_batch(batch: SealedBatch, at: int = 0) -> tuple[SealedBatch, SealedBatch]:
    """Two parts of an unsent, uncompressed batch of two or more messages: its first ``at``
    messages and the rest (``at`` 0: halves, by message).

    The memory charge is split so that the parts add up to the whole exactly.
    """
    raw = batch.payload
    offsets = entry_offsets(raw)
    half = at or len(offsets) // 2
    cut = offsets[half]
    first_tags, rest_tags = split_tags(batch.tags, half) if batch.tags else (None, None)
    first_charge = cut + (batch.buffer_bytes - len(raw)) * half // len(offsets)
    first = SealedBatch(count=half, payload=raw[:cut], buffer_bytes=first_charge, tags=first_tags)
    rest = SealedBatch(
        count=len(offsets) - half,
        payload=raw[cut:],
        buffer_bytes=batch.buffer_bytes - first_charge,
        tags=rest_tags,
    )
    first.created_at = rest.created_at = batch.created_at  # the send timeout still applies
    first.inherit(batch)
    rest.inherit(batch)
    return first, rest  # unnumbered: the queue hands them the whole's ids (``BatchQueue``)


def batch_entries_of(batch: SealedBatch) -> bytes:
    """The uncompressed entries of a batch already framed for sending (rare path: spooling),
    with the sequence ids the framing stamped on them (see ``batch.entries``)."""
    frame = decode_frame_body(batch.frame[4:])
    assert frame.metadata is not None
    metadata = frame.metadata
    return decompress(metadata.compression, frame.payload, metadata.uncompressed_size)


def unframe(batch: SealedBatch) -> None:
    """Take a framed batch back to its entries (under the ids they were stamped with), to be
    cut or numbered again; a chunked message kept its payload."""
    if batch.frame and not batch.payload:
        batch.payload = batch_entries_of(batch)
    batch.frame = b""
    batch.frames, batch.receipts = 1, 0
