"""Key routing (``--key-routing``): keyed AnyPartition messages land where Java producers put them.

The partition: pulsar-client ``RoundRobinPartitionMessageRouterImpl.choosePartition`` returns
``signSafeMod(hash.makeHash(msg.getKey()), numPartitions)`` for a keyed message; the hash is
non-negative, so it is ``hash % N`` (the hashes themselves: test_key_hash.py).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from pulsar_bruce.batch.batch_builder import entry_offsets
from pulsar_bruce.config import ConfigError, load_config
from pulsar_bruce.frame import pulsar_api_pb2 as pb
from pulsar_bruce.model.ledger import Ledger
from pulsar_bruce.model.vocabulary import KeyRouting
from pulsar_bruce.producer.partition_producer import BatchPolicy, PartitionProducer
from pulsar_bruce.route.appender import Appender
from pulsar_bruce.route.intake import Intake
from pulsar_bruce.route.key_hash import HASHERS, java_string_hash, murmur3_hash
from pulsar_bruce.route.outcomes import Outcomes
from pulsar_bruce.route.registry import TopicRegistry
from pulsar_bruce.route.topic import Topic
from pulsar_bruce.route.topic_settings import TopicConfigurator
from pulsar_bruce.spool.policy import SpoolPolicy
from to_pulsar.encoding import encode_any_partition, encode_partition_key

T = "persistent://public/default/t"


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


class KeyRouted:
    """A configurator that gives each new topic the key routing ``routing``."""

    def __init__(self, routing: KeyRouting):
        self.routing = routing

    def apply(self, topic: Topic) -> None:
        topic.key_hash = HASHERS[self.routing]


def intake_with(partitions: int, routing: KeyRouting) -> tuple[Intake, Topic]:
    ledger = Ledger()
    registry = TopicRegistry(KeyRouted(routing))
    intake = Intake(
        registry,
        Appender(),
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
        topic.attach([producer], partitioned=partitions > 0)
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
    topic.producers[home].ready = topic.producers[home].available = False
    intake.admit(encode_any_partition("t", b"v", key=b"hello"))
    assert topic.producers[(home + 1) % 4].batch.count == 1
    topic.producers[home].ready = topic.producers[home].available = True
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
