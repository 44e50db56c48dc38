"""Per-entry sequence ids, stamped when a batch is first framed, and what reads entries back.

A consumer's ``Message.getSequenceId()`` for a message of a batch is its
entry's ``SingleMessageMetadata.sequence_id`` (the Java client writes each
message's id there: ``Commands.serializeSingleMessageInBatchWithPayload``);
without it every message of the batch would report the batch's first id.
"""

from __future__ import annotations

import struct
from pathlib import Path

import pytest
from pulsar_bruce.batch.batch_builder import (
    BatchBuilder,
    batch_entries_of,
    encode_key_field,
    entry_offsets,
    split_batch,
)
from pulsar_bruce.batch.compression import CODECS, decompress
from pulsar_bruce.batch.entries import first_key_of, stamp_sequence_ids, stamp_sequence_ids_py
from pulsar_bruce.frame import pulsar_api_pb2 as pb
from pulsar_bruce.frame.codec import Frame, FrameDecoder
from pulsar_bruce.metrics.discard_log import DiscardLog
from pulsar_bruce.model.batch import SealedBatch
from pulsar_bruce.producer.partition_producer import BatchPolicy, PartitionProducer

TOPIC = "persistent://public/default/t"
STAMPERS = [stamp_sequence_ids_py, stamp_sequence_ids]


def entries_of(raw: bytes) -> list[tuple[pb.SingleMessageMetadata, bytes]]:
    """(metadata, value) of every entry; each metadata holds every field once."""
    out, offset = [], 0
    while offset < len(raw):
        (size,) = struct.unpack_from(">I", raw, offset)
        encoded = raw[offset + 4 : offset + 4 + size]
        metadata = pb.SingleMessageMetadata.FromString(encoded)
        assert metadata.ByteSize() == len(encoded)  # no field twice (an id stamped over)
        start = offset + 4 + size
        out.append((metadata, raw[start : start + metadata.payload_size]))
        offset = start + metadata.payload_size
    assert offset == len(raw)
    return out


def decode(frame: bytes) -> Frame:
    (decoded,) = FrameDecoder().feed(frame)
    return decoded


def frame_entries(batch: SealedBatch) -> list[tuple[pb.SingleMessageMetadata, bytes]]:
    decoded = decode(batch.frame)
    metadata = decoded.metadata
    assert metadata is not None
    raw = decompress(metadata.compression, decoded.payload, metadata.uncompressed_size)
    assert len(raw) == (metadata.uncompressed_size or len(decoded.payload))
    return entries_of(raw)


def producer_with(policy: BatchPolicy | None = None, last_id: int = -1) -> PartitionProducer:
    producer = PartitionProducer(TOPIC, 0, 1, policy or BatchPolicy())
    producer.on_registered("p", last_id)
    return producer


def add(producer: PartitionProducer, *values: bytes, key: bytes = b"") -> None:
    for value in values:
        producer.batch.append(encode_key_field(key), 1_700_000_000_000, value, 0, 64)
    producer.seal()


def ids(entries: list[tuple[pb.SingleMessageMetadata, bytes]]) -> list[int]:
    return [metadata.sequence_id for metadata, _ in entries]


def test_every_entry_of_a_framed_batch_has_its_own_sequence_id() -> None:
    producer = producer_with(last_id=99)
    add(producer, b"a", b"b", b"c", key=b"k")
    add(producer, b"d", b"e")
    out = producer.frames_to_send(1)
    first, second = (frame_entries(batch) for batch in out.batches)
    assert (ids(first), ids(second)) == ([100, 101, 102], [103, 104])
    assert [value for _, value in first + second] == [b"a", b"b", b"c", b"d", b"e"]
    assert {(m.partition_key, m.event_time) for m, _ in first} == {("k", 1_700_000_000_000)}
    head = decode(out.frames[0]).metadata
    assert head is not None and (head.sequence_id, head.highest_sequence_id) == (100, 102)


def test_a_compressed_batch_is_stamped_before_compression() -> None:
    compression, compressor = CODECS["lz4"]
    producer = producer_with(BatchPolicy(compression=compression, compressor=compressor))
    add(producer, *[b"repetitive value " * 4] * 20)
    (batch,) = producer.frames_to_send(1).batches
    assert decode(batch.frame).metadata.compression == pb.LZ4  # type: ignore[union-attr]
    assert ids(frame_entries(batch)) == list(range(20))


def test_a_batch_that_kept_its_ids_stamps_them() -> None:
    producer = producer_with()
    add(producer, b"a", b"b", b"c")
    producer.pending[0].sequence_id = 7  # as a replayed batch keeps its ids
    (batch,) = producer.frames_to_send(1).batches
    assert ids(frame_entries(batch)) == [7, 8, 9]


def test_halves_of_a_batch_too_large_are_numbered_in_order() -> None:
    producer = producer_with()
    add(producer, *[bytes([n]) * 600 for n in range(4)])
    out = producer.frames_to_send(1, max_frame_size=1024 + 1500)
    assert [ids(frame_entries(batch)) for batch in out.batches] == [[0, 1], [2, 3]]


def test_entries_taken_back_from_a_frame_are_stamped_again_with_new_ids() -> None:
    """The spool and the discard log take entries out of the frame: they carry ids, and
    a second framing replaces them instead of adding a field."""
    producer = producer_with()
    add(producer, b"a", b"b", b"c", key=b"\xff")
    (sent,) = producer.frames_to_send(1).batches
    entries = batch_entries_of(sent)
    assert ids(entries_of(entries)) == [0, 1, 2]
    assert len(entry_offsets(entries)) == 3
    first, rest = split_batch(SealedBatch(count=3, payload=entries, buffer_bytes=192))
    assert (first.count, rest.count) == (1, 2)
    again = producer_with(last_id=49)
    again.pending.append(SealedBatch(count=3, payload=entries, buffer_bytes=192))
    (resent,) = again.frames_to_send(1).batches
    assert ids(frame_entries(resent)) == [50, 51, 52]
    assert [value for _, value in frame_entries(resent)] == [b"a", b"b", b"c"]


def test_the_discard_log_reads_a_framed_batch(tmp_path: Path) -> None:
    producer = producer_with()
    add(producer, b"a", b"b", key=b"key")
    (sent,) = producer.frames_to_send(1).batches
    log = DiscardLog(str(tmp_path / "discards.log"), 1 << 20, 1)
    log.batch("send_timeout", TOPIC, sent)
    log.close()
    lines = (tmp_path / "discards.log").read_text().splitlines()
    assert len(lines) == 2 and all('"key":"key"' in line for line in lines)


@pytest.mark.parametrize("stamp", STAMPERS)
def test_stamping_twice_is_stamping_once_with_the_last_ids(stamp: object) -> None:
    builder = BatchBuilder()
    for key in (b"", b"k", "ключ".encode(), b"\xfe"):
        builder.append(encode_key_field(key), 5, b"value", 0, 64)
    raw = builder.take()
    once = stamp(raw, 2**40, 4)  # type: ignore[operator]
    assert stamp(stamp(raw, 3, 4), 2**40, 4) == once  # type: ignore[operator]
    assert ids(entries_of(once)) == [2**40 + n for n in range(4)]
    assert stamp(b"", 0, 0) == b""  # type: ignore[operator]


@pytest.mark.parametrize("stamp", STAMPERS)
@pytest.mark.parametrize(
    ("first_id", "count", "cut"),
    [(0, 3, 0), (0, 2, 0), (0, 4, 0), (0, 3, 1), (0, 3, 5), (-1, 3, 0), (2**63 - 2, 3, 0)],
)
def test_stamping_refuses_what_is_not_count_entries(
    stamp: object, first_id: int, count: int, cut: int
) -> None:
    builder = BatchBuilder()
    for _ in range(3):
        builder.append(b"", 0, b"value", 0, 64)
    raw = builder.take()
    if (first_id, count, cut) == (0, 3, 0):
        assert ids(entries_of(stamp(raw, 0, 3))) == [0, 1, 2]  # type: ignore[operator]
        return
    with pytest.raises(ValueError):
        stamp(raw[: len(raw) - cut], first_id, count)  # type: ignore[operator]


def test_first_key_of() -> None:
    builder = BatchBuilder()
    assert first_key_of(b"") == (None, False)
    for key in (b"\xfe", b"a"):
        builder.append(encode_key_field(key), 0, b"v", 0, 64)
    assert first_key_of(builder.take()) == ("/g==", True)
    builder.append(b"", 0, b"v", 0, 64)
    assert first_key_of(builder.take()) == (None, False)
