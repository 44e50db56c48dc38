"""Batch compression: LZ4 raw blocks (checked against hand-built blocks) and zlib."""

from __future__ import annotations

import zlib

import lz4.block
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pulsar_bruce.batch.compression import CODECS, decompress
from pulsar_bruce.frame import pulsar_api_pb2 as pb

# LZ4 block format: sequences of [token][literal length ext][literals][offset u16 LE]
# [match length ext]; token high nibble = literal count, low nibble = match length - 4;
# the last sequence carries literals only (low nibble 0, no offset).

LITERAL_ONLY_BLOCK = bytes([0x50]) + b"hello"  # token: 5 literals, no match
LONG_LITERAL_BLOCK = bytes([0xF0, 0x05]) + b"abcdefghijklmnopqrst"  # 15 + 5 = 20 literals
MATCH_BLOCK = (
    bytes([0x48])  # token: 4 literals, match length 8 + 4 = 12
    + b"abcd"  # literals
    + bytes([0x04, 0x00])  # match offset 4 (little-endian): repeat "abcd" for 12 bytes
    + bytes([0x50])  # last sequence: 5 literals
    + b"hello"
)


def test_codec_table_names_the_wire_compression_types() -> None:
    assert CODECS["none"] == (pb.NONE, None)
    assert CODECS["lz4"][0] == pb.LZ4 == 1
    assert CODECS["zlib"][0] == pb.ZLIB == 2


def test_lz4_decompresses_a_hand_built_literal_only_block() -> None:
    assert decompress(pb.LZ4, LITERAL_ONLY_BLOCK, 5) == b"hello"


def test_lz4_decompresses_a_hand_built_block_with_a_long_literal_run() -> None:
    assert decompress(pb.LZ4, LONG_LITERAL_BLOCK, 20) == b"abcdefghijklmnopqrst"


def test_lz4_decompresses_a_hand_built_block_with_a_match() -> None:
    assert decompress(pb.LZ4, MATCH_BLOCK, 21) == b"abcd" * 4 + b"hello"


def test_lz4_compressor_emits_a_raw_block_without_size_header() -> None:
    compress = CODECS["lz4"][1]
    assert compress is not None
    # Too short to find a match: one literal-only sequence, exactly the hand-built block.
    assert compress(b"hello") == LITERAL_ONLY_BLOCK


def test_lz4_compressor_output_is_readable_by_the_lz4_library() -> None:
    compress = CODECS["lz4"][1]
    assert compress is not None
    data = b"the quick brown fox " * 100
    block = compress(data)
    assert len(block) < len(data)
    assert lz4.block.decompress(block, uncompressed_size=len(data)) == data


@settings(max_examples=200, deadline=None, derandomize=True)
@given(st.binary(max_size=4096))
def test_lz4_round_trip(data: bytes) -> None:
    compress = CODECS["lz4"][1]
    assert compress is not None
    assert decompress(pb.LZ4, compress(data), len(data)) == data


@settings(max_examples=200, deadline=None, derandomize=True)
@given(st.binary(max_size=4096))
def test_zlib_round_trip(data: bytes) -> None:
    compress = CODECS["zlib"][1]
    assert compress is not None
    block = compress(data)
    assert zlib.decompress(block) == data
    assert decompress(pb.ZLIB, block, len(data)) == data


def test_zlib_output_is_a_zlib_stream() -> None:
    compress = CODECS["zlib"][1]
    assert compress is not None
    block = compress(b"abc")
    assert block[0] == 0x78  # deflate, 32 KiB window
    assert int.from_bytes(block[:2], "big") % 31 == 0  # zlib header check bits


def test_none_returns_the_data_unchanged() -> None:
    assert decompress(pb.NONE, b"raw", 3) == b"raw"


def test_lz4_uncompressed_size_is_the_exact_output_size() -> None:
    assert len(decompress(pb.LZ4, MATCH_BLOCK, 21)) == 21


def test_lz4_uncompressed_size_too_small_fails() -> None:
    with pytest.raises(lz4.block.LZ4BlockError):
        decompress(pb.LZ4, MATCH_BLOCK, 20)


def test_zlib_ignores_uncompressed_size() -> None:
    block = zlib.compress(b"x" * 50)
    assert decompress(pb.ZLIB, block, 0) == b"x" * 50


def test_unsupported_compression_raises_value_error() -> None:
    with pytest.raises(ValueError, match="unsupported compression"):
        decompress(pb.ZSTD, b"", 0)
