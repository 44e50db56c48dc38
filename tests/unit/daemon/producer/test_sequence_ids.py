"""Registration under a name whose broker history is ahead of ours: renumber, never resend
under ids the broker takes for duplicates (pulsar-broker MessageDeduplication.isDuplicate)."""

from __future__ import annotations

from pulsar_bruce.frame import pulsar_api_pb2 as pb
from pulsar_bruce.frame.codec import FrameDecoder
from pulsar_bruce.model.batch import SealedBatch
from pulsar_bruce.producer.partition_producer import SEND_FRAME_OVERHEAD, ReceiptMatch

from tests.unit.daemon.producer.test_partition_producer import (
    PUBLISH_TIME,
    add_batch,
    make_producer,
    values_in,
)


def sends(frames: list[bytes]) -> list[tuple[int, int, int, int]]:
    """(command id, command highest id, metadata id, metadata highest id) of each Send frame."""
    found = []
    for frame in frames:
        for decoded in FrameDecoder().feed(frame):
            send, metadata = decoded.command.send, decoded.metadata
            assert metadata is not None
            found.append(
                (
                    send.sequence_id,
                    send.highest_sequence_id,
                    metadata.sequence_id,
                    metadata.highest_sequence_id,
                )
            )
    return found


def payload_values(frame: bytes) -> list[bytes]:
    (decoded,) = FrameDecoder().feed(frame)
    return values_in(decoded.payload)


def test_a_broker_ahead_of_every_id_we_assigned_gets_the_pending_batches_renumbered() -> None:
    producer = make_producer()
    add_batch(producer, 2, prefix=b"a")
    add_batch(producer, 3, prefix=b"b")
    producer.on_registered("edge-h-abc123", -1)
    assert [b.sequence_id for b in producer.frames_to_send(PUBLISH_TIME).batches] == [0, 2]
    producer.on_disconnected()
    # Another daemon used the name meanwhile: the broker stored ids up to 50.
    renumbered = producer.on_registered("edge-h-abc123", 50)
    assert renumbered is not None
    assert (renumbered.ours, renumbered.broker, renumbered.batches) == (4, 50, 2)
    # Both were written before: possible duplicates, now that the broker cannot drop them.
    assert [b.count for b in renumbered.possibly_stored] == [2, 3]
    add_batch(producer, 1, prefix=b"c")  # new: numbered after the renumbered ones
    out = producer.frames_to_send(PUBLISH_TIME)
    assert sends(out.frames) == [(51, 52, 51, 52), (53, 55, 53, 55), (56, 56, 56, 56)]
    assert [payload_values(f) for f in out.frames] == [[b"a0", b"a1"], [b"b0", b"b1", b"b2"],
                                                       [b"c0"]]  # fmt: skip
    assert producer.on_receipt(51)[0] is ReceiptMatch.ACKED
    assert producer.next_sequence_id == 57


def test_a_broker_at_or_below_our_ids_changes_nothing_so_deduplication_drops_copies() -> None:
    producer = make_producer()
    add_batch(producer, 2)
    add_batch(producer, 3)
    producer.on_registered("p-1", -1)
    first = producer.frames_to_send(PUBLISH_TIME).frames
    for last in (1, 4):  # the broker stored the first batch, or both
        producer.on_disconnected()
        assert producer.on_registered("p-1", last) is None
        out = producer.frames_to_send(PUBLISH_TIME + 1)
        assert out.frames == first and out.resent_messages == 5
    assert producer.next_sequence_id == 5


def test_batches_back_from_the_spool_are_renumbered_too_as_possibly_stored() -> None:
    producer = make_producer()
    producer.name, producer.name_is_ours = "p-1", True
    add_batch(producer, 3, prefix=b"s")
    (spooled,) = producer.queue.take_all()
    spooled.sequence_id, spooled.producer_name = 10, "p-1"  # ids kept from the last run
    producer.replay(spooled)
    assert producer.next_sequence_id == 13
    renumbered = producer.on_registered("p-1", 20)
    assert renumbered is not None and (renumbered.ours, renumbered.batches) == (12, 1)
    # Numbered by the last run, which may have written them before it stopped or crashed.
    assert renumbered.possibly_stored == [spooled]
    out = producer.frames_to_send(PUBLISH_TIME)
    assert sends(out.frames) == [(21, 23, 21, 23)]
    assert payload_values(out.frames[0]) == [b"s0", b"s1", b"s2"]


def test_spooled_ids_above_the_brokers_last_stay() -> None:
    producer = make_producer()
    producer.name, producer.name_is_ours = "p-1", True
    add_batch(producer, 2)
    (spooled,) = producer.queue.take_all()
    spooled.sequence_id, spooled.producer_name = 10, "p-1"
    producer.replay(spooled)
    assert producer.on_registered("p-1", 10) is None
    assert sends(producer.frames_to_send(PUBLISH_TIME).frames) == [(10, 11, 10, 11)]


def test_a_chunked_message_is_renumbered_from_its_kept_payload() -> None:
    producer = make_producer()
    producer.batch.append(b"", 0, b"x" * 10_000, 0, 64)
    producer.seal()
    producer.on_registered("p-1", -1)
    limit = 4000 + SEND_FRAME_OVERHEAD
    producer.frames_to_send(PUBLISH_TIME, max_frame_size=limit)
    batch: SealedBatch = producer.pending[0]
    assert batch.frames == 3 and batch.payload
    producer.on_receipt(0)  # one chunk confirmed, then the connection goes
    producer.on_disconnected()
    assert producer.on_registered("p-1", 7) is not None
    out = producer.frames_to_send(PUBLISH_TIME, max_frame_size=limit)
    chunks = [d for f in out.frames for d in FrameDecoder().feed(f)]
    assert len(chunks) == 3 and batch.frames == 3
    assert {c.command.send.sequence_id for c in chunks} == {8}
    assert all(c.metadata is not None and c.metadata.sequence_id == 8 for c in chunks)
    assert b"".join(c.payload for c in chunks) == b"x" * 10_000
    assert [producer.on_receipt(8)[0] for _ in range(3)] == [
        ReceiptMatch.CHUNK,
        ReceiptMatch.CHUNK,
        ReceiptMatch.ACKED,
    ]


def test_nothing_numbered_yet_just_continues_after_the_broker() -> None:
    producer = make_producer()
    add_batch(producer, 2)
    assert producer.on_registered("p-1", 99) is None  # a restart without a spool: normal
    out = producer.frames_to_send(PUBLISH_TIME)
    assert sends(out.frames) == [(100, 101, 100, 101)] and out.resent_messages == 0


def test_metadata_of_a_renumbered_batch_names_the_producer() -> None:
    producer = make_producer()
    add_batch(producer, 1)
    producer.on_registered("p-1", -1)
    producer.frames_to_send(PUBLISH_TIME)
    producer.on_disconnected()
    producer.on_registered("p-1", 3)
    (frame,) = producer.frames_to_send(PUBLISH_TIME).frames
    (decoded,) = FrameDecoder().feed(frame)
    assert decoded.metadata is not None and decoded.metadata.producer_name == "p-1"
    assert decoded.command.type == pb.BaseCommand.SEND
