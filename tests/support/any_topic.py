"""Datagrams to any topic name, bad ones included, for the tests of the daemon's own rule.

to_pulsar's encoders refuse a name the daemon would discard (``to_pulsar.topics``), so a
sender hears of it at once.  The daemon's tests still need such datagrams, to check that
the daemon discards them as ``bad_topic`` (or that its parser returns any bytes unchanged):
:func:`to_any_topic` lets a to_pulsar encoder write the datagram with a valid name of the
same length, then puts the raw name in its place.  Every other byte is to_pulsar's.
"""

from __future__ import annotations

import struct
from collections.abc import Callable

from to_pulsar.encoding import API_KEY_ANY_PARTITION, API_KEY_MESSAGE, API_KEY_PARTITION_KEY

#: Where the topic starts, by ApiKey: Size:int32 ApiKey:int16 ApiVersion:int16 Flags:int16,
#: then PartitionKey:int32 (all but AnyPartition), then TopicSize:int16.
_TOPIC_AT = {API_KEY_ANY_PARTITION: 12, API_KEY_PARTITION_KEY: 16, API_KEY_MESSAGE: 16}


def to_any_topic(topic: str | bytes, encode: Callable[[bytes], bytes]) -> bytes:
    """What ``encode(name)`` writes, with ``topic`` (any bytes, or str as UTF-8) as the name:
    ``to_any_topic(b"bad topic", lambda name: encode_any_partition(name, b"v"))``."""
    raw = topic.encode() if isinstance(topic, str) else bytes(topic)
    stand_in = b"t" * len(raw)
    data = encode(stand_in)
    (api_key,) = struct.unpack_from(">h", data, 4)
    at = _TOPIC_AT[api_key]
    assert data[at - 2 : at + len(raw)] == struct.pack(">h", len(raw)) + stand_in
    return data[:at] + raw + data[at + len(raw) :]
