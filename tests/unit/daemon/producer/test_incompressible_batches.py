"""CompressionTries, through PartitionProducer: a batch its codec shrinks by less than an
eighth goes uncompressed, and the next ones are sent without trying, for a number of
batches that doubles to a bound."""

from __future__ import annotations

import itertools
import random

import pytest
from pulsar_bruce.batch.compression import CODECS, MAX_COMPRESS_SKIPS, decompress
from pulsar_bruce.frame import pulsar_api_pb2 as pb
from pulsar_bruce.producer.partition_producer import BatchPolicy, PartitionProducer

from tests.unit.daemon.frame.helpers import crc32c_reference, wire

from .test_partition_producer import PUBLISH_TIME, TOPIC, decode, values_in, zlib_chunks


class CountingCodec:
    """A compressor that shrinks a batch only while ``shrink`` is set, and counts its calls."""

    def __init__(self, saving: float = 0.5) -> None:
        self.calls = 0
        self.shrink = False
        self.saving = saving

    def __call__(self, raw: bytes) -> bytes:
        self.calls += 1
        return raw[: len(raw) - int(len(raw) * self.saving)] if self.shrink else raw + b"!"


def producer_with(codec: CountingCodec) -> PartitionProducer:
    producer = PartitionProducer(TOPIC, 2, 42, BatchPolicy(compression=pb.LZ4, compressor=codec))
    producer.on_registered("p-1", -1)
    return producer


def send_one_batch(producer: PartitionProducer, value: bytes = b"v") -> pb.MessageMetadata:
    producer.batch.append(b"", 0, value, 0, 64)
    producer.seal()
    (frame,) = producer.frames_to_send(PUBLISH_TIME).frames
    metadata = decode(frame).metadata
    assert metadata is not None
    return metadata


def tried(codec: CountingCodec, producer: PartitionProducer, batches: int) -> list[int]:
    """Which of the next ``batches`` batches the codec was run on."""
    runs = []
    for index in range(batches):
        before = codec.calls
        send_one_batch(producer)
        if codec.calls > before:
            runs.append(index)
    return runs


def test_random_values_go_uncompressed_on_an_lz4_topic_and_read_back() -> None:
    compression, compressor = CODECS["lz4"]
    producer = PartitionProducer(
        TOPIC, 2, 42, BatchPolicy(compression=compression, compressor=compressor)
    )
    values = [random.Random(i).randbytes(100) for i in range(50)]  # LZ4 saves ~2 %
    for value in values:
        producer.batch.append(b"", 0, value, 0, 64)
    raw = producer.seal()
    assert raw is not None
    raw_size = len(raw.payload) + 50 * 2  # each entry stamped with its 2-byte sequence_id
    producer.on_registered("p-1", -1)
    decoded = decode(producer.frames_to_send(PUBLISH_TIME).frames[0])
    assert decoded.metadata is not None
    assert not decoded.metadata.HasField("compression")  # NONE, as the Java client writes it
    assert len(decoded.payload) == raw_size  # as sealed, like a topic with compression none
    assert values_in(decoded.payload) == values


def test_after_a_batch_that_does_not_shrink_the_untried_run_doubles_to_the_bound() -> None:
    codec = CountingCodec()
    producer = producer_with(codec)
    runs = tried(codec, producer, 400)
    gaps = [later - earlier - 1 for earlier, later in itertools.pairwise(runs)]
    assert gaps[:7] == [1, 2, 4, 8, 16, 32, 64]
    assert set(gaps[7:]) == {MAX_COMPRESS_SKIPS}
    assert producer.compression_tries.uncompressed == 400  # tried or not, none shrank


def test_a_batch_that_shrinks_is_sent_compressed_and_ends_the_skipping() -> None:
    codec = CountingCodec()
    producer = producer_with(codec)
    tried(codec, producer, 16)  # skips grown to 8 by now: tried at 0, 2, 5, 10
    codec.shrink = True
    sent = [send_one_batch(producer).compression for _ in range(20)]
    first = sent.index(pb.LZ4)
    assert all(c == pb.NONE for c in sent[:first])
    assert all(c == pb.LZ4 for c in sent[first:])  # every batch tried again, each compressed
    assert producer.compression_tries.uncompressed == 16 + first
    assert first <= 16


def test_an_incompressible_large_message_goes_uncompressed_in_chunks() -> None:
    value = random.Random(3).randbytes(5_000)
    frames = zlib_chunks(value)
    metadata = frames[0].metadata
    assert metadata is not None and len(frames) == metadata.num_chunks_from_msg > 1
    assert not metadata.HasField("compression") and metadata.uncompressed_size == len(value)
    whole = b"".join(f.payload for f in frames)
    assert decompress(metadata.compression, whole, len(value)) == value


@pytest.mark.parametrize(("saving", "sent"), [(0.125, pb.LZ4), (0.12, pb.NONE)])
def test_a_batch_is_sent_compressed_only_when_it_saves_an_eighth(saving: float, sent: int) -> None:
    codec = CountingCodec(saving)
    codec.shrink = True
    producer = producer_with(codec)
    assert send_one_batch(producer, b"v" * 1000).compression == sent


#: The Send frame of a batch of b"abc" and b"de" under ids 0 and 1 from producer 42 ("p-1"):
#: on an LZ4 topic these values do not shrink, so it goes out byte for byte as on a topic
#: with compression none: no ``compression`` (8) nor ``uncompressed_size`` (9) in its
#: MessageMetadata, and the entries as sealed.
FALLBACK_CHECKED = wire(
    "00000013",  # metadataSize = 19
    "0a 03",  # producer_name (1), 3 bytes
    b"p-1",
    "10 00",  # sequence_id (2) = 0
    "18 80 d0 95 ff bc 31",  # publish_time (3) = 1700000000000
    "58 02",  # num_messages_in_batch (11) = 2
    "c0 01 01",  # highest_sequence_id (24) = 1
    "00000004 40 00 18 03",  # entry: SingleMessageMetadata sequence_id (8) = 0, payload_size 3
    b"abc",
    "00000004 40 01 18 02",  # entry: sequence_id = 1, payload_size (3) = 2
    b"de",
)
FALLBACK_FRAME = wire(
    "00000042",  # totalSize = 4 + 12 + 2 + 4 + 4 + 19 + 11 + 10 = 66
    "0000000c",  # commandSize = 12
    "08 06",  # type = SEND (6)
    "32 08",  # send (6), 8 bytes
    "08 2a",  # producer_id (1) = 42
    "10 00",  # sequence_id (2) = 0
    "18 02",  # num_messages (3) = 2
    "30 01",  # highest_sequence_id (6) = 1
    "0e 01",  # magic: CRC32-C checksum follows
    "03 fc ee 32",  # crc32c of metadataSize + metadata + payload
    FALLBACK_CHECKED,
)


@pytest.mark.parametrize("codec", ["lz4", "none"])
def test_uncompressed_fallback_frame_golden_bytes(codec: str) -> None:
    assert crc32c_reference(FALLBACK_CHECKED) == 0x03FCEE32
    compression, compressor = CODECS[codec]
    producer = PartitionProducer(
        TOPIC, 2, 42, BatchPolicy(compression=compression, compressor=compressor)
    )
    producer.on_registered("p-1", -1)
    producer.batch.append(b"", 0, b"abc", 0, 64)
    producer.batch.append(b"", 0, b"de", 0, 64)
    producer.seal()
    assert producer.frames_to_send(PUBLISH_TIME).frames == [FALLBACK_FRAME]
