"""Wire-format tests for to_pulsar.encoding: golden bytes, edge cases, round trip."""

from __future__ import annotations

import struct

import pytest
import to_pulsar
from hypothesis import given
from hypothesis import strategies as st
from to_pulsar import (
    API_KEY_ANY_PARTITION,
    API_KEY_PARTITION_KEY,
    API_VERSION,
    InvalidMessageError,
    ToPulsarError,
    encode_any_partition,
    encode_partition_key,
)
from to_pulsar.topics import full_topic_name


def decode(datagram: bytes) -> dict[str, object]:
    """Independent reference decoder, written from the spec with plain struct calls."""
    size, api_key, api_version = struct.unpack_from(">ihh", datagram, 0)
    assert size == len(datagram)
    assert api_version == 0
    pos = 8
    (flags,) = struct.unpack_from(">h", datagram, pos)
    pos += 2
    out: dict[str, object] = {"api_key": api_key, "flags": flags}
    if api_key == 257:
        (out["partition_key"],) = struct.unpack_from(">I", datagram, pos)
        pos += 4
    else:
        assert api_key == 256
    (topic_size,) = struct.unpack_from(">h", datagram, pos)
    pos += 2
    out["topic"] = datagram[pos : pos + topic_size]
    pos += topic_size
    out["timestamp"], key_size = struct.unpack_from(">qi", datagram, pos)
    pos += 12
    out["key"] = datagram[pos : pos + key_size]
    pos += key_size
    (value_size,) = struct.unpack_from(">i", datagram, pos)
    pos += 4
    out["value"] = datagram[pos : pos + value_size]
    pos += value_size
    assert pos == len(datagram), "trailing bytes"
    return out


def test_constants() -> None:
    assert (API_KEY_ANY_PARTITION, API_KEY_PARTITION_KEY, API_VERSION) == (256, 257, 0)


def test_any_partition_golden_bytes() -> None:
    expected = bytes.fromhex(
        "00000021"  # Size = 33: 8 header + 2 flags + 2+2 topic + 8 ts + 4+2 key + 4+1 value
        "0100"  # ApiKey 256 (AnyPartition)
        "0000"  # ApiVersion 0
        "0000"  # Flags 0
        "0002"  # TopicSize 2
        "7470"  # Topic "tp"
        "0102030405060708"  # Timestamp 0x0102030405060708, big-endian
        "00000002"  # KeySize 2
        "6b79"  # Key "ky"
        "00000001"  # ValueSize 1
        "76"  # Value "v"
    )
    got = encode_any_partition("tp", b"v", b"ky", 0x0102030405060708)
    assert got == expected


def test_partition_key_golden_bytes() -> None:
    expected = bytes.fromhex(
        "00000027"  # Size = 39: 8 header + 2 flags + 4 pkey + 2+1 topic + 8 ts + 4+0 key + 4+6
        "0101"  # ApiKey 257 (PartitionKey)
        "0000"  # ApiVersion 0
        "0000"  # Flags 0
        "deadbeef"  # PartitionKey 0xDEADBEEF, unsigned
        "0001"  # TopicSize 1
        "74"  # Topic "t"
        "0000018bcfe56800"  # Timestamp 1700000000000 ms
        "00000000"  # KeySize 0 (no key)
        "00000006"  # ValueSize 6
        "68656c6c6f21"  # Value "hello!"
    )
    got = encode_partition_key(0xDEADBEEF, "t", b"hello!", timestamp_ms=1_700_000_000_000)
    assert got == expected


def test_defaults_are_empty_key_and_no_timestamp() -> None:
    msg = decode(encode_any_partition("t", b"x"))
    assert msg["key"] == b""
    assert msg["timestamp"] == 0


def test_empty_key_and_empty_value() -> None:
    datagram = encode_any_partition("t", b"", b"", 5)
    assert len(datagram) == 28 + 1
    assert decode(datagram) == {
        "api_key": 256,
        "flags": 0,
        "topic": b"t",
        "timestamp": 5,
        "key": b"",
        "value": b"",
    }


def test_non_utf8_key_and_value_bytes_pass_through() -> None:
    key = b"\xff\xfe\x00\x80"
    value = bytes(range(256))
    msg = decode(encode_partition_key(1, "t", value, key))
    assert msg["key"] == key
    assert msg["value"] == value


def test_str_payloads_are_utf8() -> None:
    msg = decode(encode_any_partition("tøpic", "välue", "kéy"))
    assert msg["topic"] == "tøpic".encode()
    assert msg["value"] == "välue".encode()
    assert msg["key"] == "kéy".encode()


def test_bytes_topic_and_bytearray_payloads() -> None:
    msg = decode(encode_any_partition(b"public/default/t", bytearray(b"v"), memoryview(b"k")))
    assert (msg["topic"], msg["key"], msg["value"]) == (b"public/default/t", b"k", b"v")


@pytest.mark.parametrize(
    "topic", ["t", "public/default/t", "persistent://public/default/t", "non-persistent://a/b/c"]
)
def test_topic_forms_are_passed_verbatim(topic: str) -> None:
    assert decode(encode_any_partition(topic, b"v"))["topic"] == topic.encode()


def test_partition_key_two_complement() -> None:
    assert encode_partition_key(0xFFFFFFFF, "t", b"v") == encode_partition_key(-1, "t", b"v")
    assert encode_partition_key(-(2**31), "t", b"v") == encode_partition_key(2**31, "t", b"v")
    assert decode(encode_partition_key(-1, "t", b"v"))["partition_key"] == 0xFFFFFFFF
    assert decode(encode_partition_key(0, "t", b"v"))["partition_key"] == 0


@pytest.mark.parametrize("partition_key", [2**32, -(2**31) - 1, 10**20])
def test_partition_key_out_of_range(partition_key: int) -> None:
    with pytest.raises(InvalidMessageError, match="partition key"):
        encode_partition_key(partition_key, "t", b"v")


@pytest.mark.parametrize("topic", ["", b"", "x" * 32768, "é" * 16384])
def test_invalid_topic_length(topic: str | bytes) -> None:
    with pytest.raises(InvalidMessageError, match="topic"):
        encode_any_partition(topic, b"v")
    with pytest.raises(InvalidMessageError, match="topic"):
        encode_partition_key(1, topic, b"v")


def test_max_topic_length_is_accepted() -> None:
    assert decode(encode_any_partition("x" * 32767, b"v"))["topic"] == b"x" * 32767


def test_topic_not_utf8_encodable() -> None:
    with pytest.raises(InvalidMessageError, match="topic"):
        encode_any_partition("bad\udcff", b"v")


@pytest.mark.parametrize("timestamp_ms", [2**63, -(2**63) - 1])
def test_timestamp_out_of_int64(timestamp_ms: int) -> None:
    with pytest.raises(InvalidMessageError, match="timestamp"):
        encode_any_partition("t", b"v", timestamp_ms=timestamp_ms)


def test_invalid_message_error_is_value_error() -> None:
    assert issubclass(InvalidMessageError, ValueError)
    assert issubclass(InvalidMessageError, ToPulsarError)


def test_wrong_payload_type() -> None:
    with pytest.raises(TypeError):
        encode_any_partition("t", 42)  # type: ignore[arg-type]


def test_public_api() -> None:
    assert set(to_pulsar.__all__) >= {
        "Sender",
        "encode_any_partition",
        "encode_partition_key",
        "ToPulsarError",
        "DaemonUnavailableError",
        "MessageTooLargeError",
        "SendTimeoutError",
        "InvalidMessageError",
    }
    for name in to_pulsar.__all__:
        assert hasattr(to_pulsar, name)


def _valid_topic(raw: bytes) -> bool:
    try:
        full_topic_name(raw)
    except InvalidMessageError:
        return False
    return True


# Names the daemon accepts (the encoders refuse others: test_to_pulsar_topics.py), as str
# or bytes, with or without tenant/namespace: <= 100 characters, <= 400 bytes of UTF-8.
_local = st.text(st.characters(codec="utf-8", exclude_characters="/"), min_size=1, max_size=80)
_names = st.one_of(_local, st.builds("{}/{}/{}".format, st.just("a-b"), st.just("n.s"), _local))
topics = st.one_of(_names, _names.map(str.encode)).filter(
    lambda topic: _valid_topic(topic.encode() if isinstance(topic, str) else topic)
)


@given(
    topic=topics,
    value=st.binary(max_size=2000),
    key=st.binary(max_size=200),
    timestamp=st.integers(-(2**63), 2**63 - 1),
    partition_key=st.one_of(st.none(), st.integers(-(2**31), 2**32 - 1)),
)
def test_round_trip(
    topic: str | bytes, value: bytes, key: bytes, timestamp: int, partition_key: int | None
) -> None:
    if partition_key is None:
        datagram = encode_any_partition(topic, value, key, timestamp)
    else:
        datagram = encode_partition_key(partition_key, topic, value, key, timestamp)
    msg = decode(datagram)
    raw_topic = topic.encode() if isinstance(topic, str) else topic
    assert msg["flags"] == 0
    assert msg["topic"] == raw_topic
    assert msg["key"] == key
    assert msg["value"] == value
    assert msg["timestamp"] == timestamp
    if partition_key is None:
        assert msg["api_key"] == 256
        assert len(datagram) == 28 + len(raw_topic) + len(key) + len(value)
    else:
        assert msg["api_key"] == 257
        assert msg["partition_key"] == partition_key & 0xFFFFFFFF
        assert len(datagram) == 32 + len(raw_topic) + len(key) + len(value)
