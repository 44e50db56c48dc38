"""Protobuf wire primitives for fields the daemon encodes by hand (per message, no objects)."""

from __future__ import annotations

_ONE_BYTE_VARINTS = tuple(bytes((n,)) for n in range(128))


def varint(n: int) -> bytes:
    """Protobuf base-128 varint of a non-negative int."""
    if n < 0x80:
        return _ONE_BYTE_VARINTS[n]
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def length_delimited(tag: bytes, data: bytes) -> bytes:
    """A length-delimited field: ``tag``, the varint length, the bytes."""
    return tag + varint(len(data)) + data
