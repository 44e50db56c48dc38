"""Passes over a sealed batch's entries, once per batch, when it is first framed.

Every entry gets its own ``SingleMessageMetadata.sequence_id`` (field 8), the
batch's first id plus its index, which consumers read as ``getSequenceId()``
(the Java client copies each message's id into its entry:
``Commands.serializeSingleMessageInBatchWithPayload``).  The ids exist only once
the batch is numbered at first send, so this is one pass over the payload then,
before compression; ``native/stamp.c`` is the compiled twin, and the differential
tests compare both byte for byte.  The entries in ``SealedBatch.payload`` stay
unstamped; entries taken back out of a frame (the spool, the discard log) carry
ids, which a second stamp replaces.

The batch's ``MessageMetadata.partition_key`` is its first message's key, as the
Java client sets it (``BatchMessageContainerImpl`` via
``Commands.initBatchMessageMetadata``): Key_Shared subscriptions dispatch a whole
entry by it.
"""

from __future__ import annotations

import struct
from collections.abc import Callable

from google.protobuf.message import DecodeError

from pulsar_bruce.frame import pulsar_api_pb2 as pb
from pulsar_bruce.frame.wire import varint
from pulsar_bruce.native import pick

_U32 = struct.Struct(">I")
_PARSE = pb.SingleMessageMetadata.FromString
_TAG_SEQUENCE_ID = 0x40  # field 8, varint
_TAG_PROPERTIES = 0x0A  # field 1, length-delimited


def _read_varint(data: bytes, offset: int) -> tuple[int, int]:
    """The varint at ``offset`` and the offset after it; ValueError past the end."""
    value = shift = 0
    while True:
        if offset >= len(data) or shift > 63:
            raise ValueError("malformed batch entries")
        byte = data[offset]
        offset += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if byte < 0x80:
            return value, offset


def _without_sequence_ids(metadata: bytes) -> bytes:
    """``metadata`` less its ``sequence_id`` fields (rare: entries stamped before)."""
    kept = bytearray()
    offset = 0
    while offset < len(metadata):
        start = offset
        tag, offset = _read_varint(metadata, offset)
        wire = tag & 7
        if wire == 0:
            offset = _read_varint(metadata, offset)[1]
        elif wire == 1:
            offset += 8
        elif wire == 2:
            length, offset = _read_varint(metadata, offset)
            offset += length
        elif wire == 5:
            offset += 4
        else:
            raise ValueError("malformed batch entries")
        if offset > len(metadata):
            raise ValueError("malformed batch entries")
        if tag != _TAG_SEQUENCE_ID:
            kept += metadata[start:offset]
    return bytes(kept)


#: ``sequence_id`` fields of ids below 128, and the first two bytes of the others by id % 128.
_SMALL_IDS = tuple(bytes((_TAG_SEQUENCE_ID, n)) for n in range(128))
_ID_HEADS = tuple(bytes((_TAG_SEQUENCE_ID, n | 0x80)) for n in range(128))


def stamp_sequence_ids_py(payload: bytes, first_id: int, count: int, /) -> bytes:
    """``payload``'s ``count`` entries, each with ``sequence_id`` = ``first_id`` + its index
    as the first field of its metadata (an earlier one removed); ValueError if they are
    not ``count`` well-formed entries."""
    if first_id < 0 or count < 0 or first_id + max(count, 1) > 1 << 63:  # int64 on the wire
        raise ValueError("sequence ids out of range")
    out = bytearray()
    parse, pack, unpack_from, size_of = _PARSE, _U32.pack, _U32.unpack_from, len(payload)
    offset = 0
    high, tail = -1, b""  # ids >> 7 and their varint: the same for 128 ids in a row
    for sequence_id in range(first_id, first_id + count):
        if offset + 4 > size_of:
            raise ValueError("malformed batch entries")
        start = offset + 4 + unpack_from(payload, offset)[0]
        if start > size_of:
            raise ValueError("malformed batch entries")
        try:
            parsed = parse(payload[offset + 4 : start])
        except DecodeError as error:
            raise ValueError("malformed batch entries") from error
        end = start + parsed.payload_size
        if end < start or end > size_of:
            raise ValueError("malformed batch entries")
        if sequence_id < 0x80:
            stamp = _SMALL_IDS[sequence_id]
        else:
            if sequence_id >> 7 != high:
                high = sequence_id >> 7
                tail = varint(high)
            stamp = _ID_HEADS[sequence_id & 0x7F] + tail
        if parsed.HasField("sequence_id"):
            metadata = _without_sequence_ids(payload[offset + 4 : start])
            out += pack(len(stamp) + len(metadata)) + stamp + metadata + payload[start:end]
        else:
            out += pack(len(stamp) + start - offset - 4) + stamp
            out += payload[offset + 4 : end]
        offset = end
    if offset != size_of:
        raise ValueError("malformed batch entries")
    return bytes(out)


#: The compiled pass where the compiled intake runs, else the twin; same contract.
stamp_sequence_ids: Callable[[bytes, int, int], bytes] = pick(
    "stamp_sequence_ids", stamp_sequence_ids_py
)


def first_key_of(entries: bytes) -> tuple[str | None, bool]:
    """The first entry's ``partition_key`` (None: it has none) and base64 flag."""
    if not entries:
        return None, False
    (size,) = _U32.unpack_from(entries)
    metadata = pb.SingleMessageMetadata.FromString(entries[4 : 4 + size])
    if not metadata.HasField("partition_key"):
        return None, False
    return metadata.partition_key, metadata.partition_key_b64_encoded


def key_part(key_field: bytes) -> bytes:
    """The ``partition_key`` field (with its base64 flag) of a message's ``key_field``,
    after the properties a Message record puts first: what key-based batching groups by."""
    if key_field[:1] != b"\n":
        return key_field
    offset = 0
    while offset < len(key_field) and key_field[offset] == _TAG_PROPERTIES:
        length, offset = _read_varint(key_field, offset + 1)
        offset += length
    return key_field[offset:]
