"""Batch payload compression, once per batch, as Pulsar clients do it.

LZ4 is the raw LZ4 *block* format (no frame header); the receiver learns the
size to decompress into from ``MessageMetadata.uncompressed_size``.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable

import lz4.block

from pulsar_bruce.frame import pulsar_api_pb2 as pb
from pulsar_bruce.model.vocabulary import Compression

Compressor = Callable[[bytes], bytes]


def _lz4(data: bytes) -> bytes:
    return bytes(lz4.block.compress(data, store_size=False))


def _zlib(data: bytes) -> bytes:
    return zlib.compress(data)


#: Option value -> (CompressionType on the wire, compressor or None).
CODECS: dict[str, tuple[int, Compressor | None]] = {
    Compression.NONE: (pb.NONE, None),
    Compression.LZ4: (pb.LZ4, _lz4),
    Compression.ZLIB: (pb.ZLIB, _zlib),
}


def decompress(compression: int, data: bytes, uncompressed_size: int) -> bytes:
    """The inverse, for tests and tools."""
    if compression == pb.NONE:
        return data
    if compression == pb.LZ4:
        return bytes(lz4.block.decompress(data, uncompressed_size=uncompressed_size))
    if compression == pb.ZLIB:
        return zlib.decompress(data)
    raise ValueError(f"unsupported compression {compression}")
