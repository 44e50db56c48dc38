"""Batch payload compression, once per batch, in the formats Pulsar's clients use.

- LZ4: the raw LZ4 *block* (no frame header);
- ZLIB: a zlib stream (the Java client's ``Deflater``);
- ZSTD: a Zstandard frame (the Java client's ``Zstd.compress``, level 3 by default);
- SNAPPY: a raw Snappy block (the Java client's ``Snappy.compress``), not the framed format.

The receiver learns the size to decompress into from ``MessageMetadata.uncompressed_size``.
Zstandard and Snappy come from ``cramjam`` (one maintained wheel for both, on every
platform CPython runs on; python-snappy itself is now a wrapper around it), imported
on first use: it adds 1.5 MB to the daemon's RSS, which most (LZ4) users need not pay.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable
from functools import partial

import lz4.block

from pulsar_bruce.frame import pulsar_api_pb2 as pb
from pulsar_bruce.model.vocabulary import DEFAULT_LEVELS, Compression, check_level

Compressor = Callable[[bytes], bytes]


def _lz4(data: bytes) -> bytes:
    return bytes(lz4.block.compress(data, store_size=False))


def _zlib(data: bytes, level: int = DEFAULT_LEVELS[Compression.ZLIB]) -> bytes:
    return zlib.compress(data, level)


def _zstd(data: bytes, level: int = DEFAULT_LEVELS[Compression.ZSTD]) -> bytes:
    import cramjam

    return bytes(cramjam.zstd.compress(data, level=level))


def _snappy(data: bytes) -> bytes:
    import cramjam

    return bytes(cramjam.snappy.compress_raw(data))


#: Option value -> (CompressionType on the wire, compressor at the default level or None).
CODECS: dict[str, tuple[int, Compressor | None]] = {
    Compression.NONE: (pb.NONE, None),
    Compression.LZ4: (pb.LZ4, _lz4),
    Compression.ZLIB: (pb.ZLIB, _zlib),
    Compression.ZSTD: (pb.ZSTD, _zstd),
    Compression.SNAPPY: (pb.SNAPPY, _snappy),
}


def codec(name: str, level: int = 0) -> tuple[int, Compressor | None]:
    """The wire type and compressor for ``name`` at ``level`` (0: the codec's default;
    codecs without levels ignore it)."""
    wire, compressor = CODECS[name]
    check_level(name, level)
    if level and name in DEFAULT_LEVELS:
        compressor = partial(_zlib if name == Compression.ZLIB else _zstd, level=level)
    return wire, compressor


def decompress(compression: int, data: bytes, uncompressed_size: int) -> bytes:
    """The inverse, for tests and tools."""
    if compression == pb.NONE:
        return data
    if compression == pb.LZ4:
        return bytes(lz4.block.decompress(data, uncompressed_size=uncompressed_size))
    if compression == pb.ZLIB:
        return zlib.decompress(data)
    import cramjam

    if compression == pb.ZSTD:
        return bytes(cramjam.zstd.decompress(data, output_len=uncompressed_size))
    if compression == pb.SNAPPY:
        return bytes(cramjam.snappy.decompress_raw(data))
    raise ValueError(f"unsupported compression {compression}")


#: A compressed batch is sent only when it is at least 1/8 smaller than the raw one.
MIN_SAVING_DIVISOR = 8
#: At most this many batches in a row go uncompressed untried (one try in 65 costs ~1.5 %).
MAX_COMPRESS_SKIPS = 64


class CompressionTries:
    """Whether a producer's next batch is worth compressing.

    Compression is per message metadata on the wire, so a batch may go uncompressed on a
    compressed topic (librdkafka sends a Kafka batch uncompressed when the codec grows it;
    ZFS stores a block uncompressed unless it saves an eighth).  Payloads that do not
    shrink (encrypted, already compressed, random) usually keep not shrinking: after such
    a batch the next ``skips`` batches are sent without trying, and that number doubles up
    to :data:`MAX_COMPRESS_SKIPS` while the tries keep failing; one that shrinks resets it.
    """

    __slots__ = ("skips", "skips_left", "uncompressed")

    def __init__(self) -> None:
        #: Batches to send uncompressed without trying, after ones the codec did not shrink.
        self.skips_left = 0
        #: How many the next batch that does not shrink makes us skip (doubling to a bound).
        self.skips = 1
        #: Batches sent uncompressed although the topic has a codec (for the metrics).
        self.uncompressed = 0

    def compress(
        self, raw: bytes, compressor: Compressor | None, wire_type: int
    ) -> tuple[bytes, int]:
        """``raw`` compressed and ``wire_type``; ``raw`` itself and type NONE (0) when there
        is no codec, when this batch is skipped, or when the codec saves under an eighth."""
        if compressor is None:
            return raw, 0
        if self.skips_left:
            self.skips_left -= 1
            self.uncompressed += 1
            return raw, 0
        compressed = compressor(raw)
        if len(compressed) <= len(raw) - len(raw) // MIN_SAVING_DIVISOR:
            self.skips = 1
            return compressed, wire_type
        self.skips_left = self.skips
        self.skips = min(2 * self.skips, MAX_COMPRESS_SKIPS)
        self.uncompressed += 1
        return raw, 0
