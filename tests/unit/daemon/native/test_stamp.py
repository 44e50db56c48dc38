"""stamp_sequence_ids in C against its pure-Python twin: the same bytes, read back with the
generated protobuf.  (The compiled key-based batching is compared end to end by the intake
trace of test_differential.py, whose keyed topic takes Message records with properties.)"""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pulsar_bruce.batch.batch_builder import _PyEntries, encode_key_field
from pulsar_bruce.batch.entries import stamp_sequence_ids_py
from pulsar_bruce.frame import pulsar_api_pb2 as pb
from pulsar_bruce.parse.datagram import _property_field

from tests.support.extension import load_extension, needs_extension

native = load_extension()
pytestmark = needs_extension

keys = st.binary(max_size=40) | st.sampled_from([b"", b"\xff\xfe", "ключ".encode()])
properties = st.lists(st.tuples(st.binary(max_size=8), st.binary(max_size=8)), max_size=3).map(
    lambda pairs: b"".join(_property_field(name, value) for name, value in pairs)
)
messages = st.tuples(
    properties,
    keys.map(encode_key_field),
    st.sampled_from([0, 1, 1_700_000_000_000, 2**63 - 1]),
    st.binary(max_size=300) | st.sampled_from([b"x" * 5000]),
)


def _entries(batch: list[tuple[bytes, bytes, int, bytes]]) -> bytes:
    entries = _PyEntries()
    for fields, key_field, timestamp, value in batch:
        entries.append(fields + key_field, timestamp, value, 0, 0)
    return entries.take()


def _stamp(stamp: object, payload: bytes, first_id: int, count: int) -> object:
    try:
        return stamp(payload, first_id, count)  # type: ignore[operator]
    except ValueError:
        return ValueError


def _read(raw: bytes) -> list[pb.SingleMessageMetadata]:
    out, offset = [], 0
    while offset < len(raw):
        (size,) = struct.unpack_from(">I", raw, offset)
        encoded = raw[offset + 4 : offset + 4 + size]
        metadata = pb.SingleMessageMetadata.FromString(encoded)
        assert metadata.ByteSize() == len(encoded)  # every field once
        out.append(metadata)
        offset += 4 + size + metadata.payload_size
    assert offset == len(raw)
    return out


@settings(max_examples=300, deadline=None, derandomize=True)
@given(
    st.lists(messages, max_size=20),
    st.integers(0, 2**63 - 1) | st.sampled_from([0, 127, 128, 2**14 - 1, 2**63 - 21]),
    st.none() | st.integers(0, 2**63 - 21),
)
def test_both_stampers_give_the_same_bytes(
    batch: list[tuple[bytes, bytes, int, bytes]], first_id: int, earlier: int | None
) -> None:
    """Fresh entries, or entries stamped before (taken back from a frame)."""
    assert native is not None
    payload = _entries(batch)
    count = len(batch)
    first_id = min(first_id, 2**63 - max(count, 1))
    if earlier is not None:
        payload = stamp_sequence_ids_py(payload, earlier, count)
    compiled = native.stamp_sequence_ids(payload, first_id, count)
    assert compiled == stamp_sequence_ids_py(payload, first_id, count)
    read = _read(compiled)
    assert [m.sequence_id for m in read] == [first_id + n for n in range(count)]
    unstamped = _read(_entries(batch))
    for stamped, plain in zip(read, unstamped, strict=True):
        stamped.ClearField("sequence_id")
        assert stamped == plain


@settings(max_examples=400, deadline=None, derandomize=True)
@given(
    st.lists(messages, min_size=1, max_size=5),
    st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 255)), max_size=3),
    st.integers(0, 3),
    st.integers(-1, 7),
)
def test_damaged_entries_are_refused_alike_and_never_read_past_the_end(
    batch: list[tuple[bytes, bytes, int, bytes]],
    flips: list[tuple[int, int]],
    cut: int,
    count_delta: int,
) -> None:
    """Bytes changed, the end cut off, a wrong count: a ValueError or the same bytes."""
    assert native is not None
    data = bytearray(_entries(batch))
    for at, byte in flips:
        data[at % len(data)] = byte
    payload = bytes(data[: len(data) - cut])
    count = len(batch) + count_delta
    compiled = _stamp(native.stamp_sequence_ids, payload, 5, count)
    python = _stamp(stamp_sequence_ids_py, payload, 5, count)
    if compiled is not ValueError and python is not ValueError:
        assert compiled == python


@pytest.mark.parametrize(
    "args",
    [(b"", -1, 0), (b"", 2**63, 0), (b"", 2**63 - 1, 0), (b"", 2**64, 0), (b"", 0, -1)],
)
def test_both_stampers_check_the_id_range_alike(args: tuple[bytes, int, int]) -> None:
    assert native is not None
    assert _stamp(native.stamp_sequence_ids, *args) == _stamp(stamp_sequence_ids_py, *args)
