"""Encode Bruce-format datagrams (AnyPartition / PartitionKey, ApiVersion 0).

Wire layout, all integers big-endian, Size counting the whole datagram::

    GenericMessage => Size:int32 ApiKey:int16 ApiVersion:int16 Message
    AnyPartition   => Flags:int16 TopicSize:int16 Topic
                      Timestamp:int64 KeySize:int32 Key ValueSize:int32 Value
    PartitionKey   => Flags:int16 PartitionKey:int32 TopicSize:int16 Topic
                      Timestamp:int64 KeySize:int32 Key ValueSize:int32 Value

These functions sit on the per-message hot path, so they use precompiled structs,
a single ``b"".join`` and defer all diagnostics to the (rare) failure path.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Mapping

from .errors import InvalidMessageError
from .topics import MAX_TOPIC_SIZE as MAX_TOPIC_SIZE  # re-exported: its old home
from .topics import check_topic

API_KEY_ANY_PARTITION = 256
API_KEY_PARTITION_KEY = 257
API_VERSION = 0

# Key and value: any bytes-like object, or str (sent as UTF-8).
Payload = bytes | bytearray | memoryview | str

MIN_PARTITION_KEY = -0x8000_0000
MAX_PARTITION_KEY = 0xFFFF_FFFF

# Size ApiKey ApiVersion Flags TopicSize
_ANY_HEAD = struct.Struct(">ihhhh")
# Size ApiKey ApiVersion Flags PartitionKey TopicSize
_PK_HEAD = struct.Struct(">ihhhIh")
# Timestamp KeySize
_TS_KEYSIZE = struct.Struct(">qi")
# ValueSize
_VALUESIZE = struct.Struct(">i")

# Fixed bytes besides topic, key and value: head + Timestamp/KeySize + ValueSize.
ANY_PARTITION_OVERHEAD = _ANY_HEAD.size + _TS_KEYSIZE.size + _VALUESIZE.size
PARTITION_KEY_OVERHEAD = _PK_HEAD.size + _TS_KEYSIZE.size + _VALUESIZE.size

_pack_any_head = _ANY_HEAD.pack
_pack_pk_head = _PK_HEAD.pack
_pack_ts_keysize = _TS_KEYSIZE.pack
_pack_valuesize = _VALUESIZE.pack
_join = b"".join


def _payload_bytes(what: str, data: Payload) -> bytes:
    """Normalise a non-``bytes`` payload (off the hot path, which checks ``type() is bytes``).

    str is UTF-8 encoded, keeping surrogate-escaped bytes (e.g. from argv) intact;
    other bytes-like objects are copied so ``len()`` is a byte count.
    """
    if isinstance(data, str):
        return data.encode("utf-8", "surrogateescape")
    if isinstance(data, bytes | bytearray | memoryview):
        return bytes(data)
    raise TypeError(f"{what} must be bytes or str, not {type(data).__name__}")


def _diagnose(
    exc: Exception, size: int, topic: object, timestamp_ms: object
) -> InvalidMessageError:
    """Turn a packing or UTF-8 error into a message that names the bad field."""
    if isinstance(exc, UnicodeEncodeError):
        what = "topic" if exc.object is topic else "key/value"
        return InvalidMessageError(f"{what} is not encodable as UTF-8: {exc.reason}")
    if not isinstance(timestamp_ms, int) or not -(2**63) <= timestamp_ms < 2**63:
        return InvalidMessageError(f"timestamp_ms must be an int64, got {timestamp_ms!r}")
    if size > 0x7FFF_FFFF:
        return InvalidMessageError(f"message of {size} bytes exceeds the int32 Size field")
    return InvalidMessageError(f"cannot encode message: {exc}")


def encode_any_partition(
    topic: str | bytes,
    value: Payload,
    key: Payload = b"",
    timestamp_ms: int = 0,
) -> bytes:
    """Encode an AnyPartition message: the daemon picks the partition.

    ``timestamp_ms`` is milliseconds since the epoch; 0 means "no event time".
    """
    size = 0
    try:
        raw_topic = topic.encode() if isinstance(topic, str) else topic
        check_topic(raw_topic)  # the daemon's rule: a bad name fails here, not there
        topic_size = len(raw_topic)
        if type(value) is not bytes:
            value = _payload_bytes("value", value)
        if type(key) is not bytes:
            key = _payload_bytes("key", key)
        key_size = len(key)
        value_size = len(value)
        size = ANY_PARTITION_OVERHEAD + topic_size + key_size + value_size
        return _join(
            (
                _pack_any_head(size, API_KEY_ANY_PARTITION, API_VERSION, 0, topic_size),
                raw_topic,
                _pack_ts_keysize(timestamp_ms, key_size),
                key,
                _pack_valuesize(value_size),
                value,
            )
        )
    except (struct.error, UnicodeEncodeError) as exc:
        raise _diagnose(exc, size, topic, timestamp_ms) from exc


def encode_partition_key(
    partition_key: int,
    topic: str | bytes,
    value: Payload,
    key: Payload = b"",
    timestamp_ms: int = 0,
) -> bytes:
    """Encode a PartitionKey message: the daemon routes by ``partition_key``.

    The key is unsigned 32-bit on the wire; negative int32 values (as Bruce users
    pass them) are mapped by two's complement, so -1 and 0xFFFFFFFF are the same key.
    """
    if not MIN_PARTITION_KEY <= partition_key <= MAX_PARTITION_KEY:
        raise InvalidMessageError(
            f"partition key must be in {MIN_PARTITION_KEY}..{MAX_PARTITION_KEY}, "
            f"got {partition_key}"
        )
    size = 0
    try:
        raw_topic = topic.encode() if isinstance(topic, str) else topic
        check_topic(raw_topic)  # the daemon's rule: a bad name fails here, not there
        topic_size = len(raw_topic)
        if type(value) is not bytes:
            value = _payload_bytes("value", value)
        if type(key) is not bytes:
            key = _payload_bytes("key", key)
        key_size = len(key)
        value_size = len(value)
        size = PARTITION_KEY_OVERHEAD + topic_size + key_size + value_size
        return _join(
            (
                _pack_pk_head(
                    size,
                    API_KEY_PARTITION_KEY,
                    API_VERSION,
                    0,
                    partition_key & 0xFFFF_FFFF,
                    topic_size,
                ),
                raw_topic,
                _pack_ts_keysize(timestamp_ms, key_size),
                key,
                _pack_valuesize(value_size),
                value,
            )
        )
    except (struct.error, UnicodeEncodeError) as exc:
        raise _diagnose(exc, size, topic, timestamp_ms) from exc


#: What :data:`plain_heads` holds per topic: for AnyPartition, the packer of Size, head,
#: Timestamp, KeySize 0, ValueSize, its fixed size and the head (ApiKey ApiVersion Flags
#: TopicSize Topic); the same three for PartitionKey, whose head is the part after the
#: partition key (TopicSize Topic).
PlainHead = tuple[Callable[..., bytes], int, bytes, Callable[..., bytes], int, bytes]


class _PlainHeads(dict[str | bytes, PlainHead]):
    """topic -> :data:`PlainHead`: built once per topic.

    A message with no key and no properties is then one dict lookup, one
    ``struct.pack`` and one concatenation. Bounded: cleared when full.
    """

    def __missing__(self, topic: str | bytes) -> PlainHead:
        raw_topic = topic.encode() if isinstance(topic, str) else topic
        check_topic(raw_topic)
        size = len(raw_topic)
        if len(self) >= 1024:
            self.clear()
        any_layout = struct.Struct(f">i{8 + size}sqii")
        pk_layout = struct.Struct(f">i6sI{2 + size}sqii")
        any_head = struct.pack(">hhhh", API_KEY_ANY_PARTITION, API_VERSION, 0, size) + raw_topic
        pk_tail = struct.pack(">h", size) + raw_topic
        entry = (
            any_layout.pack,
            any_layout.size,
            any_head,
            pk_layout.pack,
            pk_layout.size,
            pk_tail,
        )
        self[topic] = entry
        return entry


plain_heads = _PlainHeads()
_PK_HEAD_A = struct.pack(">hhh", API_KEY_PARTITION_KEY, API_VERSION, 0)


def encode_plain(
    topic: str | bytes, value: bytes, partition_key: int | None, timestamp_ms: int
) -> bytes:
    """AnyPartition or PartitionKey with no key: byte for byte what the general encoders give.

    ``value`` must be ``bytes``; anything unusual (a bad timestamp or partition key, a
    huge value) goes to the general encoder, which names the problem.
    """
    any_pack, any_size, any_head, pk_pack, pk_size, pk_tail = plain_heads[topic]
    value_size = len(value)
    try:
        if partition_key is None:
            return any_pack(any_size + value_size, any_head, timestamp_ms, 0, value_size) + value
        if MIN_PARTITION_KEY <= partition_key <= MAX_PARTITION_KEY:
            return (
                pk_pack(
                    pk_size + value_size,
                    _PK_HEAD_A,
                    partition_key & 0xFFFF_FFFF,
                    pk_tail,
                    timestamp_ms,
                    0,
                    value_size,
                )
                + value
            )
    except (struct.error, TypeError):
        pass
    if partition_key is None:
        return encode_any_partition(topic, value, b"", timestamp_ms)
    return encode_partition_key(partition_key, topic, value, b"", timestamp_ms)


API_KEY_MESSAGE = 260
#: Message flag: the PartitionKey field is set (else the daemon picks the partition).
FLAG_PARTITION_KEY = 0x0001
#: Message flags: DeliverAt (epoch ms) or DeliverAfter (ms) follows the Timestamp.
FLAG_DELIVER_AT = 0x0002
FLAG_DELIVER_AFTER = 0x0004
_DELAY = struct.Struct(">q")
_PROPERTY_COUNT = struct.Struct(">h")
_NAME_SIZE = struct.Struct(">h")


def encode_message_record(
    topic: str | bytes,
    value: Payload,
    key: Payload = b"",
    timestamp_ms: int = 0,
    partition_key: int | None = None,
    properties: Mapping[str, str] | None = None,
    deliver_at_ms: int | None = None,
    deliver_after_ms: int | None = None,
) -> bytes:
    """Encode pulsar-bruce's Message record (ApiKey 260): Bruce's fields plus properties
    and a delivery time.

    Wire layout (after Size ApiKey ApiVersion)::

        Flags:int16 PartitionKey:int32 TopicSize:int16 Topic Timestamp:int64
        [DeliverAt:int64 | DeliverAfter:int64]
        KeySize:int32 Key PropertyCount:int16 (NameSize:int16 Name ValueSize:int32 Value)*
        ValueSize:int32 Value

    Flags bit 0 says PartitionKey is set; without it the daemon picks the partition.
    Bit 1: DeliverAt (epoch ms, > 0) follows the Timestamp; bit 2: DeliverAfter (ms from
    when the daemon reads it, >= 0); not both.  Property names and values are strings
    (UTF-8 on the wire), as Pulsar's are.
    """
    delay_flag, delay = _delivery(deliver_at_ms, deliver_after_ms)
    if partition_key is not None and not MIN_PARTITION_KEY <= partition_key <= MAX_PARTITION_KEY:
        raise InvalidMessageError(
            f"partition key must be in {MIN_PARTITION_KEY}..{MAX_PARTITION_KEY}, "
            f"got {partition_key}"
        )
    pairs: list[bytes] = []
    for name, text in (properties or {}).items():
        if not isinstance(name, str) or not isinstance(text, str):
            raise InvalidMessageError(f"property {name!r}: names and values must be str")
        raw_name, raw_value = name.encode(), text.encode()
        if len(raw_name) > 0x7FFF:
            raise InvalidMessageError(f"property name of {len(raw_name)} bytes (at most 32767)")
        pairs += (_NAME_SIZE.pack(len(raw_name)), raw_name, _pack_valuesize(len(raw_value)))
        pairs.append(raw_value)
    if len(pairs) // 4 > 0x7FFF:
        raise InvalidMessageError(f"{len(pairs) // 4} properties (at most 32767)")
    size = 0
    try:
        raw_topic = topic.encode() if isinstance(topic, str) else topic
        check_topic(raw_topic)
        value = value if type(value) is bytes else _payload_bytes("value", value)
        key = key if type(key) is bytes else _payload_bytes("key", key)
        ts_keysize = _pack_ts_keysize(timestamp_ms, len(key))
        if delay_flag:  # the delivery time goes between the Timestamp and the KeySize
            ts_keysize = ts_keysize[:8] + _DELAY.pack(delay) + ts_keysize[8:]
        body = [
            ts_keysize,
            key,
            _PROPERTY_COUNT.pack(len(pairs) // 4),
            *pairs,
            _pack_valuesize(len(value)),
            value,
        ]
        size = _PK_HEAD.size + len(raw_topic) + sum(map(len, body))
        flags = (0 if partition_key is None else FLAG_PARTITION_KEY) | delay_flag
        head = _pack_pk_head(
            size, API_KEY_MESSAGE, API_VERSION, flags, (partition_key or 0) & 0xFFFF_FFFF,
            len(raw_topic),
        )  # fmt: skip
        return _join((head, raw_topic, *body))
    except (struct.error, UnicodeEncodeError) as exc:
        raise _diagnose(exc, size, topic, timestamp_ms) from exc


def _delivery(deliver_at_ms: int | None, deliver_after_ms: int | None) -> tuple[int, int]:
    """The Message record's delay flag and value (0, 0: none), checked."""
    if deliver_at_ms is not None and deliver_after_ms is not None:
        raise InvalidMessageError("give deliver_at_ms or deliver_after_ms, not both")
    if deliver_at_ms is not None:
        if not 0 < deliver_at_ms < 1 << 63:
            raise InvalidMessageError(f"deliver_at_ms must be epoch ms, got {deliver_at_ms}")
        return FLAG_DELIVER_AT, deliver_at_ms
    if deliver_after_ms is not None:
        if not 0 <= deliver_after_ms < 1 << 63:
            raise InvalidMessageError(f"deliver_after_ms must be 0 or more, got {deliver_after_ms}")
        return FLAG_DELIVER_AFTER, deliver_after_ms
    return 0, 0
