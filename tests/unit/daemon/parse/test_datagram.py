"""Bruce datagram parser: every validation rule of interface.md, valid results, properties."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pulsar_bruce import reasons
from pulsar_bruce.parse.datagram import ANY_PARTITION, parse_datagram
from to_pulsar.encoding import encode_any_partition, encode_partition_key

from tests.support.any_topic import to_any_topic

MALFORMED = reasons.MALFORMED


def any_partition(
    topic: bytes = b"t",
    key: bytes = b"k",
    value: bytes = b"v",
    timestamp: int = 0,
    *,
    flags: int = 0,
    api_version: int = 0,
    topic_size: int | None = None,
    key_size: int | None = None,
    value_size: int | None = None,
    size: int | None = None,
    trailer: bytes = b"",
) -> bytes:
    """An AnyPartition datagram written with plain struct calls; any field can lie."""
    body = (
        struct.pack(">hh", flags, len(topic) if topic_size is None else topic_size)
        + topic
        + struct.pack(">qi", timestamp, len(key) if key_size is None else key_size)
        + key
        + struct.pack(">i", len(value) if value_size is None else value_size)
        + value
        + trailer
    )
    total = 8 + len(body)
    return struct.pack(">ihh", total if size is None else size, 256, api_version) + body


def partition_key(
    pkey: int,
    topic: bytes = b"t",
    key: bytes = b"k",
    value: bytes = b"v",
    timestamp: int = 0,
    *,
    flags: int = 0,
    api_version: int = 0,
    topic_size: int | None = None,
) -> bytes:
    body = (
        struct.pack(
            ">hIh", flags, pkey & 0xFFFFFFFF, len(topic) if topic_size is None else topic_size
        )
        + topic
        + struct.pack(">qi", timestamp, len(key))
        + key
        + struct.pack(">i", len(value))
        + value
    )
    return struct.pack(">ihh", 8 + len(body), 257, api_version) + body


def value_of(data: bytes) -> bytes:
    result = parse_datagram(data)
    assert isinstance(result, tuple)
    return data[result[4] :]


# -- valid datagrams ------------------------------------------------------------------------


def test_any_partition_golden_datagram() -> None:
    data = bytes.fromhex(
        "00000029"  # Size = 8 + 4 + 5 + 12 + 3 + 4 + 5 = 41
        "0100"  # ApiKey = 256 (AnyPartition)
        "0000"  # ApiVersion = 0
        "0000"  # Flags = 0
        "0005"  # TopicSize = 5
        "746f706963"  # Topic = "topic"
        "0000018bcfe56800"  # Timestamp = 1700000000000
        "00000003"  # KeySize = 3
        "6b6579"  # Key = "key"
        "00000005"  # ValueSize = 5
        "76616c7565"  # Value = "value"
    )
    assert parse_datagram(data) == (b"topic", ANY_PARTITION, 1700000000000, b"key", 36, b"")
    assert value_of(data) == b"value"


def test_partition_key_golden_datagram() -> None:
    data = bytes.fromhex(
        "00000022"  # Size = 8 + 8 + 1 + 12 + 0 + 4 + 1 = 34
        "0101"  # ApiKey = 257 (PartitionKey)
        "0000"  # ApiVersion = 0
        "0000"  # Flags = 0
        "00000007"  # PartitionKey = 7
        "0001"  # TopicSize = 1
        "74"  # Topic = "t"
        "0000000000000000"  # Timestamp = 0
        "00000000"  # KeySize = 0
        "00000001"  # ValueSize = 1
        "78"  # Value = "x"
    )
    assert parse_datagram(data) == (b"t", 7, 0, b"", 33, b"")
    assert value_of(data) == b"x"


def test_partition_key_is_read_as_uint32() -> None:
    result = parse_datagram(partition_key(-1))
    assert isinstance(result, tuple)
    assert result[1] == 4294967295


def test_partition_key_high_bit_is_not_negative() -> None:
    result = parse_datagram(partition_key(0x80000000))
    assert isinstance(result, tuple)
    assert result[1] == 0x80000000


def test_any_partition_result_uses_the_any_partition_marker() -> None:
    result = parse_datagram(any_partition())
    assert isinstance(result, tuple)
    assert result[1] == ANY_PARTITION == -1


def test_empty_key_and_empty_value_are_valid() -> None:
    data = any_partition(key=b"", value=b"")
    assert parse_datagram(data) == (b"t", ANY_PARTITION, 0, b"", len(data), b"")


def test_negative_timestamp_is_passed_through() -> None:
    result = parse_datagram(any_partition(timestamp=-5))
    assert isinstance(result, tuple)
    assert result[2] == -5


def test_large_value_of_200_kb() -> None:
    value = bytes(range(256)) * 800  # 204800 bytes
    data = any_partition(topic=b"big", key=b"", value=value)
    result = parse_datagram(data)
    assert isinstance(result, tuple)
    assert result[0] == b"big"
    assert value_of(data) == value


def test_binary_key_and_topic_bytes_are_returned_unchanged() -> None:
    data = any_partition(topic=b"\xff\xfe", key=b"\x00\x80\xff")
    result = parse_datagram(data)
    assert isinstance(result, tuple)
    assert result[0] == b"\xff\xfe"  # topic validity is checked later, not here
    assert result[3] == b"\x00\x80\xff"


# -- validation rules -------------------------------------------------------------------------


@pytest.mark.parametrize("length", range(8))
def test_shorter_than_8_bytes_is_malformed(length: int) -> None:
    assert parse_datagram(any_partition()[:length]) == MALFORMED


def test_size_larger_than_length_is_malformed() -> None:
    data = any_partition()
    assert parse_datagram(any_partition(size=len(data) + 1)) == MALFORMED


def test_size_smaller_than_length_is_malformed() -> None:
    data = any_partition()
    assert parse_datagram(any_partition(size=len(data) - 1)) == MALFORMED


def test_negative_size_is_malformed() -> None:
    assert parse_datagram(any_partition(size=-1)) == MALFORMED


@pytest.mark.parametrize("flags", [1, -1, 0x100, 0x7FFF])
def test_nonzero_flags_any_partition_is_malformed(flags: int) -> None:
    assert parse_datagram(any_partition(flags=flags)) == MALFORMED


@pytest.mark.parametrize("flags", [1, -1])
def test_nonzero_flags_partition_key_is_malformed(flags: int) -> None:
    assert parse_datagram(partition_key(0, flags=flags)) == MALFORMED


def test_topic_size_zero_is_malformed() -> None:
    assert parse_datagram(any_partition(topic=b"", topic_size=0)) == MALFORMED


@pytest.mark.parametrize("topic_size", [-1, -32768])
def test_negative_topic_size_is_malformed(topic_size: int) -> None:
    assert parse_datagram(any_partition(topic_size=topic_size)) == MALFORMED


def test_topic_size_zero_partition_key_is_malformed() -> None:
    assert parse_datagram(partition_key(1, topic=b"", topic_size=0)) == MALFORMED


def test_negative_topic_size_partition_key_is_malformed() -> None:
    assert parse_datagram(partition_key(1, topic_size=-1)) == MALFORMED


@pytest.mark.parametrize("key_size", [-1, -(2**31)])
def test_negative_key_size_is_malformed(key_size: int) -> None:
    assert parse_datagram(any_partition(key=b"", key_size=key_size)) == MALFORMED


@pytest.mark.parametrize("value_size", [-1, -(2**31)])
def test_negative_value_size_is_malformed(value_size: int) -> None:
    assert parse_datagram(any_partition(value=b"", value_size=value_size)) == MALFORMED


def test_topic_running_past_the_end_is_malformed() -> None:
    # TopicSize claims more than the whole rest of the datagram.
    assert parse_datagram(any_partition(topic_size=1000)) == MALFORMED


def test_topic_leaving_no_room_for_timestamp_is_malformed() -> None:
    data = any_partition()
    # TopicSize covers the topic and all but 11 of the following bytes.
    assert parse_datagram(any_partition(topic_size=len(data) - 12 - 11)) == MALFORMED


def test_truncated_fixed_header_any_partition_is_malformed() -> None:
    data = struct.pack(">ihhh", 10, 256, 0, 0)  # stops before TopicSize
    assert parse_datagram(data) == MALFORMED


def test_truncated_fixed_header_partition_key_is_malformed() -> None:
    data = struct.pack(">ihhhh", 12, 257, 0, 0, 0)  # stops inside PartitionKey
    assert parse_datagram(data) == MALFORMED


def test_truncated_timestamp_is_malformed() -> None:
    data = struct.pack(">ihhhh", 17, 256, 0, 0, 1) + b"t" + b"\x00" * 4
    assert parse_datagram(data) == MALFORMED


def test_key_running_past_the_end_is_malformed() -> None:
    assert parse_datagram(any_partition(key_size=1000)) == MALFORMED


def test_key_leaving_no_room_for_value_size_is_malformed() -> None:
    # KeySize = 1 + 4 + 1: the key swallows ValueSize and the value.
    assert parse_datagram(any_partition(key=b"k", value=b"v", key_size=6)) == MALFORMED


def test_value_running_past_the_end_is_malformed() -> None:
    assert parse_datagram(any_partition(value=b"abc", value_size=4)) == MALFORMED


def test_bytes_left_after_value_are_malformed() -> None:
    assert parse_datagram(any_partition(trailer=b"\x00")) == MALFORMED


def test_value_size_shorter_than_the_value_is_malformed() -> None:
    assert parse_datagram(any_partition(value=b"abc", value_size=2)) == MALFORMED


@pytest.mark.parametrize("api_key", [0, 1, 255, 258, -1, 0x7FFF])
def test_unknown_api_key_is_unsupported_api_key(api_key: int) -> None:
    data = bytearray(any_partition())
    struct.pack_into(">h", data, 4, api_key)
    assert parse_datagram(bytes(data)) == reasons.UNSUPPORTED_API_KEY


def test_unknown_api_key_with_header_only_is_unsupported_api_key() -> None:
    assert parse_datagram(struct.pack(">ihh", 8, 300, 0)) == reasons.UNSUPPORTED_API_KEY


def test_api_version_1_any_partition_is_unsupported_version() -> None:
    assert parse_datagram(any_partition(api_version=1)) == reasons.UNSUPPORTED_VERSION


def test_api_version_1_partition_key_is_unsupported_version() -> None:
    assert parse_datagram(partition_key(3, api_version=1)) == reasons.UNSUPPORTED_VERSION


@pytest.mark.parametrize("api_key", [256, 257])
def test_api_version_1_short_body_is_unsupported_version(api_key: int) -> None:
    assert parse_datagram(struct.pack(">ihh", 8, api_key, 1)) == reasons.UNSUPPORTED_VERSION


@pytest.mark.parametrize("api_key", [256, 257])
def test_header_only_version_0_is_malformed(api_key: int) -> None:
    assert parse_datagram(struct.pack(">ihh", 8, api_key, 0)) == MALFORMED


# -- properties ----------------------------------------------------------------------------------


def check_result(result: object) -> None:
    if isinstance(result, str):
        assert result in reasons.ALL
    else:
        assert isinstance(result, tuple)
        assert len(result) == 6


@settings(max_examples=1000, deadline=None, derandomize=True)
@given(st.binary(max_size=200))
def test_arbitrary_bytes_never_raise(data: bytes) -> None:
    check_result(parse_datagram(data))


@settings(max_examples=1000, deadline=None, derandomize=True)
@given(st.sampled_from([256, 257]), st.integers(0, 1), st.binary(max_size=120))
def test_arbitrary_bodies_with_a_correct_header_never_raise(
    api_key: int, api_version: int, body: bytes
) -> None:
    check_result(parse_datagram(struct.pack(">ihh", 8 + len(body), api_key, api_version) + body))


topics = st.binary(min_size=1, max_size=300)
keys = st.binary(max_size=300)
values = st.binary(max_size=2000)
timestamps = st.integers(-(2**63), 2**63 - 1)


@settings(max_examples=300, deadline=None, derandomize=True)
@given(topics, keys, values, timestamps)
def test_any_partition_round_trip_with_to_pulsar_encoding(
    topic: bytes, key: bytes, value: bytes, timestamp: int
) -> None:
    data = to_any_topic(topic, lambda name: encode_any_partition(name, value, key, timestamp))
    expected = (topic, ANY_PARTITION, timestamp, key, len(data) - len(value), b"")
    assert parse_datagram(data) == expected
    assert value_of(data) == value


@settings(max_examples=300, deadline=None, derandomize=True)
@given(st.integers(-(2**31), 2**32 - 1), topics, keys, values, timestamps)
def test_partition_key_round_trip_with_to_pulsar_encoding(
    pkey: int, topic: bytes, key: bytes, value: bytes, timestamp: int
) -> None:
    data = to_any_topic(
        topic, lambda name: encode_partition_key(pkey, name, value, key, timestamp)
    )
    result = parse_datagram(data)
    assert isinstance(result, tuple)
    assert result[:4] == (topic, pkey & 0xFFFFFFFF, timestamp, key)
    assert value_of(data) == value


@settings(max_examples=500, deadline=None, derandomize=True)
@given(st.data(), st.booleans(), topics, keys, values)
def test_mutating_one_byte_of_a_valid_datagram_never_raises(
    data: st.DataObject, keyed: bool, topic: bytes, key: bytes, value: bytes
) -> None:
    datagram = to_any_topic(
        topic,
        lambda name: (
            encode_partition_key(7, name, value, key, 12345)
            if keyed
            else encode_any_partition(name, value, key, 12345)
        ),
    )
    index = data.draw(st.integers(0, len(datagram) - 1))
    byte = data.draw(st.integers(0, 255))
    mutated = datagram[:index] + bytes([byte]) + datagram[index + 1 :]
    check_result(parse_datagram(mutated))


@settings(max_examples=300, deadline=None, derandomize=True)
@given(st.data(), topics, values)
def test_truncating_a_valid_datagram_is_malformed(
    data: st.DataObject, topic: bytes, value: bytes
) -> None:
    datagram = to_any_topic(topic, lambda name: encode_any_partition(name, value))
    cut = data.draw(st.integers(0, len(datagram) - 1))
    assert parse_datagram(datagram[:cut]) == MALFORMED
