"""Sender-numbered producers (producer/exactly_once.py): ids given at seal, never renumbered,
and what the broker already has taken out before the first send, wherever the earlier
attempt cut its batches."""

from __future__ import annotations

import itertools
import struct

import pytest
from pulsar_bruce.frame import pulsar_api_pb2 as pb
from pulsar_bruce.frame.codec import FrameDecoder
from pulsar_bruce.model.confirmation import Confirmation
from pulsar_bruce.producer.partition_producer import BatchPolicy, PartitionProducer

TOPIC = "persistent://public/default/t-partition-1"
NAME = "spark-job-7"
PUBLISH_TIME = 1_700_000_000_000


def sequenced(first_id: int = 0, policy: BatchPolicy | None = None) -> PartitionProducer:
    producer = PartitionProducer(TOPIC, 1, 9, policy or BatchPolicy())
    producer.publish_as(NAME, first_id)
    return producer


def add(producer: PartitionProducer, values: range, tag: Confirmation | None = None) -> None:
    """Append one message per value (``b"v<n>"``) and seal them as one batch."""
    for value in values:
        producer.batch.append(b"", 0, b"v%d" % value, 0, 64)
        if tag is not None:
            tag.outstanding += 1
            producer.batch.tag_last(tag)
    producer.seal()


def sent_ids_and_values(frames: list[bytes]) -> list[tuple[int, int, list[bytes]]]:
    """(sequence_id, highest_sequence_id, values) of each Send frame."""
    out = []
    for frame in FrameDecoder().feed(b"".join(frames)):
        assert frame.command.type == pb.BaseCommand.SEND and frame.metadata is not None
        values, payload, offset = [], frame.payload, 0
        while offset < len(payload):
            (size,) = struct.unpack_from(">I", payload, offset)
            single = pb.SingleMessageMetadata.FromString(payload[offset + 4 : offset + 4 + size])
            offset += 4 + size
            values.append(payload[offset : offset + single.payload_size])
            offset += single.payload_size
        send = frame.command.send
        out.append((send.sequence_id, send.highest_sequence_id, values))
        assert frame.metadata.producer_name == NAME
        assert frame.metadata.sequence_id == send.sequence_id
    return out


def test_ids_are_given_at_seal_in_message_order_from_the_senders_first_id() -> None:
    producer = sequenced(first_id=5 << 32)
    add(producer, range(3))
    add(producer, range(3, 5))
    assert [(b.sequence_id, b.highest_sequence_id) for b in producer.pending] == [
        ((5 << 32), (5 << 32) + 2),
        ((5 << 32) + 3, (5 << 32) + 4),
    ]
    assert producer.next_sequence_id == (5 << 32) + 5


def test_registration_never_renumbers_even_when_the_broker_is_past_our_ids() -> None:
    producer = sequenced()
    add(producer, range(4))
    assert producer.on_registered(NAME, 1_000) is None
    assert producer.pending[0].sequence_id == 0  # the sender's ids stay
    assert [s for s, _, _ in sent_ids_and_values(producer.frames_to_send(PUBLISH_TIME).frames)] == [
        0]  # fmt: skip


@pytest.mark.parametrize(
    ("stored_up_to", "expected_sent"),
    [
        (-1, [(0, 3), (4, 5)]),
        (3, [(0, 3), (4, 5)]),  # the first batch whole: the broker answers for it
        (1, [(0, 1), (2, 3), (4, 5)]),  # straddled: cut where the broker's ids end
        (4, [(0, 3), (4, 4), (5, 5)]),
        (9, [(0, 3), (4, 5)]),  # everything
    ],
)
def test_a_batch_straddling_the_brokers_last_id_is_cut_there_and_all_is_sent(
    stored_up_to: int, expected_sent: list[tuple[int, int]]
) -> None:
    """The broker judges a batch by its lowest id: a batch straddling its last id is cut
    there, so the new messages are not dropped with the ones it has.  What it has is sent
    all the same and the broker answers for it: its last id is the highest pushed, which a
    failed write can still take back (issue 29, point 5)."""
    producer = sequenced()
    tag = Confirmation(lambda: None)
    add(producer, range(4), tag)
    add(producer, range(4, 6), tag)
    producer.on_registered(NAME, stored_up_to)
    out = producer.frames_to_send(PUBLISH_TIME)
    sent = sent_ids_and_values(out.frames)
    assert [(s, h) for s, h, _ in sent] == expected_sent
    assert [v for _, _, values in sent for v in values] == [b"v%d" % n for n in range(6)]
    assert sum(b.buffer_bytes for b in out.batches) == 6 * 64  # the charge is split, not lost
    assert producer.in_flight == len(out.batches) == len(producer.pending)
    producer.check()


def test_a_batch_already_written_goes_again_whole_after_a_reconnect() -> None:
    producer = sequenced()
    add(producer, range(4))
    producer.on_registered(NAME, -1)
    first = producer.frames_to_send(PUBLISH_TIME)
    producer.on_disconnected()
    producer.on_registered(NAME, 3)  # the broker stored it; its receipt was lost
    again = producer.frames_to_send(PUBLISH_TIME)
    assert again.frames == first.frames
    assert again.resent_messages == 4  # broker deduplication answers it as a duplicate


def test_a_split_batch_keeps_each_messages_id() -> None:
    producer = sequenced(policy=BatchPolicy(max_bytes=1 << 20))
    for value in range(10):
        producer.batch.append(b"", 0, bytes([value]) * 3000, 0, 3000)
    producer.seal()
    producer.on_registered(NAME, -1, max_message_size=16 * 1024)
    out = producer.frames_to_send(PUBLISH_TIME, max_frame_size=16 * 1024)
    ranges = [(s, h) for s, h, _ in sent_ids_and_values(out.frames)]
    assert len(ranges) > 1
    assert ranges[0][0] == 0 and ranges[-1][1] == 9
    assert all(later[0] == earlier[1] + 1 for earlier, later in itertools.pairwise(ranges))


def test_the_daemons_own_producers_still_number_at_send_time() -> None:
    producer = PartitionProducer(TOPIC, 1, 9, BatchPolicy())
    add(producer, range(2))
    assert producer.pending[0].sequence_id == -1
    assert not producer.exactly_once
