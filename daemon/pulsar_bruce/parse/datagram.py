"""Bruce datagram parser, sans-IO.

Input format (big-endian; ``Size`` counts the whole datagram)::

    GenericMessage => Size:int32 ApiKey:int16 ApiVersion:int16 Message
    AnyPartition (256, v0) => Flags:int16 TopicSize:int16 Topic Timestamp:int64
                              KeySize:int32 Key ValueSize:int32 Value
    PartitionKey (257, v0) => Flags:int16 PartitionKey:int32 TopicSize:int16 Topic
                              Timestamp:int64 KeySize:int32 Key ValueSize:int32 Value

:func:`parse_datagram` runs once per datagram on the hot path: precompiled
structs, no objects beyond the result tuple, and the value is not copied (its
offset is returned; the value always runs to the end of the datagram).
"""

from __future__ import annotations

import struct
from typing import Final

from pulsar_bruce import reasons

API_KEY_ANY_PARTITION: Final = 256
API_KEY_PARTITION_KEY: Final = 257
#: ``partition_key`` in a parse result when the datagram was AnyPartition.
ANY_PARTITION: Final = -1

_HEADER = struct.Struct(">ihh")  # Size, ApiKey, ApiVersion
_ANY_PREFIX = struct.Struct(">hh")  # Flags, TopicSize
_KEYED_PREFIX = struct.Struct(">hIh")  # Flags, PartitionKey (as uint32), TopicSize
_TIMESTAMP_KEY_SIZE = struct.Struct(">qi")  # Timestamp, KeySize
_VALUE_SIZE = struct.Struct(">i")

#: (topic bytes, partition key or ANY_PARTITION, timestamp ms, key bytes, value offset)
Parsed = tuple[bytes, int, int, bytes, int]


def parse_datagram(data: bytes) -> Parsed | str:
    """Parse one datagram: a :data:`Parsed` tuple, or a discard reason string."""
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
    return data[offset:topic_end], partition_key, timestamp, data[key_start:key_end], value_start
