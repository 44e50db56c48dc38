"""Batch compression: LZ4 raw blocks (checked against hand-built blocks) and zlib."""

from __future__ import annotations

import subprocess
import sys
import zlib

import lz4.block
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pulsar_bruce.batch.compression import CODECS, codec, decompress
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
        decompress(99, b"", 0)


# -- zstd and snappy: the formats Pulsar's clients read ------------------------------------

SAMPLE = b"pulsar-bruce " * 200 + bytes(range(256))


def test_zstd_is_a_zstandard_frame_with_the_content_size() -> None:
    """The Java client's CompressionCodecZstd uses Zstd.compress (a frame, level 3)."""
    wire, compress = CODECS["zstd"]
    assert wire == pb.ZSTD == 3 and compress is not None
    frame = compress(SAMPLE)
    assert frame[:4] == b"\x28\xb5\x2f\xfd"  # the Zstandard frame magic
    assert len(frame) < len(SAMPLE)
    assert decompress(pb.ZSTD, frame, len(SAMPLE)) == SAMPLE


def test_snappy_is_a_raw_block() -> None:
    """The Java client's CompressionCodecSnappy uses Snappy.compress: a raw block whose
    first bytes are the uncompressed length as a varint (no stream identifier)."""
    wire, compress = CODECS["snappy"]
    assert wire == pb.SNAPPY == 4 and compress is not None
    block = compress(SAMPLE)
    assert block[:2] == bytes([len(SAMPLE) & 0x7F | 0x80, len(SAMPLE) >> 7])
    assert not block.startswith(b"\xff\x06\x00\x00sNaPpY")
    assert decompress(pb.SNAPPY, block, len(SAMPLE)) == SAMPLE


@pytest.mark.parametrize(("name", "level"), [("zstd", 1), ("zstd", 19), ("zlib", 1), ("zlib", 9)])
def test_levels_change_the_output_not_the_content(name: str, level: int) -> None:
    wire, compress = codec(name, level)
    assert compress is not None
    assert decompress(wire, compress(SAMPLE), len(SAMPLE)) == SAMPLE
    default = CODECS[name][1]
    assert default is not None and codec(name, 0)[1] is default


def test_a_level_outside_the_codecs_range_is_refused() -> None:
    with pytest.raises(ValueError, match=r"zlib levels are 1..9, got 12"):
        codec("zlib", 12)
    assert codec("lz4", 12) == CODECS["lz4"]  # codecs without levels ignore it


def test_the_daemon_loads_cramjam_only_for_zstd_or_snappy() -> None:
    """1.5 MB of idle RSS that LZ4 (the default) users do not pay."""
    probe = (
        "import sys, pulsar_bruce.server, pulsar_bruce.cli\n"
        "from pulsar_bruce.batch.compression import codec\n"
        "codec('lz4')[1](b'x' * 100)\n"
        "assert 'cramjam' not in sys.modules\n"
        "codec('zstd')[1](b'x' * 100)\n"
        "assert 'cramjam' in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", probe], check=True)
