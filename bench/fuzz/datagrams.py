"""Valid Bruce datagrams, mutants of them, and what the daemon must make of each.

:class:`Generator` yields valid datagrams to one base topic interleaved with
mutants (bit flips, truncations, extensions, random header fields, random bytes,
empty and oversized datagrams).  Every datagram is classified with the daemon's
own parser (:func:`pulsar_bruce.parse.datagram.parse_datagram`) and topic check
(:func:`pulsar_bruce.parse.topic.normalize_topic`), in the daemon's order (size
limit first), so a mutant that happens to be a valid message is expected to be
acked like any other.  Mutants that would create a topic other than the base
one are kept only while there are fewer than ``max_extra_topics`` such topics,
and only with plain names (``[A-Za-z0-9._-]``, default tenant and namespace) so
that the broker accepts them; beyond that the mutation is drawn again.

Deterministic for a given seed.
"""

from __future__ import annotations

import random
import re
import struct
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from pulsar_bruce import reasons
from pulsar_bruce.parse.datagram import parse_datagram
from pulsar_bruce.parse.topic import normalize_topic

OK = "ok"  # the expected outcome of a valid message: acked

_HEADER = struct.Struct(">ihh")
_PLAIN_NAME = re.compile(r"persistent://public/default/[A-Za-z0-9._-]{1,64}")


@dataclass(frozen=True)
class Datagram:
    data: bytes
    kind: str  # "valid" or the mutation that made it
    outcome: str  # OK, or the discard reason the daemon must count
    topic: str | None = None  # full topic name when OK
    value: bytes | None = None  # the payload when OK


def classify(data: bytes, max_message_bytes: int) -> tuple[str, str | None, bytes | None]:
    """``(outcome, topic, value)`` for one datagram, as the daemon decides it."""
    if len(data) > max_message_bytes:
        return reasons.TOO_LARGE, None, None
    parsed = parse_datagram(data)
    if isinstance(parsed, str):
        return parsed, None, None
    topic_bytes, _, _, _, value_offset, _ = parsed
    name = normalize_topic(topic_bytes)
    if name is None:
        return reasons.BAD_TOPIC, None, None
    return OK, name, data[value_offset:]


def encode(
    topic: bytes,
    value: bytes,
    key: bytes = b"",
    timestamp: int = 0,
    partition_key: int | None = None,
) -> bytes:
    """A valid AnyPartition (or, with ``partition_key``, PartitionKey) datagram."""
    if partition_key is None:
        body = struct.pack(">hh", 0, len(topic)) + topic
        api_key = 256
    else:
        body = struct.pack(">hIh", 0, partition_key, len(topic)) + topic
        api_key = 257
    body += struct.pack(">qi", timestamp, len(key)) + key + struct.pack(">i", len(value)) + value
    return _HEADER.pack(8 + len(body), api_key, 0) + body


@dataclass(frozen=True)
class _Layout:
    """Offsets of the fixed fields of a valid datagram (for field mutations)."""

    fields: dict[str, tuple[int, str]]  # name -> (offset, struct format)

    @classmethod
    def of(cls, data: bytes) -> _Layout:
        _, api_key, _ = _HEADER.unpack_from(data)
        fields = {
            "Size": (0, ">i"),
            "ApiKey": (4, ">h"),
            "ApiVersion": (6, ">h"),
            "Flags": (8, ">h"),
        }
        offset = 10
        if api_key == 257:
            fields["PartitionKey"] = (10, ">I")
            offset = 14
        fields["TopicSize"] = (offset, ">h")
        (topic_size,) = struct.unpack_from(">h", data, offset)
        offset += 2 + topic_size
        fields["Timestamp"] = (offset, ">q")
        fields["KeySize"] = (offset + 8, ">i")
        (key_size,) = struct.unpack_from(">i", data, offset + 8)
        fields["ValueSize"] = (offset + 12 + key_size, ">i")
        return cls(fields)


_LIMITS = {">h": (-(2**15), 2**15 - 1), ">i": (-(2**31), 2**31 - 1), ">q": (-(2**63), 2**63 - 1)}
_LIMITS[">I"] = (0, 2**32 - 1)


class Generator:
    """Valid datagrams and mutants, 1:1 interleaved; see the module docstring."""

    def __init__(
        self,
        seed: int,
        base_topic: str,
        max_message_bytes: int,
        max_extra_topics: int = 10,
    ):
        self.rng = random.Random(seed)
        self.base_topic = base_topic
        self.base_name = normalize_topic(base_topic.encode())
        self.max_message_bytes = max_message_bytes
        self.max_extra_topics = max_extra_topics
        self.extra_topics: set[str] = set()
        self.redrawn = 0
        self._serial = 0
        self.mutations: list[tuple[str, Callable[[bytes], bytes]]] = [
            ("bit_flip", self._bit_flip),
            ("byte_set", self._byte_set),
            ("truncate", self._truncate),
            ("extend", self._extend),
            ("extend_size", self._extend_size),
            ("extend_value", self._extend_value),
            ("field", self._field),
            ("random_bytes", self._random_bytes),
            ("random_header", self._random_header),
            ("empty", lambda _: b""),
            ("oversized", self._oversized),
        ]

    # -- valid messages ---------------------------------------------------------------------

    def valid(self, marker: bytes = b"V") -> bytes:
        """A valid message to the base topic; its value starts with a unique marker."""
        rng = self.rng
        self._serial += 1
        value = marker + b"%09d|" % self._serial + rng.randbytes(rng.choice((0, 1, 20, 200)))
        key_kind = rng.random()
        if key_kind < 0.4:
            key = b""
        elif key_kind < 0.8:
            key = b"k%d" % rng.randrange(1000)
        else:
            key = rng.randbytes(rng.randrange(1, 24))  # often not UTF-8: base64 on the wire
        timestamp = rng.choice((0, 1_700_000_000_000 + rng.randrange(10**9), rng.randrange(2**63)))
        partition_key = rng.randrange(2**32) if rng.random() < 0.5 else None
        return encode(self.base_topic.encode(), value, key, timestamp, partition_key)

    # -- the stream -----------------------------------------------------------------------------

    def __call__(self, count: int) -> Iterator[Datagram]:
        """``count`` mutants, each preceded by a valid message."""
        for _ in range(count):
            data = self.valid()
            outcome, topic, value = classify(data, self.max_message_bytes)
            assert outcome == OK, outcome
            yield Datagram(data, "valid", OK, topic, value)
            yield self.mutant()

    def mutant(self) -> Datagram:
        rng = self.rng
        while True:
            kind, mutate = rng.choice(self.mutations)
            data = mutate(self.valid(b"M"))
            outcome, topic, value = classify(data, self.max_message_bytes)
            if outcome != OK or topic == self.base_name:
                return Datagram(data, kind, outcome, topic, value)
            assert topic is not None
            if topic in self.extra_topics:
                return Datagram(data, kind, outcome, topic, value)
            if len(self.extra_topics) < self.max_extra_topics and _PLAIN_NAME.fullmatch(topic):
                self.extra_topics.add(topic)
                return Datagram(data, kind, outcome, topic, value)
            self.redrawn += 1

    # -- mutations --------------------------------------------------------------------------------

    def _bit_flip(self, data: bytes) -> bytes:
        out = bytearray(data)
        for _ in range(self.rng.randint(1, 8)):
            out[self.rng.randrange(len(out))] ^= 1 << self.rng.randrange(8)
        return bytes(out)

    def _byte_set(self, data: bytes) -> bytes:
        out = bytearray(data)
        for _ in range(self.rng.randint(1, 4)):
            out[self.rng.randrange(len(out))] = self.rng.randrange(256)
        return bytes(out)

    def _truncate(self, data: bytes) -> bytes:
        return data[: self.rng.randrange(len(data))]

    def _extend(self, data: bytes) -> bytes:
        """Bytes after the value, Size unchanged."""
        return data + self.rng.randbytes(self.rng.randint(1, 64))

    def _extend_size(self, data: bytes) -> bytes:
        """Bytes after the value, Size grown to match: left-over bytes."""
        out = data + self.rng.randbytes(self.rng.randint(1, 64))
        return struct.pack(">i", len(out)) + out[4:]

    def _extend_value(self, data: bytes) -> bytes:
        """A longer value with ValueSize and Size both fixed: still a valid message."""
        extra = self.rng.randbytes(self.rng.randint(1, 64))
        offset, fmt = _Layout.of(data).fields["ValueSize"]
        (size,) = struct.unpack_from(fmt, data, offset)
        out = bytearray(data + extra)
        struct.pack_into(fmt, out, offset, size + len(extra))
        struct.pack_into(">i", out, 0, len(out))
        return bytes(out)

    def _field(self, data: bytes) -> bytes:
        """One header field set to an edge value, off by a little, or anything."""
        rng = self.rng
        fields = _Layout.of(data).fields
        name = rng.choice(sorted(fields))
        offset, fmt = fields[name]
        (current,) = struct.unpack_from(fmt, data, offset)
        low, high = _LIMITS[fmt]
        candidates = [low, high, 0, 1, -1, current + 1, current - 1, len(data)]
        candidates.append(rng.randint(low, high))
        if name == "ApiKey":
            candidates += [256, 257, 255, 258]
        new = min(max(rng.choice(candidates), low), high)
        out = bytearray(data)
        struct.pack_into(fmt, out, offset, new)
        return bytes(out)

    def _random_bytes(self, data: bytes) -> bytes:
        return self.rng.randbytes(self.rng.randrange(0, 600))

    def _random_header(self, data: bytes) -> bytes:
        """A plausible header (Size right, ApiKey 256/257, version 0) over random bytes."""
        rng = self.rng
        body = rng.randbytes(rng.randrange(0, 300))
        return _HEADER.pack(8 + len(body), rng.choice((256, 257)), 0) + body

    def _oversized(self, data: bytes) -> bytes:
        """Over --max-message-bytes: a well-formed message, or random bytes."""
        rng = self.rng
        size = self.max_message_bytes + rng.choice((1, 2, rng.randint(3, 8192)))
        if rng.random() < 0.5:
            return rng.randbytes(size)
        topic = self.base_topic.encode()
        return encode(topic, rng.randbytes(size - 28 - len(topic)))  # 28: the fixed fields
