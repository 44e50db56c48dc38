"""Chunk frames of a message larger than one frame: golden bytes, written by hand.

Fields of a chunk, as pulsar-client-java's ``ProducerImpl.sendAsync`` writes them:
``CommandSend.is_chunk`` (7), one message, no ``highest_sequence_id`` (the
message is not batched); ``MessageMetadata`` has the message's own fields
(properties 4, partition_key 6, event_time 12), ``uncompressed_size`` (9) and
``uuid`` (26) = producer name + "-" + sequence id, ``num_chunks_from_msg`` (27),
``total_chunk_msg_size`` (28), ``chunk_id`` (29).  Fields 16 and above take a
two-byte tag: ``(26 << 3) | 2`` = 210 = ``d2 01``.
"""

from __future__ import annotations

from pulsar_bruce.frame import commands
from pulsar_bruce.frame import pulsar_api_pb2 as pb
from pulsar_bruce.frame.codec import FrameDecoder

from tests.unit.daemon.frame.test_codec import crc32c_reference, wire

VALUE = b"abcdefghijklmnopqrstuvwxyz0123456789ABCD"  # 40 bytes = 0x28


def message() -> pb.SingleMessageMetadata:
    single = pb.SingleMessageMetadata(partition_key="k", payload_size=len(VALUE), event_time=7)
    single.properties.add(key="a", value="b")
    return single


def sends(max_chunk_frame: int) -> list[bytes]:
    return commands.single_message_sends(
        producer_id=3,
        producer_name="p-1",
        sequence_id=5,
        publish_time_ms=1000,
        compression=pb.NONE,
        uncompressed_size=len(VALUE),
        message=message(),
        payload=VALUE,
        max_chunk_frame=max_chunk_frame,
    )


def chunk_metadata(chunk_id: int) -> bytes:
    return wire(
        "0a 03", b"p-1",  # producer_name (1)
        "10 05",  # sequence_id (2) = 5, the same in every chunk
        "18 e8 07",  # publish_time (3) = 1000
        "22 06 0a 01 61 12 01 62",  # properties (4): {key (1) "a", value (2) "b"}
        "32 01 6b",  # partition_key (6) = "k"
        "48 28",  # uncompressed_size (9) = 40
        "60 07",  # event_time (12) = 7
        "d2 01 05", b"p-1-5",  # uuid (26)
        "d8 01 03",  # num_chunks_from_msg (27) = 3
        "e0 01 28",  # total_chunk_msg_size (28) = 40
        "e8 01", bytes([chunk_id]),  # chunk_id (29)
    )  # fmt: skip


def test_middle_chunk_golden_bytes() -> None:
    """64 bytes per frame, 50 of them metadata at its largest: chunks of 14 bytes."""
    checked = wire("0000002a", chunk_metadata(1), VALUE[14:28])  # metadataSize = 42
    expected = wire(
        "00000052",  # totalSize = 4 + 12 + 6 + 42 + 4 + 14 = 82
        "0000000c",  # commandSize = 12
        "08 06",  # type = SEND (6)
        "32 08",  # send, 8 bytes
        "08 03",  # producer_id (1) = 3
        "10 05",  # sequence_id (2) = 5
        "18 01",  # num_messages (3) = 1
        "38 01",  # is_chunk (7) = true
        "0e 01",  # magic: CRC32-C checksum follows
        "cc af 93 1e",
        checked,
    )
    assert crc32c_reference(checked) == 0xCCAF931E
    assert sends(64)[1] == expected


def test_every_chunk_carries_the_message_and_the_payload_in_order() -> None:
    frames = FrameDecoder().feed(b"".join(sends(64)))
    assert [f.metadata.chunk_id for f in frames if f.metadata] == [0, 1, 2]
    assert b"".join(f.payload for f in frames) == VALUE
    for frame in frames:
        assert frame.command.send.sequence_id == 5 and frame.command.send.is_chunk
        assert frame.metadata is not None and frame.metadata.uuid == "p-1-5"
        assert not frame.metadata.HasField("num_messages_in_batch")  # never batched


def test_a_message_that_fits_is_one_plain_non_batched_send() -> None:
    [frame] = FrameDecoder().feed(b"".join(sends(25 + len(VALUE))))  # 25 bytes of metadata
    assert not frame.command.send.is_chunk
    assert not frame.command.send.HasField("highest_sequence_id")
    assert frame.metadata is not None and not frame.metadata.HasField("uuid")
    assert frame.payload == VALUE


def test_no_frames_when_not_even_the_metadata_fits() -> None:
    assert sends(50) == []  # 50 bytes of metadata leave no room for a chunk
