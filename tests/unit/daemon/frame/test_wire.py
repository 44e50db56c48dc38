"""Protobuf wire primitives (``frame/wire.py``): varints, checked against the generated protobuf."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pulsar_bruce.frame import pulsar_api_pb2 as pb
from pulsar_bruce.frame.wire import varint


@pytest.mark.parametrize(
    ("n", "encoded"),
    [
        (0, "00"),
        (1, "01"),
        (127, "7f"),
        (128, "8001"),
        (300, "ac02"),
        (16383, "ff7f"),
        (16384, "808001"),
        (2**32 - 1, "ffffffff0f"),
        (2**63 - 1, "ffffffffffffffff7f"),
        (2**64 - 1, "ffffffffffffffffff01"),
    ],
)
def test_varint_golden(n: int, encoded: str) -> None:
    assert varint(n) == bytes.fromhex(encoded)


@settings(max_examples=1000, deadline=None, derandomize=True)
@given(st.integers(0, 2**64 - 1))
def test_varint_matches_protobuf(n: int) -> None:
    # BrokerEntryMetadata.index is field 2, uint64: tag 0x10 then the varint.
    assert b"\x10" + varint(n) == pb.BrokerEntryMetadata(index=n).SerializeToString()
