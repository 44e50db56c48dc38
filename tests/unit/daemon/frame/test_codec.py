"""Pulsar framing (``frame/codec.py``): the size prefixes and checksum of every frame, payload
frames, streaming, and arbitrary input (the commands decoded: test_broker_commands.py).

Expected bytes are written by hand from the Pulsar binary protocol::

    simple frame:  [totalSize u32][commandSize u32][BaseCommand]
    payload frame: [totalSize u32][commandSize u32][BaseCommand]
                   [magic 0x0e01 u16][crc32c u32][metadataSize u32][MessageMetadata][payload]

and the protobuf encoding rules: a field's tag is the varint ``(field_number << 3) |
wire_type`` (0 = varint, 2 = length-delimited), varints are base-128 little-endian
groups with the high bit as "more follows", negative int32/int64 are 10-byte varints.
Field numbers are those of upstream PulsarApi.proto (see proto/pulsar_api.proto).
"""

from __future__ import annotations

import contextlib
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pulsar_bruce.frame import commands
from pulsar_bruce.frame import pulsar_api_pb2 as pb
from pulsar_bruce.frame.codec import (
    DEFAULT_MAX_MESSAGE_SIZE,
    FRAME_OVERHEAD_ALLOWANCE,
    Frame,
    FrameDecoder,
    FrameError,
    decode_frame_body,
    encode_command,
    encode_payload_command,
)

from tests.unit.daemon.frame.helpers import SEND_METADATA, crc32c_reference, decode_one, wire

# -- the CRC reference itself ---------------------------------------------------------------


def test_crc32c_reference_matches_known_check_value() -> None:
    assert crc32c_reference(b"123456789") == 0xE3069283


def test_crc32c_reference_of_empty_input_is_zero() -> None:
    assert crc32c_reference(b"") == 0


# -- framing ---------------------------------------------------------------------------------


def test_encode_command_prefixes_sizes() -> None:
    command = pb.BaseCommand(type=pb.BaseCommand.SUCCESS)
    command.success.request_id = 1
    assert encode_command(command) == wire("0000000a 00000006 080d 6a02 0801")


def test_encode_payload_command_with_empty_metadata_and_payload() -> None:
    command = pb.BaseCommand(type=pb.BaseCommand.SEND)
    command.send.producer_id = 0
    command.send.sequence_id = 0
    expected = wire(
        "00000016",  # totalSize = 4 + 8 + 2 + 4 + 4 = 22
        "00000008",  # commandSize = 8
        "08 06 32 04 08 00 10 00",  # type SEND, send { producer_id 0, sequence_id 0 }
        "0e 01",  # magic
        "48 67 4b c7",  # crc32c(00 00 00 00)
        "00000000",  # metadataSize = 0
    )
    assert crc32c_reference(bytes(4)) == 0x48674BC7
    assert encode_payload_command(command, b"", b"") == expected


# -- payload frames -----------------------------------------------------------------------------

RECEIVED_METADATA = wire(
    "0a 01",  # producer_name (1), 1 byte
    b"p",
    "10 07",  # sequence_id (2) = 7
    "18 e8 07",  # publish_time (3) = 1000
)  # 8 bytes

MESSAGE_COMMAND = wire("08 09", "4a 06", "08 01 12 02 08 00")  # MESSAGE, 10 bytes


def payload_frame(command: bytes, metadata: bytes, payload: bytes, prefix: bytes = b"") -> bytes:
    """A payload frame assembled from the spec, with the reference CRC."""
    checked = struct.pack(">I", len(metadata)) + metadata + payload
    rest = prefix + struct.pack(">HI", 0x0E01, crc32c_reference(checked)) + checked
    return struct.pack(">II", 4 + len(command) + len(rest), len(command)) + command + rest


def test_decode_payload_frame() -> None:
    frame = decode_one(payload_frame(MESSAGE_COMMAND, RECEIVED_METADATA, b"hi"))
    assert frame.command.type == pb.BaseCommand.MESSAGE
    assert frame.metadata is not None
    assert frame.metadata.producer_name == "p"
    assert frame.metadata.sequence_id == 7
    assert frame.metadata.publish_time == 1000
    assert frame.payload == b"hi"


def test_decode_payload_frame_with_broker_entry_metadata() -> None:
    broker_entry = wire(
        "0e 02",  # magic: broker entry metadata follows
        "00000004",  # its size = 4
        "08 2a",  # BrokerEntryMetadata.broker_timestamp (1) = 42
        "10 03",  # BrokerEntryMetadata.index (2) = 3
    )
    data = payload_frame(MESSAGE_COMMAND, RECEIVED_METADATA, b"hi", prefix=broker_entry)
    frame = decode_one(data)
    assert frame.metadata is not None
    assert frame.metadata.sequence_id == 7
    assert frame.payload == b"hi"


def test_decode_our_own_send_frame_round_trips() -> None:
    frame = decode_one(
        commands.send(
            producer_id=3,
            sequence_id=5,
            highest_sequence_id=6,
            num_messages=2,
            metadata=SEND_METADATA,
            payload=b"abc",
        )
    )
    assert frame.command.send.sequence_id == 5
    assert frame.command.send.highest_sequence_id == 6
    assert frame.metadata is not None
    assert frame.metadata.num_messages_in_batch == 2
    assert frame.payload == b"abc"


def test_bad_checksum_raises_frame_error() -> None:
    data = bytearray(payload_frame(MESSAGE_COMMAND, RECEIVED_METADATA, b"hi"))
    data[-1] ^= 0x01  # corrupt the payload, keep the checksum
    with pytest.raises(FrameError):
        FrameDecoder().feed(bytes(data))


def test_corrupt_checksum_field_raises_frame_error() -> None:
    data = bytearray(payload_frame(MESSAGE_COMMAND, RECEIVED_METADATA, b"hi"))
    data[8 + len(MESSAGE_COMMAND) + 2] ^= 0x80  # first byte of the crc32c field
    with pytest.raises(FrameError):
        FrameDecoder().feed(bytes(data))


def test_bad_payload_magic_raises_frame_error() -> None:
    data = bytearray(payload_frame(MESSAGE_COMMAND, RECEIVED_METADATA, b"hi"))
    data[8 + len(MESSAGE_COMMAND) + 1] = 0x03  # 0x0e03
    with pytest.raises(FrameError):
        FrameDecoder().feed(bytes(data))


def test_metadata_size_past_the_end_raises_frame_error() -> None:
    checked = struct.pack(">I", 100) + b"xx"
    rest = struct.pack(">HI", 0x0E01, crc32c_reference(checked)) + checked
    data = struct.pack(">II", 4 + len(MESSAGE_COMMAND) + len(rest), len(MESSAGE_COMMAND))
    with pytest.raises(FrameError):
        FrameDecoder().feed(data + MESSAGE_COMMAND + rest)


def test_command_size_past_the_end_raises_frame_error() -> None:
    with pytest.raises(FrameError):
        FrameDecoder().feed(wire("00000006 00000009 0812"))


def test_undecodable_command_raises_frame_error() -> None:
    # A length-delimited field claiming 100 bytes inside a 2-byte command.
    with pytest.raises(FrameError):
        FrameDecoder().feed(wire("00000006 00000002 0a64"))


def test_frame_size_below_four_raises_frame_error() -> None:
    with pytest.raises(FrameError):
        FrameDecoder().feed(wire("00000003 000000"))


def test_decode_frame_body_rejects_a_body_shorter_than_its_size_field() -> None:
    with pytest.raises(FrameError):
        decode_frame_body(b"\x00\x00")


# -- FrameDecoder streaming -------------------------------------------------------------------


def test_partial_frame_fed_byte_by_byte() -> None:
    data = payload_frame(MESSAGE_COMMAND, RECEIVED_METADATA, b"payload")
    decoder = FrameDecoder()
    for byte in data[:-1]:
        assert decoder.feed(bytes([byte])) == []
    frames = decoder.feed(data[-1:])
    assert len(frames) == 1
    assert frames[0].payload == b"payload"


def test_several_frames_in_one_feed() -> None:
    data = commands.ping() + commands.pong() + commands.close_producer(1, 2)
    frames = FrameDecoder().feed(data)
    assert [f.command.type for f in frames] == [
        pb.BaseCommand.PING,
        pb.BaseCommand.PONG,
        pb.BaseCommand.CLOSE_PRODUCER,
    ]


def test_frames_split_across_feeds_at_every_offset() -> None:
    data = (
        commands.ping()
        + payload_frame(MESSAGE_COMMAND, RECEIVED_METADATA, b"x")
        + (commands.pong())
    )
    for cut in range(len(data) + 1):
        decoder = FrameDecoder()
        frames = decoder.feed(data[:cut]) + decoder.feed(data[cut:])
        assert [f.command.type for f in frames] == [
            pb.BaseCommand.PING,
            pb.BaseCommand.MESSAGE,
            pb.BaseCommand.PONG,
        ]


def test_trailing_partial_frame_is_kept_for_the_next_feed() -> None:
    ping = commands.ping()
    decoder = FrameDecoder()
    assert len(decoder.feed(ping + ping[:3])) == 1
    assert len(decoder.feed(ping[3:])) == 1


def test_default_max_frame_size_allows_the_default_message_size() -> None:
    assert FrameDecoder().max_frame_size == DEFAULT_MAX_MESSAGE_SIZE + FRAME_OVERHEAD_ALLOWANCE


def test_frame_larger_than_max_frame_size_raises_frame_error() -> None:
    decoder = FrameDecoder(max_frame_size=100)
    with pytest.raises(FrameError):
        decoder.feed(struct.pack(">I", 101))  # rejected from the size field alone


def test_frame_of_exactly_max_frame_size_is_accepted() -> None:
    ping = commands.ping()
    decoder = FrameDecoder(max_frame_size=len(ping) - 4)
    assert len(decoder.feed(ping)) == 1


# -- robustness ------------------------------------------------------------------------------


@settings(max_examples=500, deadline=None, derandomize=True)
@given(st.binary(max_size=256))
def test_arbitrary_bytes_yield_frames_or_frame_error(data: bytes) -> None:
    try:
        frames = FrameDecoder(max_frame_size=4096).feed(data)
    except FrameError:
        return
    assert all(isinstance(f, Frame) for f in frames)


@settings(max_examples=500, deadline=None, derandomize=True)
@given(st.binary(max_size=200), st.binary(max_size=64))
def test_well_sized_frames_with_arbitrary_bodies_yield_frames_or_frame_error(
    body: bytes, tail: bytes
) -> None:
    data = struct.pack(">I", len(body)) + body + tail
    with contextlib.suppress(FrameError):
        FrameDecoder().feed(data)


@settings(max_examples=500, deadline=None, derandomize=True)
@given(
    st.binary(max_size=40),
    st.binary(max_size=60),
    st.binary(max_size=20),
    st.binary(max_size=20),
    st.booleans(),
)
def test_payload_frames_with_arbitrary_contents_yield_frames_or_frame_error(
    command: bytes, metadata: bytes, payload: bytes, broker_entry: bytes, with_entry: bool
) -> None:
    prefix = struct.pack(">HI", 0x0E02, len(broker_entry)) + broker_entry if with_entry else b""
    data = payload_frame(command, metadata, payload, prefix)
    with contextlib.suppress(FrameError):
        FrameDecoder().feed(data)
