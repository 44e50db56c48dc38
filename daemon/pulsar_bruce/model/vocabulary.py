"""Option words that more than one part of the daemon must agree on, defined once.

The configuration accepts exactly these values; the batch and spool code act on
them.  ``StrEnum`` members are strings, so they compare, hash and print as the
words themselves.
"""

from __future__ import annotations

from enum import StrEnum


class Compression(StrEnum):
    """Batch compression (``--compression``); ``batch.compression.CODECS`` has one codec each."""

    NONE = "none"
    LZ4 = "lz4"
    ZLIB = "zlib"
    ZSTD = "zstd"
    SNAPPY = "snappy"


#: The codecs with levels: the level ``--compression-level 0`` means, and the levels accepted.
DEFAULT_LEVELS = {Compression.ZLIB: 6, Compression.ZSTD: 3}
LEVEL_RANGES = {Compression.ZLIB: range(1, 10), Compression.ZSTD: range(1, 23)}


def check_level(compression: str, level: int) -> None:
    """ValueError unless ``level`` is 0 or one ``compression`` accepts (levelless codecs
    ignore it)."""
    allowed = LEVEL_RANGES.get(Compression(compression))
    if level and allowed is not None and level not in allowed:
        raise ValueError(
            f"{compression} levels are {allowed.start}..{allowed.stop - 1}, got {level}"
        )


class KeyRouting(StrEnum):
    """How an AnyPartition message with a key picks its partition (``--key-routing``)."""

    NONE = "none"  # round-robin, like Bruce
    JAVA_STRING = "java_string"  # the Java client's default JavaStringHash
    MURMUR3 = "murmur3"  # the Java client's Murmur3_32Hash


class FsyncPolicy(StrEnum):
    """When the spool makes appended records durable (``--spool-fsync``)."""

    ALWAYS = "always"  # every append
    INTERVAL = "interval"  # about once a second
    NEVER = "never"  # left to the kernel
