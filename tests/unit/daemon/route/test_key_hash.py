"""The Java client's key hashes (``route/key_hash.py``), so keyed messages land where Java
producers put them.

Where the test vectors come from:

- ``java_string``: pulsar-client ``JavaStringHash.makeHash`` is
  ``s.hashCode() & Integer.MAX_VALUE`` (java.lang.String.hashCode: ``h = 31*h + c``
  over UTF-16 code units, 32-bit wrap).  Values of ``String.hashCode`` are
  well known: ``"hello"`` 99162322, ``"Aa"`` and ``"BB"`` both 2112,
  ``"polygenelubricants"`` Integer.MIN_VALUE (so 0 once masked), ``"€"`` (U+20AC)
  8364, and U+1F600 (the surrogates D83D DE00) ``31*0xD83D + 0xDE00`` = 1772899.
- ``murmur3``: pulsar-client ``Murmur3_32Hash.makeHash(String)`` is pulsar-common's
  ``Murmur3_32Hash`` (MurmurHash3 x86_32, seed 0) of the UTF-8 bytes,
  ``& Integer.MAX_VALUE``; the unmasked values below are MurmurHash3 x86_32's
  published reference vectors (SMHasher), computed independently of our code.

The official Python client (pulsar-client 3.x, on the C++ client) cannot
cross-check these: it exposes neither its hash functions nor a hashing-scheme
option, and its producers hash keys with BoostHash.
"""

from __future__ import annotations

import base64

import pytest
from pulsar_bruce.model.vocabulary import KeyRouting
from pulsar_bruce.route import key_hash
from pulsar_bruce.route.key_hash import (
    HASHERS,
    KeyHasher,
    java_string_hash,
    key_text,
    murmur3_32,
    murmur3_hash,
)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", 0),
        ("hello", 99162322),
        ("Aa", 2112),
        ("BB", 2112),
        ("polygenelubricants", 0),  # hashCode() is Integer.MIN_VALUE; masked to 0
        ("\u20ac", 8364),  # one UTF-16 unit, three UTF-8 bytes
        ("\U0001f600", 1772899),  # two UTF-16 units (a surrogate pair), four UTF-8 bytes
    ],
)
def test_java_string_hash_is_string_hash_code_masked(text: str, expected: int) -> None:
    assert java_string_hash(text) == expected


@pytest.mark.parametrize(
    ("data", "seed", "expected"),
    [
        (b"", 0, 0x00000000),
        (b"", 1, 0x514E28B7),
        (b"test", 0, 0xBA6BD213),
        (b"hello", 0, 0x248BFA47),
        (b"Hello, world!", 0, 0xC0363E43),
        (b"The quick brown fox jumps over the lazy dog", 0, 0x2E4FF723),
        (b"aaaa", 0x9747B28C, 0x5A97808A),
    ],
)
def test_murmur3_32_matches_the_reference_vectors(data: bytes, seed: int, expected: int) -> None:
    assert murmur3_32(data, seed) == expected


def test_murmur3_hash_masks_with_integer_max_value() -> None:
    # 0xC0363E43 has the top bit set: the Java client's makeHash clears it.
    assert murmur3_hash("Hello, world!") == 0xC0363E43 & 0x7FFFFFFF == 0x40363E43
    assert murmur3_hash("hello") == 0x248BFA47
    # UTF-8 bytes, not UTF-16 units: "€" is E2 82 AC.
    assert murmur3_hash("\u20ac") == murmur3_32("\u20ac".encode()) & 0x7FFFFFFF


def test_a_key_that_is_not_utf8_is_hashed_as_its_base64_text() -> None:
    """The Java client's ``getKey()`` of a byte key is its base64 text, which we send."""
    raw = b"\xff\xfe\x00k"
    assert key_text(raw) == base64.b64encode(raw).decode()
    assert HASHERS[KeyRouting.JAVA_STRING] is not None
    assert HASHERS[KeyRouting.JAVA_STRING](raw) == java_string_hash(key_text(raw))
    assert key_text("clé".encode()) == "clé"


def test_the_hasher_cache_is_bounded_and_keeps_answers(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(key_hash, "CACHE_LIMIT", 4)
    hasher = KeyHasher(KeyRouting.JAVA_STRING, java_string_hash)
    keys = [f"user-{i}".encode() for i in range(10)]
    for key in keys + keys:
        assert hasher(key) == java_string_hash(key.decode())
    assert len(hasher._cache) <= 4
