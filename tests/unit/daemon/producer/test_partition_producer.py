"""PartitionProducer: sequence ids, send frames, receipt matching, resend after reconnect."""

from __future__ import annotations

import random
import struct

import pytest
from pulsar_bruce.batch.batch_builder import encode_key_field
from pulsar_bruce.batch.compression import CODECS, decompress
from pulsar_bruce.frame import pulsar_api_pb2 as pb
from pulsar_bruce.frame.codec import Frame, FrameDecoder
from pulsar_bruce.producer.partition_producer import (
    SEND_FRAME_OVERHEAD,
    BatchPolicy,
    Outgoing,
    PartitionProducer,
    ReceiptMatch,
)

TOPIC = "persistent://public/default/t-partition-2"
PUBLISH_TIME = 1700000000000


def make_producer(policy: BatchPolicy | None = None) -> PartitionProducer:
    return PartitionProducer(TOPIC, 2, 42, policy or BatchPolicy())


def add_batch(producer: PartitionProducer, count: int, prefix: bytes = b"m") -> None:
    """Append ``count`` messages to the open batch and seal it."""
    for i in range(count):
        producer.batch.append(b"", 0, prefix + str(i).encode(), 0, 64)
    assert producer.seal() is not None


def decode(frame: bytes) -> Frame:
    frames = FrameDecoder().feed(frame)
    assert len(frames) == 1
    return frames[0]


def values_in(payload: bytes) -> list[bytes]:
    values = []
    offset = 0
    while offset < len(payload):
        (size,) = struct.unpack_from(">I", payload, offset)
        metadata = pb.SingleMessageMetadata()
        metadata.ParseFromString(payload[offset + 4 : offset + 4 + size])
        offset += 4 + size
        values.append(payload[offset : offset + metadata.payload_size])
        offset += metadata.payload_size
    return values


# -- before registration ------------------------------------------------------------------------


def test_nothing_is_sent_before_registration() -> None:
    producer = make_producer()
    add_batch(producer, 2)
    assert not producer.ready
    assert not producer.has_unsent
    assert producer.frames_to_send(PUBLISH_TIME) == Outgoing()
    assert producer.pending[0].sequence_id == -1  # not assigned yet


def test_seal_of_an_empty_batch_queues_nothing() -> None:
    producer = make_producer()
    assert producer.seal() is None
    assert not producer.pending


def test_registration_makes_pending_batches_sendable() -> None:
    producer = make_producer()
    add_batch(producer, 1)
    producer.on_registered("p-1", -1)
    assert producer.ready
    assert producer.has_unsent
    out = producer.frames_to_send(PUBLISH_TIME)
    assert len(out.frames) == len(out.batches) == 1
    assert out.resent_messages == 0
    assert not out.rejected
    assert not producer.has_unsent


# -- sequence ids --------------------------------------------------------------------------------


def test_sequence_ids_start_at_zero_without_broker_history() -> None:
    producer = make_producer()
    add_batch(producer, 3)
    producer.on_registered("p-1", -1)
    (batch,) = producer.frames_to_send(PUBLISH_TIME).batches
    assert (batch.sequence_id, batch.highest_sequence_id) == (0, 2)


def test_sequence_ids_continue_after_the_brokers_last_sequence_id() -> None:
    producer = make_producer()
    add_batch(producer, 2)
    add_batch(producer, 3)
    producer.on_registered("p-1", 9)
    batches = producer.frames_to_send(PUBLISH_TIME).batches
    assert [(b.sequence_id, b.highest_sequence_id) for b in batches] == [(10, 11), (12, 14)]
    assert producer.next_sequence_id == 15


def test_sequence_ids_are_assigned_at_first_send_not_at_seal() -> None:
    producer = make_producer()
    producer.on_registered("p-1", 99)
    add_batch(producer, 1)
    assert producer.pending[0].sequence_id == -1
    producer.frames_to_send(PUBLISH_TIME)
    assert producer.pending[0].sequence_id == 100
    add_batch(producer, 4)
    assert producer.pending[1].sequence_id == -1
    (batch,) = producer.frames_to_send(PUBLISH_TIME).batches
    assert (batch.sequence_id, batch.highest_sequence_id) == (101, 104)


def test_a_lower_last_sequence_id_never_moves_sequence_ids_back() -> None:
    producer = make_producer()
    producer.on_registered("p-1", 49)
    add_batch(producer, 1)
    producer.frames_to_send(PUBLISH_TIME)
    producer.on_disconnected()
    producer.on_registered("p-1", -1)  # e.g. a broker without deduplication state
    add_batch(producer, 1)
    batches = producer.frames_to_send(PUBLISH_TIME).batches
    assert [b.sequence_id for b in batches] == [50, 51]


# -- the send frame ------------------------------------------------------------------------------


def test_send_frame_carries_the_batch_range_in_command_and_metadata() -> None:
    producer = make_producer()
    add_batch(producer, 3)
    producer.on_registered("p-1", 6)
    out = producer.frames_to_send(PUBLISH_TIME)
    (frame,), (batch,) = out.frames, out.batches
    decoded = decode(frame)
    send = decoded.command.send
    assert decoded.command.type == pb.BaseCommand.SEND
    assert send.producer_id == 42
    assert send.sequence_id == 7
    assert send.highest_sequence_id == 9
    assert send.num_messages == 3
    metadata = decoded.metadata
    assert metadata is not None
    assert metadata.producer_name == "p-1"
    assert metadata.sequence_id == 7
    assert metadata.highest_sequence_id == 9
    assert metadata.num_messages_in_batch == 3
    assert metadata.publish_time == PUBLISH_TIME
    assert not metadata.HasField("compression")
    assert values_in(decoded.payload) == [b"m0", b"m1", b"m2"]
    assert batch.frame == frame


def test_send_frame_with_lz4_records_compression_and_uncompressed_size() -> None:
    compression, compressor = CODECS["lz4"]
    producer = make_producer(BatchPolicy(compression=compression, compressor=compressor))
    add_batch(producer, 20, prefix=b"repetitive value ")
    raw_size = len(producer.pending[0].payload) + 20 * 2  # + each entry's 2-byte sequence_id
    producer.on_registered("p-1", -1)
    (frame,) = producer.frames_to_send(PUBLISH_TIME).frames
    decoded = decode(frame)
    metadata = decoded.metadata
    assert metadata is not None
    assert metadata.compression == pb.LZ4
    assert metadata.uncompressed_size == raw_size
    raw = decompress(metadata.compression, decoded.payload, metadata.uncompressed_size)
    assert len(raw) == raw_size
    assert values_in(raw) == [b"repetitive value " + str(i).encode() for i in range(20)]


def test_frames_are_in_pending_order() -> None:
    producer = make_producer()
    for count in (1, 2, 3):
        add_batch(producer, count)
    producer.on_registered("p-1", -1)
    frames = producer.frames_to_send(PUBLISH_TIME).frames
    assert [decode(f).command.send.sequence_id for f in frames] == [0, 1, 3]


def test_each_batch_is_written_once_per_connection() -> None:
    producer = make_producer()
    add_batch(producer, 1)
    producer.on_registered("p-1", -1)
    assert len(producer.frames_to_send(PUBLISH_TIME).frames) == 1
    assert producer.frames_to_send(PUBLISH_TIME) == Outgoing()
    add_batch(producer, 1)
    frames = producer.frames_to_send(PUBLISH_TIME).frames
    assert [decode(f).command.send.sequence_id for f in frames] == [1]
    assert producer.in_flight == 2


# -- receipts -------------------------------------------------------------------------------------


def sent_producer(*counts: int) -> PartitionProducer:
    producer = make_producer()
    for count in counts:
        add_batch(producer, count)
    producer.on_registered("p-1", 9)
    producer.frames_to_send(PUBLISH_TIME)
    return producer


def test_receipt_for_the_head_is_acked() -> None:
    producer = sent_producer(2, 3)  # sequence ids 10..11, 12..14
    match, batch = producer.on_receipt(10)
    assert match is ReceiptMatch.ACKED
    assert batch is not None
    assert (batch.sequence_id, batch.count) == (10, 2)
    assert producer.in_flight == 1
    assert len(producer.pending) == 1


def test_receipts_in_order_ack_everything() -> None:
    producer = sent_producer(2, 3)
    assert producer.on_receipt(10)[0] is ReceiptMatch.ACKED
    assert producer.on_receipt(12)[0] is ReceiptMatch.ACKED
    assert not producer.pending
    assert producer.in_flight == 0


def test_receipt_older_than_the_head_is_stale() -> None:
    producer = sent_producer(2, 3)
    producer.on_receipt(10)
    assert producer.on_receipt(10) == (ReceiptMatch.STALE, None)
    assert producer.on_receipt(3) == (ReceiptMatch.STALE, None)
    assert len(producer.pending) == 1


def test_receipt_newer_than_the_head_is_a_mismatch() -> None:
    producer = sent_producer(2, 3)
    assert producer.on_receipt(12) == (ReceiptMatch.MISMATCH, None)  # skips the head
    assert producer.on_receipt(11) == (ReceiptMatch.MISMATCH, None)  # inside the head batch
    assert len(producer.pending) == 2
    assert producer.in_flight == 2


def test_receipt_with_nothing_in_flight_is_a_mismatch() -> None:
    producer = make_producer()
    producer.on_registered("p-1", -1)
    assert producer.on_receipt(0) == (ReceiptMatch.MISMATCH, None)


def test_receipt_for_a_sealed_but_unsent_batch_is_a_mismatch() -> None:
    producer = make_producer()
    add_batch(producer, 1)
    producer.on_registered("p-1", -1)
    assert producer.on_receipt(0) == (ReceiptMatch.MISMATCH, None)
    assert producer.on_receipt(-1) == (ReceiptMatch.MISMATCH, None)


def test_receipt_for_an_id_already_given_with_nothing_in_flight_is_ignored() -> None:
    producer = sent_producer(1)
    producer.on_disconnected()
    assert producer.on_receipt(10) == (ReceiptMatch.STALE, None)  # e.g. after a send timeout
    assert len(producer.pending) == 1  # still resent: a duplicate at worst, never a loss


def test_receipt_for_an_id_never_given_is_a_mismatch() -> None:
    producer = sent_producer(1)
    producer.on_disconnected()
    assert producer.on_receipt(10_000) == (ReceiptMatch.MISMATCH, None)


# -- reconnect ------------------------------------------------------------------------------------


def test_resend_after_reconnect_keeps_order_ids_and_bytes() -> None:
    producer = sent_producer(2, 3)
    first_frames = [batch.frame for batch in producer.pending]
    producer.on_disconnected()
    assert not producer.ready
    assert producer.frames_to_send(PUBLISH_TIME) == Outgoing()
    producer.on_registered("p-1", 9)
    out = producer.frames_to_send(PUBLISH_TIME + 5000)
    assert out.frames == first_frames
    assert [(b.sequence_id, b.highest_sequence_id) for b in out.batches] == [(10, 11), (12, 14)]
    assert out.resent_messages == 5  # every message of both batches may be a duplicate


def test_resend_counts_only_batches_sent_before() -> None:
    producer = sent_producer(2, 3)
    producer.on_receipt(10)  # first batch confirmed
    producer.on_disconnected()
    add_batch(producer, 4)  # sealed while disconnected: never sent
    producer.on_registered("p-1", 11)
    out = producer.frames_to_send(PUBLISH_TIME)
    assert [(b.sequence_id, b.count) for b in out.batches] == [(12, 3), (15, 4)]
    assert out.resent_messages == 3
    assert [decode(f).command.send.sequence_id for f in out.frames] == [12, 15]


def test_resent_batches_count_each_resend() -> None:
    producer = sent_producer(2)
    for _ in range(3):
        producer.on_disconnected()
        producer.on_registered("p-1", 9)
        assert producer.frames_to_send(PUBLISH_TIME).resent_messages == 2
    assert producer.pending[0].send_attempts == 4


def test_producer_name_is_kept_across_disconnect() -> None:
    producer = sent_producer(1)
    producer.on_disconnected()
    assert producer.name == "p-1"  # passed back in CommandProducer on re-creation


def test_resent_frame_keeps_the_original_producer_name() -> None:
    producer = sent_producer(1)
    producer.on_disconnected()
    producer.on_registered("p-1", 9)
    (frame,) = producer.frames_to_send(PUBLISH_TIME).frames
    metadata = decode(frame).metadata
    assert metadata is not None
    assert metadata.producer_name == "p-1"


def test_receipts_after_reconnect_match_the_resent_batches() -> None:
    producer = sent_producer(2, 3)
    producer.on_disconnected()
    producer.on_registered("p-1", 14)  # broker already has both batches (deduplicated)
    producer.frames_to_send(PUBLISH_TIME)
    assert producer.on_receipt(10)[0] is ReceiptMatch.ACKED
    assert producer.on_receipt(12)[0] is ReceiptMatch.ACKED
    add_batch(producer, 1)
    out = producer.frames_to_send(PUBLISH_TIME)
    assert [b.sequence_id for b in out.batches] == [15]
    assert out.resent_messages == 0


# -- batches too large for the broker -----------------------------------------------------------


def test_message_larger_than_the_frame_limit_goes_as_chunks_in_its_place() -> None:
    producer = make_producer()
    add_batch(producer, 1, prefix=b"s")
    producer.batch.append(b"", 0, b"x" * 5000, 0, 64)
    producer.seal()
    add_batch(producer, 2, prefix=b"t")
    big = producer.pending[1]
    producer.on_registered("p-1", -1)
    out = producer.frames_to_send(PUBLISH_TIME, max_frame_size=4000 + SEND_FRAME_OVERHEAD)
    assert not out.rejected
    assert [(b.sequence_id, b.count) for b in out.batches] == [(0, 1), (1, 1), (2, 2)]
    assert big.frames == 2 and big.frame
    assert producer.in_flight == 3


def test_message_whose_metadata_alone_exceeds_the_frame_is_rejected_not_sent() -> None:
    producer = make_producer()
    add_batch(producer, 1, prefix=b"s")
    producer.batch.append(encode_key_field(b"k" * 3000), 0, b"x" * 5000, 0, 64)  # a huge key
    producer.seal()
    big = producer.pending[1]
    producer.on_registered("p-1", -1)
    out = producer.frames_to_send(PUBLISH_TIME, max_frame_size=2000 + SEND_FRAME_OVERHEAD)
    assert out.rejected == [(big, "too_large")]
    assert [(b.sequence_id, b.count) for b in out.batches] == [(0, 1)]
    assert big.sequence_id == -1  # never given a sequence id


def test_batch_exactly_at_the_frame_limit_is_sent() -> None:
    producer = make_producer()
    producer.batch.append(b"", 0, b"x" * 100, 0, 64)
    producer.seal()
    size = len(producer.pending[0].payload)
    producer.on_registered("p-1", -1)
    out = producer.frames_to_send(PUBLISH_TIME, max_frame_size=size + SEND_FRAME_OVERHEAD)
    assert not out.rejected
    assert len(out.frames) == 1


# -- send errors name a batch by its id range ---------------------------------------------------


@pytest.mark.parametrize("named", [10, 11])
def test_reject_takes_the_batch_whose_range_holds_the_id(named: int) -> None:
    """The Java broker answers a failed batch with max(highest_sequence_id, sequence_id)
    (pulsar-broker Producer.java, MessagePublishContext.completed and checkAndStartPublish):
    for a batch of ids 10..11 that is 11, which must name the batch as surely as 10."""
    producer = sent_producer(2, 3)  # ids 10..11, 12..14
    batch = producer.reject(named)
    assert batch is not None and (batch.sequence_id, batch.count) == (10, 2)
    assert producer.in_flight == 1
    assert producer.on_receipt(12)[0] is ReceiptMatch.ACKED


def test_reject_takes_a_batch_behind_the_head() -> None:
    """A batch over the topic's size limit fails at once (PersistentTopic.publishMessage),
    while the one before it may still be persisting: the error names a later batch."""
    producer = sent_producer(2, 3, 1)  # ids 10..11, 12..14, 15
    batch = producer.reject(14)
    assert batch is not None and (batch.sequence_id, batch.count) == (12, 3)
    assert [b.sequence_id for b in producer.pending] == [10, 15]
    assert producer.in_flight == 2
    assert producer.on_receipt(10)[0] is ReceiptMatch.ACKED
    assert producer.on_receipt(15)[0] is ReceiptMatch.ACKED
    assert not producer.pending


@pytest.mark.parametrize("named", [-1, 9, 16, 100])
def test_reject_of_an_id_in_no_in_flight_batch_does_nothing(named: int) -> None:
    producer = sent_producer(2, 3, 1)
    assert producer.reject(named) is None
    assert producer.in_flight == 3 and len(producer.pending) == 3


def test_reject_does_not_touch_batches_not_yet_written() -> None:
    producer = sent_producer(2)  # ids 10..11
    add_batch(producer, 3)  # sealed, not written: no ids yet
    assert producer.reject(12) is None
    assert producer.in_flight_batch(12) is None
    assert len(producer.pending) == 2


def test_in_flight_batch_finds_without_removing() -> None:
    producer = sent_producer(2, 3)
    batch = producer.in_flight_batch(13)
    assert batch is producer.pending[1]
    assert producer.in_flight == 2


def test_reject_with_nothing_in_flight_does_nothing() -> None:
    producer = make_producer()
    add_batch(producer, 1)
    assert producer.reject(-1) is None
    assert len(producer.pending) == 1


# -- closing: the producer is re-created on its connection ---------------------------------------


def test_a_closing_producer_writes_nothing_but_takes_receipts_in_any_order() -> None:
    """After the broker failed one batch, the batches behind it may still be confirmed
    before the CloseProducer answer comes: those are done, not resent."""
    producer = sent_producer(2, 3, 1)  # ids 10..11, 12..14, 15
    add_batch(producer, 1)  # sealed, waiting
    producer.pause()
    assert not producer.has_unsent
    assert producer.frames_to_send(PUBLISH_TIME) == Outgoing()
    assert producer.on_receipt(15)[0] is ReceiptMatch.ACKED  # behind the failed 10..11
    assert producer.on_receipt(13) == (ReceiptMatch.STALE, None)  # inside a batch: not its id
    assert producer.on_receipt(99) == (ReceiptMatch.STALE, None)  # being re-created anyway
    assert [b.sequence_id for b in producer.pending] == [10, 12, -1]
    producer.on_disconnected()
    producer.on_registered("p-1", 9)
    out = producer.frames_to_send(PUBLISH_TIME)
    assert [(b.sequence_id, b.count) for b in out.batches] == [(10, 2), (12, 3), (16, 1)]
    assert out.resent_messages == 5


def test_an_open_producer_still_takes_receipts_for_the_head_only() -> None:
    producer = sent_producer(2, 3)
    assert producer.on_receipt(12) == (ReceiptMatch.MISMATCH, None)
    assert producer.in_flight == 2


def test_registration_ends_closing() -> None:
    producer = sent_producer(1)
    producer.pause()
    producer.on_disconnected()
    assert not producer.closing
    producer.pause()
    producer.on_registered("p-1", 9)
    assert not producer.closing and producer.ready


# -- take_all -------------------------------------------------------------------------------------


def test_take_all_returns_pending_and_open_batches() -> None:
    producer = sent_producer(2, 3)
    add_batch(producer, 1)  # sealed, not yet sent
    producer.batch.append(b"", 0, b"open", 0, 64)
    producer.batch.append(b"", 0, b"open", 0, 64)
    assert producer.buffered_messages == 2 + 3 + 1 + 2
    batches = producer.take_all()
    assert [b.count for b in batches] == [2, 3, 1, 2]
    assert not producer.pending
    assert producer.in_flight == 0
    assert producer.batch.count == 0
    assert producer.buffered_messages == 0


def test_take_all_on_an_idle_producer_is_empty() -> None:
    assert make_producer().take_all() == []


@pytest.mark.parametrize("count", [1, 1000])
def test_buffered_messages_counts_open_and_pending(count: int) -> None:
    producer = make_producer()
    for _ in range(count):
        producer.batch.append(b"", 0, b"v", 0, 64)
    assert producer.buffered_messages == count
    producer.seal()
    assert producer.buffered_messages == count


def test_a_batch_the_broker_failed_max_attempts_times_is_given_up() -> None:
    producer = make_producer()
    add_batch(producer, 3)
    producer.on_registered("p-1", -1)
    for _ in range(2):
        assert len(producer.frames_to_send(PUBLISH_TIME, max_attempts=2).frames) == 1
        producer.pending[0].failed_sends += 1  # the driver's count_failure
        producer.pending[0].refused_writes += 1  # a SendError answered the write
        producer.on_disconnected()
        producer.on_registered("p-1", -1)
    out = producer.frames_to_send(PUBLISH_TIME, max_attempts=2)
    assert out.frames == [] and [(b.count, r) for b, r in out.rejected] == [
        (3, "retries_exhausted")
    ]
    assert not producer.pending


def test_expire_removes_old_batches_from_the_head_only() -> None:
    producer = make_producer()
    for created in (1.0, 2.0, 5.0):
        add_batch(producer, 1)
        producer.pending[-1].created_at = created
    producer.on_registered("p-1", -1)
    producer.frames_to_send(PUBLISH_TIME)
    expired = producer.expire(deadline=3.0)
    assert [b.created_at for b in expired] == [1.0, 2.0]
    assert producer.in_flight == 1 and [b.created_at for b in producer.pending] == [5.0]


def test_the_queue_says_what_it_queued_since_its_last_framing_and_forgets_what_expired() -> None:
    producer = make_producer()
    open_batch = producer.batch
    for created in (1.0, 5.0):
        add_batch(producer, 1)
        producer.pending[-1].created_at = created
    second = producer.pending[1]
    producer.expire(deadline=3.0)  # unsent, with nobody to take it: not held on to
    assert list(producer.queue.take_queued()) == [(second, open_batch)]
    assert producer.queue.take_queued() == ()
    add_batch(producer, 1)
    producer.on_registered("p-1", -1)
    producer.frames_to_send(PUBLISH_TIME)
    assert producer.queue.take_queued() == ()  # framed: the journal had its turn before


# -- chunked messages ---------------------------------------------------------------------------


def chunked_producer() -> PartitionProducer:
    """One small batch (id 0), one message in 3 chunks (id 1), one small batch (id 2), sent."""
    producer = make_producer()
    add_batch(producer, 1, prefix=b"s")
    producer.batch.append(b"", 0, b"x" * 10_000, 0, 64)
    producer.seal()
    add_batch(producer, 1, prefix=b"t")
    producer.on_registered("p-1", -1)
    producer.frames_to_send(PUBLISH_TIME, max_frame_size=4000 + SEND_FRAME_OVERHEAD)
    assert producer.pending[1].frames == 3
    return producer


def test_a_chunked_message_is_acked_with_its_last_chunk_receipt() -> None:
    producer = chunked_producer()
    assert producer.on_receipt(0)[0] is ReceiptMatch.ACKED
    assert producer.on_receipt(1) == (ReceiptMatch.CHUNK, None)
    assert producer.on_receipt(1) == (ReceiptMatch.CHUNK, None)
    match, batch = producer.on_receipt(1)
    assert match is ReceiptMatch.ACKED and batch is not None and batch.count == 1
    assert producer.on_receipt(2)[0] is ReceiptMatch.ACKED
    assert not producer.pending


def test_after_a_reconnect_every_chunk_is_resent_and_needs_its_receipt_again() -> None:
    producer = chunked_producer()
    big = producer.pending[1]
    frame = big.frame
    producer.on_receipt(0)
    producer.on_receipt(1)  # one chunk confirmed, then the connection goes
    producer.on_disconnected()
    producer.on_registered("p-1", 0)
    out = producer.frames_to_send(PUBLISH_TIME, max_frame_size=4000 + SEND_FRAME_OVERHEAD)
    assert out.frames[0] == frame  # all three chunks, unchanged (same sequence id)
    assert len(FrameDecoder().feed(frame)) == 3
    assert out.resent_messages == 2
    assert [producer.on_receipt(1)[0] for _ in range(3)] == [
        ReceiptMatch.CHUNK,
        ReceiptMatch.CHUNK,
        ReceiptMatch.ACKED,
    ]


def test_a_chunked_message_keeps_its_entries_for_the_spool_and_the_discard_log() -> None:
    producer = chunked_producer()
    assert values_in(producer.pending[1].payload) == [b"x" * 10_000]


def zlib_chunks(value: bytes) -> list[Frame]:
    """The chunk frames of ``value`` sent alone on a zlib topic whose broker takes 1 KiB."""
    compression, compressor = CODECS["zlib"]
    producer = make_producer(BatchPolicy(compression=compression, compressor=compressor))
    producer.batch.append(b"", 0, value, 0, 64)
    producer.seal()
    producer.on_registered("p-1", -1)
    out = producer.frames_to_send(PUBLISH_TIME, max_frame_size=1024 + SEND_FRAME_OVERHEAD)
    return FrameDecoder().feed(out.frames[0])


def test_a_compressed_large_message_is_compressed_whole_before_it_is_cut() -> None:
    value = bytes(random.Random(1).choices(b"ACGT", k=20_000))  # compressible, not to 1 KiB
    frames = zlib_chunks(value)
    metadata = frames[0].metadata
    assert metadata is not None and metadata.compression == pb.ZLIB
    assert metadata.uncompressed_size == len(value)
    whole = b"".join(f.payload for f in frames)
    assert metadata.total_chunk_msg_size == len(whole)
    assert len(frames) > 1 and len(whole) < len(value)
    assert decompress(pb.ZLIB, whole, len(value)) == value
