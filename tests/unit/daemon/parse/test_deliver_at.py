"""Delayed delivery from the Message record to the Send frame: parsed the same by both
parsers, "after" made "at" on the intake's clock, never batched, and carried in the
frame's ``deliver_at_time`` (its private entry field never reaches a broker)."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest
from pulsar_bruce import reasons
from pulsar_bruce.frame import pulsar_api_pb2 as pb
from pulsar_bruce.frame.codec import FrameDecoder
from pulsar_bruce.native import compiled
from pulsar_bruce.parse.datagram import parse_datagram_py
from pulsar_bruce.parse.deliver_at import (
    deliver_after_field,
    deliver_at_field,
    is_delayed,
    resolve_after,
    take_deliver_at,
)
from pulsar_bruce.producer.partition_producer import PartitionProducer
from pulsar_bruce.spool import records
from to_pulsar.encoding import InvalidMessageError, encode_message_record

from tests.unit.daemon.route.intake_harness import Harness, T

AT = 1_800_000_000_000

#: A Message record with DeliverAfter 5000 and one property, byte by byte.
GOLDEN = (
    b"\x00\x00\x00\x37\x01\x04\x00\x00"  # Size 55, ApiKey 260, ApiVersion 0
    b"\x00\x04\x00\x00\x00\x00\x00\x01t"  # Flags 0x0004, PartitionKey 0, TopicSize 1, "t"
    b"\x00\x00\x00\x00\x00\x00\x00\x07"  # Timestamp 7
    b"\x00\x00\x00\x00\x00\x00\x13\x88"  # DeliverAfter 5000
    b"\x00\x00\x00\x01k"  # KeySize 1, "k"
    b"\x00\x01\x00\x01a\x00\x00\x00\x01b"  # one property: a=b
    b"\x00\x00\x00\x03val"  # ValueSize 3, "val"
)


def parsers() -> list[object]:
    return [parse_datagram_py] + ([compiled.parse_datagram] if compiled is not None else [])


def test_golden_bytes_and_both_parsers() -> None:
    record = encode_message_record("t", b"val", b"k", 7, None, {"a": "b"}, None, 5000)
    assert record == GOLDEN
    for parse in parsers():
        topic, partition_key, timestamp, key, value_offset, fields = parse(record)  # type: ignore[operator]
        assert (topic, partition_key, timestamp, key) == (b"t", -1, 7, b"k")
        assert record[value_offset:] == b"val"
        assert fields.startswith(deliver_after_field(5000)) and is_delayed(fields)


@pytest.mark.parametrize(
    "record",
    [
        GOLDEN[:8] + b"\x00\x06" + GOLDEN[10:],  # both DeliverAt and DeliverAfter
        GOLDEN[:8] + b"\x00\x08" + GOLDEN[10:],  # an unknown flag
        encode_message_record("t", b"v", deliver_after_ms=1)[:-13] + b"",  # cut short
    ],
)
def test_malformed_delivery_times(record: bytes) -> None:
    record = struct.pack(">i", len(record)) + record[4:]
    for parse in parsers():
        assert parse(record) == reasons.MALFORMED  # type: ignore[operator]


def test_the_client_refuses_what_the_daemon_would() -> None:
    with pytest.raises(InvalidMessageError, match="not both"):
        encode_message_record("t", b"v", deliver_at_ms=AT, deliver_after_ms=1)
    with pytest.raises(InvalidMessageError):
        encode_message_record("t", b"v", deliver_at_ms=0)
    with pytest.raises(InvalidMessageError):
        encode_message_record("t", b"v", deliver_after_ms=-1)


def test_after_becomes_at_on_the_clock_and_framing_takes_it_out() -> None:
    fields = resolve_after(deliver_after_field(5000) + b"\x0a\x00", 1_000)
    assert fields == deliver_at_field(6000) + b"\x0a\x00"
    assert take_deliver_at(fields) == (6000, b"\x0a\x00")
    assert take_deliver_at(b"\x0a\x00") == (0, b"\x0a\x00")
    assert resolve_after(b"\x0a\x00", 1_000) == b"\x0a\x00"


def test_a_delayed_message_is_a_batch_of_its_own_framed_with_deliver_at_time() -> None:
    h = Harness()
    h.intake.clock_ms = lambda: AT
    h.send(encode_message_record(T, b"before", timestamp_ms=1))
    h.send(encode_message_record(T, b"later", timestamp_ms=1, deliver_after_ms=60_000))
    h.send(encode_message_record(T, b"at", timestamp_ms=1, deliver_at_ms=AT + 5))
    h.send(encode_message_record(T, b"after", timestamp_ms=1))
    (producer,) = h.attach()
    producer.seal()
    assert [batch.count for batch in producer.pending] == [1, 1, 1, 1]
    frames = sent(producer)
    assert [(m.deliver_at_time, payload) for m, payload in frames] == [
        (0, None), (AT + 60_000, b"later"), (AT + 5, b"at"), (0, None)]  # fmt: skip


def test_delayed_messages_seal_the_batch_before_them() -> None:
    h = Harness()
    h.send(encode_message_record(T, b"a", timestamp_ms=1))
    (producer,) = h.attach()
    h.send(encode_message_record(T, b"b", timestamp_ms=1))
    h.send(encode_message_record(T, b"d", timestamp_ms=1, deliver_at_ms=AT))
    h.send(encode_message_record(T, b"c", timestamp_ms=1))
    assert [batch.count for batch in producer.pending] == [2, 1]
    assert producer.batch.count == 1


def sent(producer: PartitionProducer) -> list[tuple[pb.MessageMetadata, bytes | None]]:
    """Each Send frame's metadata, with the payload of non-batched ones."""
    producer.on_registered("p", -1)
    out = producer.frames_to_send(0)
    frames = FrameDecoder().feed(b"".join(out.frames))
    result = []
    for frame in frames:
        assert frame.metadata is not None
        single = not frame.metadata.HasField("num_messages_in_batch")
        result.append((frame.metadata, frame.payload if single else None))
    return result


def test_a_waiting_delayed_message_keeps_its_delivery_time_when_replayed() -> None:
    """A DeliverAfter message that waits for its topic's partition count is kept (for the
    journal and the spool) as a datagram with its DeliverAt: parsed again by the next run,
    half a minute later, it is still due when it was first (issue 29, point 6)."""
    h = Harness()
    h.intake.clock_ms = lambda: AT
    h.send(encode_message_record(T, b"later", timestamp_ms=1, deliver_after_ms=60_000))
    (waiting,) = h.topic().unrouted
    again = Harness()
    again.intake.clock_ms = lambda: AT + 30_000
    again.intake.replay_datagram(waiting.data, previous_run=True)
    (producer,) = again.attach()
    producer.seal()
    assert [(m.deliver_at_time, payload) for m, payload in sent(producer)] == [
        (AT + 60_000, b"later")]  # fmt: skip


def test_a_spilled_delayed_message_keeps_its_delivery_time(tmp_path: Path) -> None:
    """The same for a message spilled to the spool when memory is full."""
    h = Harness(buffer_max_bytes=1, spool_dir=tmp_path)
    h.intake.clock_ms = lambda: AT
    h.send(encode_message_record(T, b"later", timestamp_ms=1, deliver_after_ms=60_000))
    assert h.ledger.spooled_messages == 1
    h.write_held()
    ((kind, datagram),) = records.iter_records(b"".join(p.read_bytes() for p in tmp_path.iterdir()))
    assert kind == records.DATAGRAM
    fields = parse_datagram_py(datagram)[5]  # type: ignore[index]
    assert fields.startswith(deliver_at_field(AT + 60_000))
