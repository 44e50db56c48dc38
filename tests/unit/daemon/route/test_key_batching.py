"""Key-based batching (``--key-based-batching``): one open batch per key; every batch
carries its first message's key in its metadata.

Modelled on the Java client's ``BatchMessageKeyBasedContainer``: the open batch
keeps one batch per key; the size limits apply to their totals, and all of them
are sealed together (full, or on the linger timer), each its own Send in the
order of its first message.  A batch's ``MessageMetadata`` gets its first
message's key as ``partition_key`` (with ``partition_key_b64_encoded`` for a
byte key), with or without the option, as the Java client's
``BatchMessageContainerImpl`` sets it; a Key_Shared dispatcher (pulsar-broker
``PersistentStickyKeyDispatcherMultipleConsumers``, ``peekStickyKey``) picks the
consumer of the whole entry by it.  Keyless messages batch together, with no key
on the batch.
"""

from __future__ import annotations

import base64

from pulsar_bruce.batch.batch_builder import BatchBuilder, encode_key_field, split_batch
from pulsar_bruce.batch.entries import key_part
from pulsar_bruce.config import load_config
from pulsar_bruce.frame import pulsar_api_pb2 as pb
from pulsar_bruce.frame.codec import FrameDecoder
from pulsar_bruce.model.batch import SealedBatch
from pulsar_bruce.model.confirmation import Confirmation
from pulsar_bruce.model.ledger import Ledger
from pulsar_bruce.native import compiled
from pulsar_bruce.producer.partition_producer import BatchPolicy, PartitionProducer
from pulsar_bruce.route.appender import Appender
from pulsar_bruce.route.intake import Intake
from pulsar_bruce.route.outcomes import Outcomes
from pulsar_bruce.route.registry import TopicRegistry
from pulsar_bruce.route.topic import Topic
from pulsar_bruce.route.topic_settings import TopicConfigurator
from pulsar_bruce.spool.policy import SpoolPolicy
from to_pulsar.encoding import encode_any_partition, encode_message_record

T = "persistent://public/default/t"


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


def frame_keys(producer: PartitionProducer) -> list[tuple[str | None, bool]]:
    """The key (and base64 flag) in the metadata of every pending batch's Send frame."""
    producer.on_registered("p", -1)
    found = []
    for frame in producer.frames_to_send(1).frames:
        metadata = FrameDecoder().feed(frame)[0].metadata
        assert metadata is not None
        key = metadata.partition_key if metadata.HasField("partition_key") else None
        found.append((key, metadata.partition_key_b64_encoded))
    return found


def test_interleaved_keys_make_one_batch_per_key() -> None:
    """A, B, A, B, ...: two full batches, not one batch per message."""
    producer = producer_with(True, max_messages=10)
    appender = Appender()
    for index in range(10):
        append(appender, producer, b"AB"[index % 2 :][:1], b"v")
    assert len(appender.take_batches()[1]) == 1  # the limit (10 messages in all) sealed both
    batches = list(producer.pending)
    assert [keys_in(batch) for batch in batches] == [["A"] * 5, ["B"] * 5]
    assert sum(batch.buffer_bytes for batch in batches) == 10 * (len(b"\x12\x01A") + 1 + 21)
    assert producer.batch.count == producer.batch.charged == 0
    assert frame_keys(producer) == [("A", False), ("B", False)]


def test_key_batches_are_sealed_together_in_the_order_of_their_first_messages() -> None:
    producer = producer_with(True)
    appender = Appender()
    for key in (b"a", b"a", b"b", b"a", b"", b"", b"c"):
        append(appender, producer, key, b"v")
    assert producer.batch.count == 7 and not producer.pending
    batches = sealed_all(producer)
    assert [keys_in(batch) for batch in batches] == [["a", "a", "a"], ["b"], ["", ""], ["c"]]
    assert [key for key, _ in frame_keys(producer)] == ["a", "b", None, "c"]


def test_keys_after_properties_batch_by_key_alone() -> None:
    """A Message record's properties come before its key in the key field: not part of it."""
    properties = bytes.fromhex("0a060a01701201") + b"1"  # {"p": "1"}
    for field in (encode_key_field(b"k"), properties + encode_key_field(b"k")):
        assert key_part(field) == encode_key_field(b"k")
    assert key_part(properties) == b""
    producer = producer_with(True)
    appender = Appender()
    for field in (properties + encode_key_field(b"k"), encode_key_field(b"k"), properties):
        appender.append(producer, field, 0, b"v", 0, len(field) + 22, None)
    assert [batch.count for batch in sealed_all(producer)] == [2, 1]


def test_without_the_option_keys_share_a_batch_that_carries_its_first_key() -> None:
    producer = producer_with(False)
    appender = Appender()
    for key in (b"a", b"b", b"a"):
        append(appender, producer, key, b"v")
    (batch,) = sealed_all(producer)
    assert keys_in(batch) == ["a", "b", "a"]
    assert frame_keys(producer) == [("a", False)]


def test_a_batch_whose_first_message_has_no_key_carries_none() -> None:
    producer = producer_with(False)
    appender = Appender()
    for key in (b"", b"b"):
        append(appender, producer, key, b"v")
    producer.seal()
    assert frame_keys(producer) == [(None, False)]


def test_size_limits_apply_to_all_keys_together() -> None:
    producer = producer_with(True, max_messages=3)
    appender = Appender()
    for key in (b"a", b"b", b"a", b"b", b"a"):
        append(appender, producer, key, b"v")
    assert len(appender.take_batches()[1]) == 1
    batches = sealed_all(producer)
    assert [keys_in(batch) for batch in batches] == [["a", "a"], ["b"], ["b"], ["a"]]


def test_a_message_over_the_byte_limit_seals_every_key_first() -> None:
    producer = producer_with(True, max_bytes=100)
    appender = Appender()
    append(appender, producer, b"a", b"v")
    append(appender, producer, b"b", b"v")
    append(appender, producer, b"a", b"x" * 60)  # 24 + 24 + 84 > 100
    assert [keys_in(batch) for batch in producer.pending] == [["a"], ["b"]]
    assert producer.batch.count == 1 and producer.batch.keys is not None


def test_size_limits_still_seal_a_batch_of_one_key() -> None:
    producer = producer_with(True, max_messages=2)
    appender = Appender()
    for _ in range(5):
        append(appender, producer, b"k", b"v")
    batches = sealed_all(producer)
    assert [batch.count for batch in batches] == [2, 2, 1]
    assert frame_keys(producer) == [("k", False)] * 3


def test_a_policy_change_applies_from_the_next_batch() -> None:
    """Turning the option on or off leaves the open batch as it is until it is sealed."""
    producer = producer_with(False)
    appender = Appender()
    append(appender, producer, b"a", b"v")
    producer.set_policy(BatchPolicy(key_based=True))
    append(appender, producer, b"b", b"v")
    assert producer.batch.keys is None and producer.batch.count == 2
    producer.seal()
    append(appender, producer, b"a", b"v")
    producer.set_policy(BatchPolicy(key_based=False))
    append(appender, producer, b"b", b"v")
    assert producer.batch.keys is not None and len(producer.batch.keys) == 2
    assert [keys_in(batch) for batch in sealed_all(producer)] == [["a", "b"], ["a"], ["b"]]


def test_key_batches_keep_their_confirmation_tags() -> None:
    producer = producer_with(True)
    appender = Appender()
    stream = Confirmation(lambda: None)
    for key, tag in ((b"a", None), (b"b", stream), (b"a", stream), (b"b", None)):
        field = encode_key_field(key)
        appender.append(producer, field, 0, b"v", 0, len(field) + 22, tag)
    first, second = sealed_all(producer)
    assert [(run.tag, run.count) for run in first.tags or ()] == [(None, 1), (stream, 1)]
    assert [(run.tag, run.count) for run in second.tags or ()] == [(stream, 1), (None, 1)]


def intake_with(producer: PartitionProducer) -> Intake:
    ledger = Ledger()
    registry = TopicRegistry()
    intake = Intake(
        registry, Appender(), ledger, SpoolPolicy(ledger, 1 << 20), Outcomes(ledger),
        max_message_bytes=1 << 16,
    )  # fmt: skip
    topic = registry.lookup(T.encode())
    assert topic is not None
    topic.attach([producer])
    return intake


def test_the_intake_batches_interleaved_keys_apart() -> None:
    """Through Intake.admit: the compiled admitter where it is built (same behaviour)."""
    producer = producer_with(True, max_messages=8)
    intake = intake_with(producer)
    for index in range(12):
        key = b"AB"[index % 2 :][:1]
        if index % 3:
            data = encode_any_partition(T, b"v", key)
        else:
            data = encode_message_record(T, b"v", key, properties={"n": str(index)})
        assert intake.admit(data)
    if compiled is not None:
        assert intake.admit.__self__.admitted_here == 12  # type: ignore[attr-defined]
    assert [keys_in(batch) for batch in producer.pending] == [["A"] * 4, ["B"] * 4]
    assert producer.batch.count == 4 and producer.batch.keys is not None
    assert list(producer.batch.keys) == [encode_key_field(b"A"), encode_key_field(b"B")]


def test_the_batch_key_reaches_the_send_frames_metadata() -> None:
    producer = producer_with(True)
    appender = Appender()
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


def test_each_half_of_a_split_batch_carries_its_own_first_key() -> None:
    producer = producer_with(False)
    appender = Appender()
    for key in (b"k1", b"k1", b"k2", b"k2"):
        append(appender, producer, key, b"v")
    (batch,) = sealed_all(producer)
    first, rest = split_batch(batch)
    assert (keys_in(first), keys_in(rest)) == (["k1", "k1"], ["k2", "k2"])
    producer.pending.clear()
    producer.pending.extend((first, rest))
    assert frame_keys(producer) == [("k1", False), ("k2", False)]


def test_a_batch_back_from_the_spool_carries_its_first_key() -> None:
    builder = BatchBuilder()
    for key in (b"\xfe", b"other"):
        builder.append(encode_key_field(key), 0, b"v", 0, 30)
    entries = builder.seal().payload
    topic = Topic(T)
    topic.attach([producer_with(True)])
    spooled = SealedBatch(count=2, payload=entries, buffer_bytes=60)
    Appender().queue_sealed(topic, 0, spooled)
    assert frame_keys(topic.producers[0]) == [(base64.b64encode(b"\xfe").decode(), True)]


def test_the_option_and_its_per_topic_override_reach_the_batch_policy(tmp_path) -> None:
    path = tmp_path / "bruce.toml"
    path.write_text('[topics."orders"]\nkey_based_batching = true\n')
    config = load_config({}, {}, str(path))
    assert config.key_based_batching is False
    assert load_config({"key_based_batching": True}, {}).key_based_batching is True
    configurator = TopicConfigurator(config)
    assert configurator.policy(Topic("persistent://public/default/orders")).key_based
    assert not configurator.policy(Topic(T)).key_based
