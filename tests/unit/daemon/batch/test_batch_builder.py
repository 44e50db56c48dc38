"""Batch payloads: hand-encoded SingleMessageMetadata checked with the generated protobuf."""

from __future__ import annotations

import base64
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pulsar_bruce.batch.batch_builder import (
    BatchBuilder,
    encode_key_field,
    entry_offsets,
    split_batch,
)
from pulsar_bruce.batch.compression import CODECS, decompress
from pulsar_bruce.frame import pulsar_api_pb2 as pb
from pulsar_bruce.model.batch import SealedBatch
from pulsar_bruce.model.ledger import memory_charge


def entries(payload: bytes) -> list[tuple[pb.SingleMessageMetadata, bytes]]:
    """Split a batch payload into (SingleMessageMetadata, value) with the generated protobuf."""
    out = []
    offset = 0
    while offset < len(payload):
        (size,) = struct.unpack_from(">I", payload, offset)
        offset += 4
        metadata = pb.SingleMessageMetadata()
        metadata.ParseFromString(payload[offset : offset + size])
        assert metadata.IsInitialized()  # payload_size is required
        offset += size
        value = payload[offset : offset + metadata.payload_size]
        assert len(value) == metadata.payload_size
        offset += metadata.payload_size
        out.append((metadata, value))
    assert offset == len(payload)
    return out


def add(builder: BatchBuilder, key: bytes, timestamp: int, value: bytes) -> int:
    """Append like the forwarder does: value at the end of a larger datagram buffer."""
    datagram = b"HEADER" + value
    key_field = encode_key_field(key)
    return builder.append(
        key_field, timestamp, datagram, 6, memory_charge(key_field, len(datagram) - 6)
    )


# -- key field --------------------------------------------------------------------------------


def test_empty_key_encodes_nothing() -> None:
    assert encode_key_field(b"") == b""


def test_ascii_key_field_golden() -> None:
    # partition_key (2, length-delimited) = "abc"
    assert encode_key_field(b"abc") == bytes.fromhex("1203") + b"abc"


def test_utf8_key_is_sent_as_is() -> None:
    key = "ключ".encode()
    assert encode_key_field(key) == b"\x12" + bytes([len(key)]) + key


def test_non_utf8_key_field_golden() -> None:
    # base64(ff fe fd) = "//79"; then partition_key_b64_encoded (6, bool) = true
    assert encode_key_field(b"\xff\xfe\xfd") == bytes.fromhex("1204") + b"//79" + bytes.fromhex(
        "3001"
    )


def test_long_key_uses_a_multi_byte_length() -> None:
    key = b"k" * 200
    assert encode_key_field(key) == b"\x12\xc8\x01" + key


# -- entries decoded with protobuf ------------------------------------------------------------


def test_entries_decode_with_generated_protobuf() -> None:
    builder = BatchBuilder()
    add(builder, b"key-1", 1700000000000, b"first")
    add(builder, b"", 0, b"second")
    add(builder, b"key-3", 1700000000001, b"")
    decoded = entries(bytes(builder.buffer))
    assert [value for _, value in decoded] == [b"first", b"second", b""]

    first, second, third = (metadata for metadata, _ in decoded)
    assert first.partition_key == "key-1"
    assert first.payload_size == 5
    assert first.event_time == 1700000000000
    assert not first.partition_key_b64_encoded

    assert not second.HasField("partition_key")
    assert not second.HasField("event_time")
    assert second.payload_size == 6

    assert third.partition_key == "key-3"
    assert third.event_time == 1700000000001
    assert third.payload_size == 0


def test_non_utf8_key_is_base64_with_flag() -> None:
    builder = BatchBuilder()
    key = b"\x00\xff\x80binary"
    add(builder, key, 5, b"v")
    ((metadata, value),) = entries(bytes(builder.buffer))
    assert metadata.partition_key_b64_encoded
    assert base64.b64decode(metadata.partition_key) == key
    assert value == b"v"


def test_negative_timestamp_means_no_event_time() -> None:
    builder = BatchBuilder()
    add(builder, b"", -1, b"v")
    ((metadata, _),) = entries(bytes(builder.buffer))
    assert not metadata.HasField("event_time")


def test_event_time_changes_between_messages() -> None:
    builder = BatchBuilder()
    for timestamp in (10, 10, 20, 0, 20, 10):
        add(builder, b"", timestamp, b"v")
    decoded = [metadata.event_time for metadata, _ in entries(bytes(builder.buffer))]
    assert decoded == [10, 10, 20, 0, 20, 10]


def test_append_returns_the_bytes_added_and_counts() -> None:
    builder = BatchBuilder()
    added = add(builder, b"", 0, b"abc")
    # [u32 size = 2][18 03 payload_size = 3][abc]
    assert bytes(builder.buffer) == bytes.fromhex("00000002 1803") + b"abc"
    assert added == 9
    assert add(builder, b"", 0, b"") == 6
    assert len(builder.buffer) == 15
    assert builder.count == 2


def test_large_values_get_a_multi_byte_payload_size() -> None:
    builder = BatchBuilder()
    value = b"v" * 20000  # beyond the precomputed payload_size table
    added = add(builder, b"", 0, value)
    # payload_size 20000 = 0xa0 0x9c 0x01 as a varint
    assert bytes(builder.buffer[:8]) == bytes.fromhex("00000004 18a09c01")
    assert added == 8 + 20000
    assert [v for _, v in entries(bytes(builder.buffer))] == [value]


def test_append_copies_only_the_value_part_of_the_datagram() -> None:
    builder = BatchBuilder()
    builder.append(b"", 0, b"0123456789", 7, memory_charge(b"", 3))
    ((metadata, value),) = entries(bytes(builder.buffer))
    assert value == b"789"
    assert metadata.payload_size == 3


@settings(max_examples=200, deadline=None, derandomize=True)
@given(
    st.lists(
        st.tuples(st.binary(max_size=40), st.integers(-5, 2**63 - 1), st.binary(max_size=100)),
        min_size=1,
        max_size=20,
    )
)
def test_any_messages_decode_back(messages: list[tuple[bytes, int, bytes]]) -> None:
    builder = BatchBuilder()
    for key, timestamp, value in messages:
        key_field = encode_key_field(key)
        before = len(builder.buffer)
        added = builder.append(key_field, timestamp, b"xx" + value, 2, 0)
        assert added == len(builder.buffer) - before
        assert added <= memory_charge(key_field, len(value))
    decoded = entries(bytes(builder.buffer))
    assert len(decoded) == len(messages) == builder.count
    for (key, timestamp, value), (metadata, got) in zip(messages, decoded, strict=True):
        assert got == value
        assert metadata.payload_size == len(value)
        assert metadata.event_time == (timestamp if timestamp > 0 else 0)
        if not key:
            assert not metadata.HasField("partition_key")
        elif metadata.partition_key_b64_encoded:
            assert base64.b64decode(metadata.partition_key) == key
        else:
            assert metadata.partition_key.encode() == key


def test_entry_size_is_an_upper_bound_for_the_largest_fields() -> None:
    builder = BatchBuilder()
    key_field = encode_key_field(b"k" * 300)
    value = b"v" * 70000  # 3-byte payload_size varint
    size = builder.append(key_field, 2**63 - 1, value, 0, 0)  # 9-byte event time varint
    assert size <= memory_charge(key_field, len(value))


# -- sealing --------------------------------------------------------------------------------


def test_seal_keeps_the_uncompressed_payload_until_first_send() -> None:
    builder = BatchBuilder()
    add(builder, b"k", 1, b"v1")
    add(builder, b"k", 1, b"v2")
    raw = bytes(builder.buffer)
    charged = builder.charged
    sealed = builder.seal()
    assert isinstance(sealed, SealedBatch)
    assert sealed.count == 2
    assert sealed.payload == raw
    assert sealed.buffer_bytes == charged == 2 * memory_charge(encode_key_field(b"k"), 2)
    assert builder.charged == 0
    assert sealed.sequence_id == -1


def test_seal_resets_the_builder() -> None:
    builder = BatchBuilder()
    add(builder, b"", 0, b"v")
    builder.seal()
    assert builder.count == 0
    assert len(builder.buffer) == 0
    add(builder, b"", 0, b"w")
    assert [v for _, v in entries(bytes(builder.buffer))] == [b"w"]


@pytest.mark.parametrize("codec", ["lz4", "zlib"])
def test_compressors_round_trip_a_batch_payload(codec: str) -> None:
    compression, compressor = CODECS[codec]
    assert compressor is not None
    builder = BatchBuilder()
    for i in range(50):
        add(builder, f"key-{i % 3}".encode(), 1700000000000 + i, b"value " * 20)
    raw = builder.seal().payload
    compressed = compressor(raw)
    assert len(compressed) < len(raw)
    restored = decompress(compression, compressed, len(raw))
    assert restored == raw
    assert len(entries(restored)) == 50


def test_split_batch_halves_by_message_and_keeps_the_bytes() -> None:
    builder = BatchBuilder()
    for i in range(5):
        add(builder, f"k{i}".encode(), 1700000000000 + i, b"v" * (i + 1) * 100)
    whole = builder.seal()
    first, second = split_batch(whole)
    assert (first.count, second.count) == (2, 3)
    assert first.payload + second.payload == whole.payload
    assert first.buffer_bytes + second.buffer_bytes == whole.buffer_bytes
    assert [v for _, v in entries(first.payload)] == [b"v" * 100, b"v" * 200]
    assert entry_offsets(whole.payload)[2] == len(first.payload)


def test_highest_sequence_id_covers_the_batch() -> None:
    sealed = SealedBatch(count=5, payload=b"", buffer_bytes=0)
    sealed.sequence_id = 10
    assert sealed.highest_sequence_id == 14
