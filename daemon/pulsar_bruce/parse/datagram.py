"""Bruce datagram parser, sans-IO.

Input format (big-endian; ``Size`` counts the whole datagram)::

    GenericMessage => Size:int32 ApiKey:int16 ApiVersion:int16 Message
    AnyPartition (256, v0) => Flags:int16 TopicSize:int16 Topic Timestamp:int64
                              KeySize:int32 Key ValueSize:int32 Value
    PartitionKey (257, v0) => Flags:int16 PartitionKey:int32 TopicSize:int16 Topic
                              Timestamp:int64 KeySize:int32 Key ValueSize:int32 Value

and pulsar-bruce's own record for what Bruce's formats have no room for::

    Message (260, v0) => Flags:int16 PartitionKey:int32 TopicSize:int16 Topic
                         Timestamp:int64 [DeliverAt:int64 | DeliverAfter:int64] KeySize:int32 Key
                         PropertyCount:int16 (NameSize:int16 Name ValueSize:int32 Value)*
                         ValueSize:int32 Value

    Flags bit 0 (0x0001): PartitionKey is set; otherwise the daemon picks the partition
    (AnyPartition) and PartitionKey is 0.  Bit 1 (0x0002): DeliverAt (epoch ms, > 0)
    follows the Timestamp; bit 2 (0x0004): DeliverAfter (ms, >= 0) does; not both.
    Other bits must be 0.  Property names and values are UTF-8; they become the
    message's ``properties``.  A delivery time leads the result's fields
    (``parse/deliver_at.py``).

:func:`parse_datagram` runs once per datagram on the hot path: precompiled
structs, no objects beyond the result tuple, and the value is not copied (its
offset is returned; the value always runs to the end of the datagram).
"""

from __future__ import annotations

import struct
from typing import Final

from pulsar_bruce import reasons
from pulsar_bruce.frame.wire import length_delimited
from pulsar_bruce.native import pick
from pulsar_bruce.parse.deliver_at import deliver_after_field, deliver_at_field, take_deliver_at

API_KEY_ANY_PARTITION: Final = 256
API_KEY_PARTITION_KEY: Final = 257
API_KEY_MESSAGE: Final = 260
#: Message flag: the PartitionKey field is set.
FLAG_PARTITION_KEY: Final = 0x0001
#: Message flags: DeliverAt (epoch ms) or DeliverAfter (ms) follows the Timestamp.
FLAG_DELIVER_AT: Final = 0x0002
FLAG_DELIVER_AFTER: Final = 0x0004
_MESSAGE_FLAGS: Final = FLAG_PARTITION_KEY | FLAG_DELIVER_AT | FLAG_DELIVER_AFTER
_DELAY = struct.Struct(">q")
#: ``partition_key`` in a parse result when the datagram was AnyPartition.
ANY_PARTITION: Final = -1

_HEADER = struct.Struct(">ihh")  # Size, ApiKey, ApiVersion
_ANY_PREFIX = struct.Struct(">hh")  # Flags, TopicSize
_KEYED_PREFIX = struct.Struct(">hIh")  # Flags, PartitionKey (as uint32), TopicSize
_TIMESTAMP_KEY_SIZE = struct.Struct(">qi")  # Timestamp, KeySize
_VALUE_SIZE = struct.Struct(">i")
_PROPERTY_COUNT = struct.Struct(">h")
_NAME_SIZE = struct.Struct(">h")

#: (topic bytes, partition key or ANY_PARTITION, timestamp ms, key bytes, value offset,
#: extra SingleMessageMetadata fields: the encoded ``properties``, empty for Bruce's formats)
Parsed = tuple[bytes, int, int, bytes, int, bytes]


def parse_datagram_py(data: bytes) -> Parsed | str:
    """Parse one datagram: a :data:`Parsed` tuple, or a discard reason string.

    The pure-Python twin of ``native._intake.parse_datagram``; :data:`parse_datagram`
    is whichever intake runs.
    """
    length = len(data)
    if length < 8:
        return reasons.MALFORMED
    size, api_key, api_version = _HEADER.unpack_from(data, 0)
    if size != length:
        return reasons.MALFORMED
    if api_key == API_KEY_ANY_PARTITION:
        if length < 12:
            return reasons.MALFORMED if api_version == 0 else reasons.UNSUPPORTED_VERSION
        flags, topic_size = _ANY_PREFIX.unpack_from(data, 8)
        partition_key = ANY_PARTITION
        offset = 12
    elif api_key == API_KEY_PARTITION_KEY:
        if length < 16:
            return reasons.MALFORMED if api_version == 0 else reasons.UNSUPPORTED_VERSION
        flags, partition_key, topic_size = _KEYED_PREFIX.unpack_from(data, 8)
        offset = 16
    elif api_key == API_KEY_MESSAGE:
        return _parse_message(data, api_version)
    else:
        return reasons.UNSUPPORTED_API_KEY
    if api_version != 0:
        return reasons.UNSUPPORTED_VERSION
    if flags != 0 or topic_size <= 0:
        return reasons.MALFORMED
    topic_end = offset + topic_size
    if topic_end + 12 > length:
        return reasons.MALFORMED
    timestamp, key_size = _TIMESTAMP_KEY_SIZE.unpack_from(data, topic_end)
    key_start = topic_end + 12
    key_end = key_start + key_size
    if key_size < 0 or key_end + 4 > length:
        return reasons.MALFORMED
    (value_size,) = _VALUE_SIZE.unpack_from(data, key_end)
    value_start = key_end + 4
    if value_size < 0 or value_start + value_size != length:
        return reasons.MALFORMED
    return (
        data[offset:topic_end],
        partition_key,
        timestamp,
        data[key_start:key_end],
        value_start,
        b"",
    )


def _parse_message(data: bytes, api_version: int) -> Parsed | str:
    """A Message record (ApiKey 260): Bruce's fields plus properties."""
    length = len(data)
    if api_version != 0:
        return reasons.UNSUPPORTED_VERSION
    if length < 16:
        return reasons.MALFORMED
    flags, partition_key, topic_size = _KEYED_PREFIX.unpack_from(data, 8)
    delay_flag = flags & (FLAG_DELIVER_AT | FLAG_DELIVER_AFTER)
    if flags & ~_MESSAGE_FLAGS or delay_flag == FLAG_DELIVER_AT | FLAG_DELIVER_AFTER:
        return reasons.MALFORMED
    if topic_size <= 0:
        return reasons.MALFORMED
    if not flags & FLAG_PARTITION_KEY:
        partition_key = ANY_PARTITION
    topic_end = 16 + topic_size
    delay_size = 8 if delay_flag else 0
    if topic_end + 12 + delay_size > length:
        return reasons.MALFORMED
    fields = []
    if delay_flag:
        (delay,) = _DELAY.unpack_from(data, topic_end + 8)
        if delay < 0 or (delay_flag == FLAG_DELIVER_AT and delay == 0):
            return reasons.MALFORMED
        at = delay_flag == FLAG_DELIVER_AT
        fields.append(deliver_at_field(delay) if at else deliver_after_field(delay))
    (timestamp,) = _DELAY.unpack_from(data, topic_end)
    (key_size,) = _VALUE_SIZE.unpack_from(data, topic_end + 8 + delay_size)
    key_start = topic_end + 12 + delay_size
    offset = key_start + key_size
    if key_size < 0 or offset + 2 > length:
        return reasons.MALFORMED
    (count,) = _PROPERTY_COUNT.unpack_from(data, offset)
    offset += 2
    if count < 0:
        return reasons.MALFORMED
    for _ in range(count):
        if offset + 2 > length:
            return reasons.MALFORMED
        (name_size,) = _NAME_SIZE.unpack_from(data, offset)
        name_end = offset + 2 + name_size
        if name_size < 0 or name_end + 4 > length:
            return reasons.MALFORMED
        (value_size,) = _VALUE_SIZE.unpack_from(data, name_end)
        value_end = name_end + 4 + value_size
        if value_size < 0 or value_end > length:
            return reasons.MALFORMED
        name, value = data[offset + 2 : name_end], data[name_end + 4 : value_end]
        try:
            name.decode("utf-8")
            value.decode("utf-8")
        except UnicodeDecodeError:
            return reasons.MALFORMED  # protobuf strings must be UTF-8
        fields.append(_property_field(name, value))
        offset = value_end
    if offset + 4 > length:
        return reasons.MALFORMED
    (value_size,) = _VALUE_SIZE.unpack_from(data, offset)
    value_start = offset + 4
    if value_size < 0 or value_start + value_size != length:
        return reasons.MALFORMED
    key = data[key_start : key_start + key_size]
    return data[16:topic_end], partition_key, timestamp, key, value_start, b"".join(fields)


def _property_field(name: bytes, value: bytes) -> bytes:
    """SingleMessageMetadata field 1 (``repeated KeyValue properties``) for one pair."""
    pair = length_delimited(b"\x0a", name) + length_delimited(b"\x12", value)
    return length_delimited(b"\x0a", pair)


def pin_delivery_time(data: bytes, key_field: bytes) -> bytes:
    """A valid Message record ``data`` whose DeliverAfter is made the DeliverAt its prepared
    fields (``key_field``, see ``route/appender.prepare``) hold; ``data`` itself otherwise.

    For a datagram kept as it came (waiting for its topic's partition count, in the
    journal or the spool) and parsed again later: "after" counts from when the daemon
    first read it, not from the replay.  Same length, so offsets into it still hold.
    """
    if data[4:6] != _MESSAGE_KEY or not data[9] & FLAG_DELIVER_AFTER:
        return data
    deliver_at, _ = take_deliver_at(key_field)
    if not deliver_at:
        return data
    flags, _, topic_size = _KEYED_PREFIX.unpack_from(data, 8)
    pinned = bytearray(data)
    struct.pack_into(">h", pinned, 8, flags & ~FLAG_DELIVER_AFTER | FLAG_DELIVER_AT)
    _DELAY.pack_into(pinned, 16 + topic_size + 8, deliver_at)
    return bytes(pinned)


_MESSAGE_KEY: Final = API_KEY_MESSAGE.to_bytes(2, "big")

#: The parser the daemon uses: the compiled one where the compiled intake runs (``native``).
parse_datagram = pick("parse_datagram", parse_datagram_py)
