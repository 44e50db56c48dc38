"""The Java client's key hashes, so keyed messages land where Java producers put them.

With ``--key-routing``, an AnyPartition message with a key goes to partition
``hash(key) % N``, the way pulsar-client's ``RoundRobinPartitionMessageRouterImpl``
routes a keyed message (``signSafeMod(hash.makeHash(msg.getKey()), N)``; both
hashes below are already masked with ``Integer.MAX_VALUE``, so the modulo is a
plain one).  The hashed value is treated as a PartitionKey from then on.

What is hashed is the key the Java client would see: the key text itself, or,
for a key that is not valid UTF-8, the base64 text we send as the message key
(``partition_key_b64_encoded``), as ``msg.getKey()`` returns it for byte keys.

- ``java_string``: ``JavaStringHash`` -- ``String.hashCode()`` (``h = 31*h + c``
  over the UTF-16 code units, wrapping at 32 bits) ``& 0x7fffffff``.
- ``murmur3``: ``Murmur3_32Hash`` -- MurmurHash3 x86_32, seed 0, over the UTF-8
  bytes of the key, ``& 0x7fffffff``.

Hashes are cached per key (keys repeat), so a steady stream of the same keys
costs one dict lookup per message.
"""

from __future__ import annotations

import base64
import struct
from collections.abc import Callable

from pulsar_bruce.model.vocabulary import KeyRouting

_MASK32 = 0xFFFFFFFF
_INT_MAX = 0x7FFFFFFF
#: Distinct keys remembered per hash before the cache starts over.
CACHE_LIMIT = 65536


def java_string_hash(text: str) -> int:
    """``text.hashCode() & Integer.MAX_VALUE`` as Java computes it."""
    if text.isascii():
        units: bytes | tuple[int, ...] = text.encode("ascii")
    else:
        encoded = text.encode("utf-16-be")
        units = struct.unpack(f">{len(encoded) // 2}H", encoded)
    h = 0
    for unit in units:
        h = (31 * h + unit) & _MASK32
    return h & _INT_MAX


def _rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (32 - r))) & _MASK32


def murmur3_32(data: bytes, seed: int = 0) -> int:
    """MurmurHash3 x86_32 of ``data`` (unmasked, as an unsigned 32-bit int)."""
    c1, c2 = 0xCC9E2D51, 0x1B873593
    h = seed
    blocks = len(data) // 4
    for (k,) in struct.iter_unpack("<I", data[: blocks * 4]):
        k = _rotl((k * c1) & _MASK32, 15) * c2 & _MASK32
        h = _rotl(h ^ k, 13)
        h = (h * 5 + 0xE6546B64) & _MASK32
    k = int.from_bytes(data[blocks * 4 :], "little")
    if k:
        h ^= _rotl((k * c1) & _MASK32, 15) * c2 & _MASK32
    h ^= len(data)
    h ^= h >> 16
    h = (h * 0x85EBCA6B) & _MASK32
    h ^= h >> 13
    h = (h * 0xC2B2AE35) & _MASK32
    h ^= h >> 16
    return h


def murmur3_hash(text: str) -> int:
    """The Java client's ``Murmur3_32Hash.makeHash(String)``."""
    return murmur3_32(text.encode("utf-8")) & _INT_MAX


def key_text(key: bytes) -> str:
    """The key as the Java client sees it: the text, or the base64 of a non-UTF-8 key."""
    try:
        return key.decode("utf-8")
    except UnicodeDecodeError:
        return base64.b64encode(key).decode("ascii")


class KeyHasher:
    """Bruce key bytes -> the Java client's hash of that key, cached."""

    __slots__ = ("_cache", "_hash", "routing")

    def __init__(self, routing: KeyRouting, hash_text: Callable[[str], int]):
        self.routing = routing
        self._hash = hash_text
        self._cache: dict[bytes, int] = {}

    def __call__(self, key: bytes) -> int:
        cache = self._cache
        value = cache.get(key)
        if value is None:
            value = self._hash(key_text(key))
            if len(cache) >= CACHE_LIMIT:
                cache.clear()
            cache[key] = value
        return value


#: One shared hasher per routing (the hash does not depend on the topic); none for ``none``.
HASHERS: dict[KeyRouting, KeyHasher | None] = {
    KeyRouting.NONE: None,
    KeyRouting.JAVA_STRING: KeyHasher(KeyRouting.JAVA_STRING, java_string_hash),
    KeyRouting.MURMUR3: KeyHasher(KeyRouting.MURMUR3, murmur3_hash),
}
