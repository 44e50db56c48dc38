"""A partition producer with ``--encryption-keys``: each batch sealed once, after compression.

As the official clients: a batch is compressed, then encrypted (``uncompressed_size``
stays the plain batch's); a chunked message is compressed whole and each chunk
encrypted on its own.  An encryption failure discards the batch, never sends it plain.
"""

from __future__ import annotations

import os
import struct

import pytest
from cryptography.hazmat.primitives.asymmetric import rsa
from pulsar_bruce import reasons
from pulsar_bruce.batch.batch_builder import batch_entries_of
from pulsar_bruce.batch.compression import codec, decompress
from pulsar_bruce.batch.encryption import Encryptor, Recipient, decrypt
from pulsar_bruce.frame import pulsar_api_pb2 as pb
from pulsar_bruce.frame.codec import Frame, FrameDecoder
from pulsar_bruce.model.vocabulary import Compression
from pulsar_bruce.producer.partition_producer import (
    SEND_FRAME_OVERHEAD,
    BatchPolicy,
    PartitionProducer,
)

TOPIC = "persistent://public/default/secret-partition-0"
NOW_MS = 1_700_000_000_000


@pytest.fixture(scope="module")
def private_key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


def producer_for(private_key: rsa.RSAPrivateKey, **changes: object) -> PartitionProducer:
    wire, compressor = codec(Compression.LZ4)
    policy: dict[str, object] = {
        "compression": wire,
        "compressor": compressor,
        "encryptor": Encryptor([Recipient("app", "app.pem", private_key.public_key())]),
    }
    policy.update(changes)
    producer = PartitionProducer(TOPIC, 0, 7, BatchPolicy(**policy))  # type: ignore[arg-type]
    producer.on_registered("p-1", -1)
    return producer


def add(producer: PartitionProducer, *values: bytes) -> None:
    for value in values:
        producer.batch.append(b"", 0, value, 0, 64)
    producer.seal()


def values_in(payload: bytes) -> list[bytes]:
    values, offset = [], 0
    while offset < len(payload):
        (size,) = struct.unpack_from(">I", payload, offset)
        metadata = pb.SingleMessageMetadata.FromString(payload[offset + 4 : offset + 4 + size])
        offset += 4 + size
        values.append(payload[offset : offset + metadata.payload_size])
        offset += metadata.payload_size
    return values


def opened(private_key: rsa.RSAPrivateKey, frame: Frame) -> bytes:
    """What a consumer holding the private key reads: decrypted, then decompressed."""
    md = frame.metadata
    assert md is not None
    [key] = md.encryption_keys
    assert key.key == "app" and not md.HasField("encryption_algo")
    compressed = decrypt(private_key, key.value, md.encryption_param, frame.payload)
    return decompress(md.compression, compressed, md.uncompressed_size)


def test_a_batch_is_compressed_then_encrypted(private_key) -> None:
    producer = producer_for(private_key)
    values = [b"secret %d " % i * 20 for i in range(50)]
    add(producer, *values)
    out = producer.frames_to_send(NOW_MS)
    [frame] = FrameDecoder().feed(out.frames[0])
    md = frame.metadata
    assert md is not None and md.compression == pb.LZ4 and md.num_messages_in_batch == 50
    assert len(md.encryption_param) == 12
    assert b"secret" not in out.frames[0]
    assert values_in(opened(private_key, frame)) == values


def test_an_encrypted_batch_keeps_its_entries_for_the_spool_and_the_discard_log(
    private_key,
) -> None:
    """The frame cannot give them back (``batch_entries_of`` reads a plain frame): they stay,
    with the sequence ids the framing stamped, where every reader looks first."""
    producer = producer_for(private_key)
    add(producer, b"a", b"b")
    [batch] = producer.frames_to_send(NOW_MS).batches
    assert values_in(batch.payload) == [b"a", b"b"]
    plain = producer_for(private_key, encryptor=None)
    add(plain, b"a", b"b")
    [reference] = plain.frames_to_send(NOW_MS).batches
    assert batch.payload == batch_entries_of(reference)


def test_one_data_key_for_many_batches_each_with_its_own_iv(private_key) -> None:
    producer = producer_for(private_key)
    add(producer, b"one")
    add(producer, b"two")
    frames = FrameDecoder().feed(b"".join(producer.frames_to_send(NOW_MS).frames))
    keys = {f.metadata.encryption_keys[0].value for f in frames if f.metadata}
    ivs = {f.metadata.encryption_param for f in frames if f.metadata}
    assert len(keys) == 1 and len(ivs) == 2
    assert [values_in(opened(private_key, f)) for f in frames] == [[b"one"], [b"two"]]


def test_a_batch_over_the_limit_with_the_encryption_overhead_is_split(private_key) -> None:
    producer = producer_for(private_key, compressor=None, compression=0)
    add(producer, os.urandom(1000), os.urandom(1000))
    out = producer.frames_to_send(NOW_MS, max_frame_size=SEND_FRAME_OVERHEAD + 2100)
    assert [b.count for b in out.batches] == [1, 1]  # 2 x 1000 bytes + keys: over 2100
    for data in out.frames:
        assert len(data) <= SEND_FRAME_OVERHEAD + 2100


def test_a_chunked_message_is_compressed_whole_and_each_chunk_encrypted(private_key) -> None:
    producer = producer_for(private_key)
    value = os.urandom(9000)
    add(producer, value)
    limit = 4000 + SEND_FRAME_OVERHEAD
    out = producer.frames_to_send(NOW_MS, max_frame_size=limit)
    [batch] = out.batches
    frames = FrameDecoder().feed(batch.frame)
    assert batch.frames == len(frames) > 2
    joined = b""
    for frame in frames:
        md = frame.metadata
        assert md is not None and md.num_chunks_from_msg == len(frames)
        [key] = md.encryption_keys
        joined += decrypt(private_key, key.value, md.encryption_param, frame.payload)
    md = frames[0].metadata
    assert md is not None and md.total_chunk_msg_size == len(joined)
    assert decompress(md.compression, joined, md.uncompressed_size) == value
    offset = 0
    while offset < len(batch.frame):  # each frame: 4 bytes of totalSize, then the rest
        size = 4 + struct.unpack_from(">I", batch.frame, offset)[0]
        assert size <= limit
        offset += size


class Failing:
    """An encryptor whose data key cannot be made."""

    def data_key(self, now_ms: int) -> object:
        from pulsar_bruce.batch.encryption import EncryptionError

        raise EncryptionError("cannot make a data key: no entropy")


@pytest.mark.parametrize("size", [10, 9000])
def test_an_encryption_failure_discards_the_batch_never_sends_it_plain(size: int) -> None:
    producer = PartitionProducer(TOPIC, 0, 7, BatchPolicy(encryptor=Failing()))  # type: ignore[arg-type]
    producer.on_registered("p-1", -1)
    add(producer, b"x" * size)
    batch = producer.pending[0]
    out = producer.frames_to_send(NOW_MS, max_frame_size=4000 + SEND_FRAME_OVERHEAD)
    assert out.frames == [] and out.batches == []
    assert out.rejected == [(batch, reasons.ENCRYPTION_FAILED)]
    assert not producer.pending and producer.in_flight == 0
    assert batch.payload  # the discard log can still show what was lost


def test_a_topic_size_refusal_cuts_an_encrypted_batch_from_its_entries(private_key) -> None:
    """The broker's "Exceed maximum message size" halves the batch: from the entries it kept,
    since its frame cannot be read back."""
    from pulsar_bruce.producer.topic_size import halves_for_topic_limit

    producer = producer_for(private_key)
    values = [b"value %d" % i for i in range(10)]
    add(producer, *values)
    [batch] = producer.frames_to_send(NOW_MS).batches
    producer.pending.clear()
    _, halves = halves_for_topic_limit(batch)
    assert [values_in(half.payload) for half in halves] == [values[:5], values[5:]]


def test_a_renumbered_encrypted_batch_is_framed_and_encrypted_again(private_key) -> None:
    """The broker is past our ids (another process used the name): the batch is numbered
    anew from the entries it kept, and sealed again under the new ids."""
    producer = producer_for(private_key)
    add(producer, b"a", b"b")
    first = producer.frames_to_send(NOW_MS).frames[0]
    producer.on_disconnected()
    assert producer.on_registered("p-1", 100) is not None
    [again] = producer.frames_to_send(NOW_MS).frames
    assert again != first
    [frame] = FrameDecoder().feed(again)
    assert frame.command.send.sequence_id == 101
    assert values_in(opened(private_key, frame)) == [b"a", b"b"]
