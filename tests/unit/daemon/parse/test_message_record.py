"""pulsar-bruce's Message record (ApiKey 260): Bruce's fields plus properties.

The client encodes it, the daemon's parser takes it apart into the same fields
as AnyPartition/PartitionKey plus the ``properties`` entries of
SingleMessageMetadata (field 1, ``repeated KeyValue``), checked here against the
generated protobuf classes.
"""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pulsar_bruce import reasons
from pulsar_bruce.frame import pulsar_api_pb2 as pb
from pulsar_bruce.parse.datagram import ANY_PARTITION, parse_datagram
from to_pulsar.encoding import encode_message_record
from to_pulsar.errors import InvalidMessageError


def properties_of(fields: bytes) -> dict[str, str]:
    metadata = pb.SingleMessageMetadata.FromString(fields + b"\x18\x00")  # + payload_size 0
    return {kv.key: kv.value for kv in metadata.properties}


def test_golden_message_record() -> None:
    data = encode_message_record("t", b"v", b"k", 5, 7, {"a": "b"})
    assert data == bytes.fromhex(
        "0000002d"  # Size 45
        "0104"  # ApiKey 260
        "0000"  # ApiVersion 0
        "0001"  # Flags: PartitionKey set
        "00000007"  # PartitionKey 7
        "0001" "74"  # Topic "t"
        "0000000000000005"  # Timestamp 5
        "00000001" "6b"  # Key "k"
        "0001"  # one property
        "0001" "61" "00000001" "62"  # "a" = "b"
        "00000001" "76"  # Value "v"
    )  # fmt: skip
    assert parse_datagram(data) == (b"t", 7, 5, b"k", 44, b"\x0a\x06\x0a\x01a\x12\x01b")


def test_without_the_flag_the_daemon_picks_the_partition() -> None:
    data = encode_message_record("t", b"v", properties={"x": "1"})
    parsed = parse_datagram(data)
    assert isinstance(parsed, tuple)
    assert parsed[1] == ANY_PARTITION and properties_of(parsed[5]) == {"x": "1"}


@settings(max_examples=200, deadline=None)
@given(
    properties=st.dictionaries(st.text(min_size=0, max_size=20), st.text(max_size=50), max_size=8),
    key=st.binary(max_size=20),
    value=st.binary(max_size=200),
    partition_key=st.none() | st.integers(0, 2**32 - 1),
    timestamp=st.integers(0, 2**62),
)
def test_round_trip(
    properties: dict[str, str],
    key: bytes,
    value: bytes,
    partition_key: int | None,
    timestamp: int,
) -> None:
    data = encode_message_record("topic", value, key, timestamp, partition_key, properties)
    parsed = parse_datagram(data)
    assert isinstance(parsed, tuple)
    topic, pkey, ts, parsed_key, value_offset, fields = parsed
    assert (topic, ts, parsed_key, data[value_offset:]) == (b"topic", timestamp, key, value)
    assert pkey == (ANY_PARTITION if partition_key is None else partition_key)
    assert properties_of(fields) == properties


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_truncations_and_corruptions_are_counted_not_crashes(data: st.DataObject) -> None:
    record = encode_message_record("t", b"value", b"key", 1, None, {"name": "value"})
    cut = data.draw(st.integers(0, len(record) - 1))
    assert parse_datagram(record[:cut]) in (reasons.MALFORMED,)
    position = data.draw(st.integers(8, len(record) - 1))
    mutated = bytearray(record)
    mutated[position] ^= data.draw(st.integers(1, 255))
    assert isinstance(parse_datagram(bytes(mutated)), tuple | str)


@pytest.mark.parametrize(
    ("patch", "reason"),
    [
        (lambda r: r[:4] + struct.pack(">hh", 260, 1) + r[8:], reasons.UNSUPPORTED_VERSION),
        (lambda r: r[:8] + b"\x00\x02" + r[10:], reasons.MALFORMED),  # unknown flag
        (lambda r: r[:-5] + b"\xff\xff\xff\xff" + r[-1:], reasons.MALFORMED),  # value size < 0
    ],
)
def test_bad_records(patch: object, reason: str) -> None:
    record = encode_message_record("t", b"v", b"", 0, None, {"a": "b"})
    assert parse_datagram(patch(record)) == reason  # type: ignore[operator]


def test_a_property_that_is_not_utf8_is_malformed() -> None:
    record = bytearray(encode_message_record("t", b"v", b"", 0, None, {"a": "b"}))
    assert record[-6:-5] == b"b"
    record[-6] = 0xFF  # the property's value: no longer UTF-8
    assert parse_datagram(bytes(record)) == reasons.MALFORMED


def test_the_client_refuses_what_cannot_be_a_property() -> None:
    with pytest.raises(InvalidMessageError, match="must be str"):
        encode_message_record("t", b"v", properties={"a": b"bytes"})  # type: ignore[dict-item]
    with pytest.raises(InvalidMessageError, match="partition key"):
        encode_message_record("t", b"v", partition_key=2**32, properties={"a": "b"})
