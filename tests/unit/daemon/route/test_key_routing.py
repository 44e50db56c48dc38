"""Key routing (``--key-routing``): keyed AnyPartition messages land where Java producers put them.

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
- The partition: pulsar-client ``RoundRobinPartitionMessageRouterImpl.choosePartition``
  returns ``signSafeMod(hash.makeHash(msg.getKey()), numPartitions)`` for a
  keyed message; the hash is non-negative, so it is ``hash % N``.

The official Python client (pulsar-client 3.x, on the C++ client) cannot
cross-check these: it exposes neither its hash functions nor a hashing-scheme
option, and its producers hash keys with BoostHash.
"""

from __future__ import annotations

import base64
from collections.abc import Callable
from pathlib import Path

import pytest
from pulsar_bruce.batch.batch_builder import entry_offsets
from pulsar_bruce.config import ConfigError, load_config
from pulsar_bruce.frame import pulsar_api_pb2 as pb
from pulsar_bruce.model.ledger import Ledger
from pulsar_bruce.model.vocabulary import KeyRouting
from pulsar_bruce.producer.partition_producer import BatchPolicy, PartitionProducer
from pulsar_bruce.route import key_hash
from pulsar_bruce.route.appender import Appender
from pulsar_bruce.route.intake import Intake
from pulsar_bruce.route.key_hash import (
    HASHERS,
    KeyHasher,
    java_string_hash,
    key_text,
    murmur3_32,
    murmur3_hash,
)
from pulsar_bruce.route.outcomes import Outcomes
from pulsar_bruce.route.router import Topic
from pulsar_bruce.route.topic_settings import TopicConfigurator
from pulsar_bruce.route.topics import TopicRegistry
from pulsar_bruce.spool.policy import SpoolPolicy
from to_pulsar.encoding import encode_any_partition, encode_partition_key

T = "persistent://public/default/t"

# -- the hashes -----------------------------------------------------------------------------


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


# -- configuration --------------------------------------------------------------------------


def test_key_routing_option() -> None:
    assert load_config({}, {}).key_routing is KeyRouting.NONE
    config = load_config({"key_routing": "Java_String"}, {})
    assert config.key_routing is KeyRouting.JAVA_STRING
    with pytest.raises(ConfigError, match=r"^--key-routing: expected none, java_string or murmur3"):
        load_config({"key_routing": "crc32"}, {})


def test_the_configurator_gives_a_topic_its_hash(tmp_path: Path) -> None:
    path = tmp_path / "bruce.toml"
    path.write_text('key_routing = "murmur3"\n[topics."plain"]\nkey_routing = "none"\n')
    configurator = TopicConfigurator(load_config({}, {}, str(path)))
    routed, plain = Topic(T), Topic("persistent://public/default/plain")
    configurator.apply(routed)
    configurator.apply(plain)
    assert routed.key_hash is HASHERS[KeyRouting.MURMUR3]
    assert plain.key_hash is None


# -- routing through the intake ---------------------------------------------------------------


class Events:
    def batch_opened(self, producer: PartitionProducer) -> None:
        pass

    def batch_sealed(self, producer: PartitionProducer) -> None:
        pass


def intake_with(partitions: int, routing: KeyRouting) -> tuple[Intake, Topic]:
    ledger = Ledger()
    registry = TopicRegistry(lambda topic: setattr(topic, "key_hash", HASHERS[routing]))
    intake = Intake(
        registry,
        Appender(Events()),
        ledger,
        SpoolPolicy(ledger, 1 << 24, None, unreachable_after_s=10),
        Outcomes(ledger),
        max_message_bytes=1 << 20,
    )
    topic = registry.add(b"t")
    assert topic is not None
    for index in range(partitions):
        producer = PartitionProducer(f"{T}-partition-{index}", index, index + 1, BatchPolicy())
        producer.ready = True
        topic.producers.append(producer)
    topic.partitioned = partitions > 0
    return intake, topic


def partitions_of(topic: Topic) -> dict[str, set[int]]:
    """Which partitions hold each key (read back from the open batches)."""
    found: dict[str, set[int]] = {}
    for index, producer in enumerate(topic.producers):
        raw = bytes(producer.batch.buffer)
        for offset in entry_offsets(raw):
            size = int.from_bytes(raw[offset : offset + 4], "big")
            metadata = pb.SingleMessageMetadata.FromString(raw[offset + 4 : offset + 4 + size])
            found.setdefault(metadata.partition_key, set()).add(index)
    return found


KEYS = [f"user-{i}" for i in range(40)] + ["hello", "polygenelubricants", "\u20ac", "clé"]


@pytest.mark.parametrize(
    ("routing", "hash_text"),
    [(KeyRouting.JAVA_STRING, java_string_hash), (KeyRouting.MURMUR3, murmur3_hash)],
)
def test_keyed_any_partition_messages_go_to_hash_mod_n(
    routing: KeyRouting, hash_text: Callable[[str], int]
) -> None:
    intake, topic = intake_with(7, routing)
    for round_ in range(3):
        for key in KEYS:
            assert intake.admit(encode_any_partition("t", f"v{round_}".encode(), key=key.encode()))
    placed = partitions_of(topic)
    assert placed == {key: {hash_text(key) % 7} for key in KEYS}


def test_without_key_routing_keyed_messages_are_round_robin() -> None:
    intake, topic = intake_with(4, KeyRouting.NONE)
    for _ in range(4):
        intake.admit(encode_any_partition("t", b"v", key=b"hello"))
        topic.producers[topic.round_robin].seal()  # a batch boundary: switch partitions
    assert all(len(producer.pending) == 1 for producer in topic.producers)


def test_keyless_messages_stay_round_robin_and_partition_keys_stay_modulo() -> None:
    intake, topic = intake_with(4, KeyRouting.JAVA_STRING)
    intake.admit(encode_partition_key(6, "t", b"v", key=b"hello"))
    assert topic.producers[6 % 4].batch.count == 1  # PartitionKey wins over the key's hash
    for _ in range(4):
        intake.admit(encode_any_partition("t", b"v"))
        topic.producers[topic.round_robin].seal()
    assert all(producer.pending for producer in topic.producers)


def test_a_hashed_key_fails_over_like_a_partition_key_and_comes_back() -> None:
    intake, topic = intake_with(4, KeyRouting.JAVA_STRING)
    home = java_string_hash("hello") % 4
    topic.producers[home].ready = False
    intake.admit(encode_any_partition("t", b"v", key=b"hello"))
    assert topic.producers[(home + 1) % 4].batch.count == 1
    topic.producers[home].ready = True
    intake.admit(encode_any_partition("t", b"v", key=b"hello"))
    assert topic.producers[home].batch.count == 1


def test_messages_waiting_for_the_partition_count_keep_their_hashed_key() -> None:
    intake, topic = intake_with(0, KeyRouting.MURMUR3)
    intake.admit(encode_any_partition("t", b"v", key=b"hello"))
    (waiting,) = topic.unrouted
    assert waiting.partition_key == murmur3_hash("hello")


def test_replayed_datagrams_are_routed_by_their_key_too() -> None:
    intake, topic = intake_with(5, KeyRouting.JAVA_STRING)
    intake.replay_datagram(encode_any_partition("t", b"v", key=b"user-7"), previous_run=True)
    assert partitions_of(topic) == {"user-7": {java_string_hash("user-7") % 5}}
