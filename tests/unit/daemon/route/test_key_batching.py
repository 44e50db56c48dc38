"""Key-based batching (``--key-based-batching``): one key per batch, carried in its metadata.

Modelled on the Java client's ``BatchMessageKeyBasedContainer``: a batch holds
messages of one key, and its ``MessageMetadata`` gets that key as
``partition_key`` (with ``partition_key_b64_encoded`` for a byte key), which a
Key_Shared dispatcher (pulsar-broker ``PersistentStickyKeyDispatcherMultipleConsumers``,
``peekStickyKey``) uses to pick the consumer of the whole entry.  Keyless
messages batch together, with no key on the batch.
"""

from __future__ import annotations

import base64

import pytest
from pulsar_bruce.batch.batch_builder import (
    BatchBuilder,
    decode_key_field,
    encode_key_field,
    single_key_of,
    split_batch,
)
from pulsar_bruce.config import load_config
from pulsar_bruce.frame import pulsar_api_pb2 as pb
from pulsar_bruce.frame.codec import FrameDecoder
from pulsar_bruce.model.batch import SealedBatch
from pulsar_bruce.producer.partition_producer import BatchPolicy, PartitionProducer
from pulsar_bruce.route.appender import Appender
from pulsar_bruce.route.router import Topic
from pulsar_bruce.route.topic_settings import TopicConfigurator

T = "persistent://public/default/t"


class Events:
    def __init__(self) -> None:
        self.sealed = 0

    def batch_opened(self, producer: PartitionProducer) -> None:
        pass

    def batch_sealed(self, producer: PartitionProducer) -> None:
        self.sealed += 1


def producer_with(key_based: bool, **policy: int) -> PartitionProducer:
    producer = PartitionProducer(T, 0, 1, BatchPolicy(key_based=key_based, **policy))
    producer.ready = True
    return producer


def append(appender: Appender, producer: PartitionProducer, key: bytes, value: bytes) -> None:
    field = encode_key_field(key)
    appender.append(producer, field, 0, value, 0, len(field) + len(value) + 21, None)


def keys_in(batch: SealedBatch) -> list[str]:
    raw, keys, offset = batch.payload, [], 0
    while offset < len(raw):
        size = int.from_bytes(raw[offset : offset + 4], "big")
        metadata = pb.SingleMessageMetadata.FromString(raw[offset + 4 : offset + 4 + size])
        keys.append(metadata.partition_key)
        offset += 4 + size + metadata.payload_size
    return keys


def sealed_all(producer: PartitionProducer) -> list[SealedBatch]:
    producer.seal()
    return list(producer.pending)


def test_interleaved_keys_make_one_batch_per_run_of_one_key() -> None:
    producer = producer_with(True)
    appender = Appender(Events())
    for key in (b"a", b"a", b"b", b"a", b"", b"", b"c"):
        append(appender, producer, key, b"v")
    batches = sealed_all(producer)
    assert [keys_in(batch) for batch in batches] == [["a", "a"], ["b"], ["a"], ["", ""], ["c"]]
    assert [batch.partition_key for batch in batches] == ["a", "b", "a", None, "c"]


def test_without_the_option_keys_share_batches_and_batches_carry_no_key() -> None:
    producer = producer_with(False)
    appender = Appender(Events())
    for key in (b"a", b"b", b"a"):
        append(appender, producer, key, b"v")
    (batch,) = sealed_all(producer)
    assert keys_in(batch) == ["a", "b", "a"] and batch.partition_key is None


def test_size_limits_still_seal_a_batch_of_one_key() -> None:
    producer = producer_with(True, max_messages=2)
    appender = Appender(Events())
    for _ in range(5):
        append(appender, producer, b"k", b"v")
    batches = sealed_all(producer)
    assert [batch.count for batch in batches] == [2, 2, 1]
    assert {batch.partition_key for batch in batches} == {"k"}


def test_the_batch_key_reaches_the_send_frames_metadata() -> None:
    producer = producer_with(True)
    appender = Appender(Events())
    raw_key = b"\xff\x00bytes"
    for key in (b"user-1", raw_key, b""):
        append(appender, producer, key, b"v")
    producer.seal()
    producer.on_registered("p", -1)
    out = producer.frames_to_send(1)
    metadatas = [FrameDecoder().feed(frame)[0].metadata for frame in out.frames]
    assert [m.partition_key if m and m.HasField("partition_key") else None for m in metadatas] == [
        "user-1",
        base64.b64encode(raw_key).decode(),
        None,
    ]
    assert [bool(m and m.partition_key_b64_encoded) for m in metadatas] == [False, True, False]


def test_a_split_batch_keeps_its_key_in_both_halves() -> None:
    producer = producer_with(True)
    appender = Appender(Events())
    for _ in range(4):
        append(appender, producer, b"k", b"v")
    (batch,) = sealed_all(producer)
    first, rest = split_batch(batch)
    assert (first.partition_key, rest.partition_key) == ("k", "k")


@pytest.mark.parametrize("key", [b"k", "clé".encode(), b"\xff" * 200, b"x" * 300])
def test_decode_key_field_inverts_encode_key_field(key: bytes) -> None:
    text, b64 = decode_key_field(encode_key_field(key))
    try:
        assert (text, b64) == (key.decode(), False)
    except UnicodeDecodeError:
        assert (text, b64) == (base64.b64encode(key).decode(), True)
    assert decode_key_field(b"") == (None, False)


def test_single_key_of_entries() -> None:
    builder = BatchBuilder()
    for key in (b"a", b"a"):
        builder.append(encode_key_field(key), 0, b"v", 0, 30)
    assert single_key_of(builder.seal().payload) == ("a", False)
    for key in (b"a", b"b"):
        builder.append(encode_key_field(key), 0, b"v", 0, 30)
    assert single_key_of(builder.seal().payload) is None
    builder.append(b"", 0, b"v", 0, 30)
    assert single_key_of(builder.seal().payload) == (None, False)


def test_a_batch_back_from_the_spool_gets_its_key_on_a_key_based_topic() -> None:
    builder = BatchBuilder()
    builder.append(encode_key_field(b"\xfe"), 0, b"v", 0, 30)
    entries = builder.seal().payload
    topic = Topic(T)
    topic.producers.append(producer_with(True))
    spooled = SealedBatch(count=1, payload=entries, buffer_bytes=30)
    Appender(Events()).queue_sealed(topic, 0, spooled)
    (batch,) = topic.producers[0].pending
    assert batch.partition_key == base64.b64encode(b"\xfe").decode()
    assert batch.partition_key_b64


def test_the_option_and_its_per_topic_override_reach_the_batch_policy(tmp_path) -> None:
    path = tmp_path / "bruce.toml"
    path.write_text('[topics."orders"]\nkey_based_batching = true\n')
    config = load_config({}, {}, str(path))
    assert config.key_based_batching is False
    assert load_config({"key_based_batching": True}, {}).key_based_batching is True
    configurator = TopicConfigurator(config)
    assert configurator.policy(Topic("persistent://public/default/orders")).key_based
    assert not configurator.policy(Topic(T)).key_based
