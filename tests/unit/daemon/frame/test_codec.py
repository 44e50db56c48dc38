"""Pulsar framing: golden bytes for every frame we encode and every command we decode.

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
from pulsar_bruce import __version__
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

TOPIC = b"persistent://public/default/t"  # 29 bytes = 0x1d
assert len(TOPIC) == 0x1D


def wire(*parts: str | bytes) -> bytes:
    """Hex strings (spaces allowed) and raw byte strings, concatenated."""
    return b"".join(bytes.fromhex(p) if isinstance(p, str) else p for p in parts)


def crc32c_reference(data: bytes) -> int:
    """Bitwise CRC-32C (Castagnoli, reflected polynomial 0x82F63B78), written from the spec."""
    crc = 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


def decode_one(data: bytes) -> Frame:
    frames = FrameDecoder().feed(data)
    assert len(frames) == 1
    return frames[0]


# -- the CRC reference itself ---------------------------------------------------------------


def test_crc32c_reference_matches_known_check_value() -> None:
    assert crc32c_reference(b"123456789") == 0xE3069283


def test_crc32c_reference_of_empty_input_is_zero() -> None:
    assert crc32c_reference(b"") == 0


# -- golden encodings ---------------------------------------------------------------------------


def test_client_version_names_the_package_version() -> None:
    assert f"pulsar-bruce-{__version__}" == commands.CLIENT_VERSION
    assert commands.PROTOCOL_VERSION == 20


def test_connect_golden_bytes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(commands, "CLIENT_VERSION", "pulsar-bruce-test")  # 17 bytes
    expected = wire(
        "00000021",  # totalSize = 33 (commandSize field + command)
        "0000001d",  # commandSize = 29
        "08 02",  # BaseCommand.type (1, varint) = CONNECT (2)
        "12 19",  # BaseCommand.connect (2, length-delimited), 25 bytes
        "0a 11",  # CommandConnect.client_version (1, string), 17 bytes
        b"pulsar-bruce-test",
        "20 14",  # CommandConnect.protocol_version (4, varint) = 20 (v20)
        "52 02",  # CommandConnect.feature_flags (10, length-delimited), 2 bytes
        "08 01",  # FeatureFlags.supports_auth_refresh (1, bool) = true
    )
    assert commands.connect() == expected


def test_connect_with_proxy_and_auth_golden_bytes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(commands, "CLIENT_VERSION", "v")
    expected = wire(
        "00000026",  # totalSize = 38
        "00000022",  # commandSize = 34
        "08 02",  # type = CONNECT
        "12 1e",  # connect, 30 bytes
        "0a 01",  # client_version (1), 1 byte
        b"v",
        "1a 02",  # auth_data (3, bytes), 2 bytes
        b"tk",
        "20 14",  # protocol_version (4) = 20
        "2a 05",  # auth_method_name (5, string), 5 bytes
        b"token",
        "32 08",  # proxy_to_broker_url (6, string), 8 bytes
        b"pulsar:/",
        "52 02 08 01",  # feature_flags (10) { supports_auth_refresh = true }
    )
    frame = commands.connect(
        proxy_to_broker_url="pulsar:/", auth_method_name="token", auth_data=b"tk"
    )
    assert frame == expected


def test_ping_golden_bytes() -> None:
    expected = wire(
        "00000009",  # totalSize = 9
        "00000005",  # commandSize = 5
        "08 12",  # type = PING (18)
        "92 01 00",  # BaseCommand.ping: tag (18 << 3 | 2 = 146 -> varint 92 01), empty
    )
    assert commands.ping() == expected


def test_pong_golden_bytes() -> None:
    expected = wire(
        "00000009",  # totalSize = 9
        "00000005",  # commandSize = 5
        "08 13",  # type = PONG (19)
        "9a 01 00",  # BaseCommand.pong: tag (19 << 3 | 2 = 154 -> 9a 01), empty
    )
    assert commands.pong() == expected


def test_partitioned_metadata_golden_bytes() -> None:
    expected = wire(
        "0000002a",  # totalSize = 42
        "00000026",  # commandSize = 38
        "08 15",  # type = PARTITIONED_METADATA (21)
        "aa 01 21",  # partitionMetadata: tag (21 << 3 | 2 = 170 -> aa 01), 33 bytes
        "0a 1d",  # topic (1, string), 29 bytes
        TOPIC,
        "10 07",  # request_id (2, varint) = 7
    )
    assert commands.partitioned_metadata(TOPIC.decode(), 7) == expected


def test_lookup_authoritative_golden_bytes() -> None:
    expected = wire(
        "0000002c",  # totalSize = 44
        "00000028",  # commandSize = 40
        "08 17",  # type = LOOKUP (23)
        "ba 01 23",  # lookupTopic: tag (23 << 3 | 2 = 186 -> ba 01), 35 bytes
        "0a 1d",  # topic (1), 29 bytes
        TOPIC,
        "10 08",  # request_id (2) = 8
        "18 01",  # authoritative (3, bool) = true
    )
    assert commands.lookup(TOPIC.decode(), 8, True) == expected


def test_lookup_not_authoritative_still_writes_the_field() -> None:
    expected = wire(
        "0000002c",  # totalSize = 44
        "00000028",  # commandSize = 40
        "08 17",  # type = LOOKUP
        "ba 01 23",  # lookupTopic, 35 bytes
        "0a 1d",  # topic
        TOPIC,
        "10 08",  # request_id = 8
        "18 00",  # authoritative = false (explicitly set, so present in proto2)
    )
    assert commands.lookup(TOPIC.decode(), 8, False) == expected


def test_lookup_naming_an_advertised_listener_golden_bytes() -> None:
    expected = wire(
        "00000036",  # totalSize = 54
        "00000032",  # commandSize = 50
        "08 17",  # type = LOOKUP
        "ba 01 2d",  # lookupTopic, 45 bytes
        "0a 1d",  # topic
        TOPIC,
        "10 08",  # request_id = 8
        "18 01",  # authoritative = true
        "3a 08",  # advertised_listener_name (7, string), 8 bytes
        b"internal",
    )
    assert commands.lookup(TOPIC.decode(), 8, True, "internal") == expected


def test_producer_without_name_golden_bytes() -> None:
    expected = wire(
        "0000002b",  # totalSize = 43
        "00000027",  # commandSize = 39
        "08 05",  # type = PRODUCER (5)
        "2a 23",  # producer (5, length-delimited), 35 bytes
        "0a 1d",  # topic (1), 29 bytes
        TOPIC,
        "10 03",  # producer_id (2) = 3
        "18 09",  # request_id (3) = 9
    )
    assert commands.producer(TOPIC.decode(), 3, 9, None) == expected


def test_producer_with_empty_name_sends_no_name() -> None:
    assert commands.producer(TOPIC.decode(), 3, 9, "") == commands.producer(
        TOPIC.decode(), 3, 9, None
    )


def test_producer_with_name_golden_bytes() -> None:
    expected = wire(
        "00000032",  # totalSize = 50
        "0000002e",  # commandSize = 46
        "08 05",  # type = PRODUCER
        "2a 2a",  # producer, 42 bytes
        "0a 1d",  # topic (1), 29 bytes
        TOPIC,
        "10 03",  # producer_id (2) = 3
        "18 09",  # request_id (3) = 9
        "22 03",  # producer_name (4, string), 3 bytes
        b"p-1",
        "48 00",  # user_provided_producer_name (9) = false: the broker assigned it
    )
    assert commands.producer(TOPIC.decode(), 3, 9, "p-1") == expected


def test_producer_recreation_carries_its_epoch() -> None:
    expected = wire(
        "00000034",  # totalSize = 52
        "00000030",  # commandSize = 48
        "08 05",  # type = PRODUCER
        "2a 2c",  # producer, 44 bytes
        "0a 1d",  # topic (1), 29 bytes
        TOPIC,
        "10 03",  # producer_id (2) = 3
        "18 09",  # request_id (3) = 9
        "22 03",  # producer_name (4, string), 3 bytes
        b"p-1",
        "40 02",  # epoch (8) = 2
        "48 00",  # user_provided_producer_name (9) = false
    )
    assert commands.producer(TOPIC.decode(), 3, 9, "p-1", epoch=2) == expected


def test_producer_with_large_ids_uses_multi_byte_varints() -> None:
    expected = wire(
        "00000033",  # totalSize = 51
        "0000002f",  # commandSize = 47
        "08 05",  # type = PRODUCER
        "2a 2b",  # producer, 43 bytes
        "0a 1d",  # topic
        TOPIC,
        "10 ac 02",  # producer_id = 300 (0b10_0101100 -> ac 02)
        "18 80 80 01",  # request_id = 16384 (2**14 -> 80 80 01)
        "22 01",  # producer_name, 1 byte
        b"n",
        "48 00",  # user_provided_producer_name = false
    )
    assert commands.producer(TOPIC.decode(), 300, 16384, "n") == expected


def test_close_producer_golden_bytes() -> None:
    expected = wire(
        "0000000c",  # totalSize = 12
        "00000008",  # commandSize = 8
        "08 0f",  # type = CLOSE_PRODUCER (15)
        "7a 04",  # close_producer (15 << 3 | 2 = 122), 4 bytes
        "08 03",  # producer_id (1) = 3
        "10 0a",  # request_id (2) = 10
    )
    assert commands.close_producer(3, 10) == expected


def test_batch_metadata_uncompressed_golden_bytes() -> None:
    expected = wire(
        "0a 03",  # producer_name (1, string), 3 bytes
        b"p-1",
        "10 05",  # sequence_id (2) = 5
        "18 e8 07",  # publish_time (3) = 1000 (0x3e8 -> e8 07)
        "58 02",  # num_messages_in_batch (11 << 3 = 88 = 0x58) = 2
        "c0 01 06",  # highest_sequence_id (24 << 3 = 192 -> c0 01) = 6
    )
    metadata = commands.batch_metadata(
        producer_name="p-1",
        sequence_id=5,
        highest_sequence_id=6,
        publish_time_ms=1000,
        num_messages=2,
        compression=pb.NONE,
        uncompressed_size=3,
    )
    assert metadata == expected


def test_batch_metadata_compressed_golden_bytes() -> None:
    expected = wire(
        "0a 03",  # producer_name (1), 3 bytes
        b"p-1",
        "10 05",  # sequence_id (2) = 5
        "18 e8 07",  # publish_time (3) = 1000
        "40 01",  # compression (8, enum) = LZ4 (1)
        "48 15",  # uncompressed_size (9) = 21
        "58 02",  # num_messages_in_batch (11) = 2
        "c0 01 06",  # highest_sequence_id (24) = 6
    )
    metadata = commands.batch_metadata(
        producer_name="p-1",
        sequence_id=5,
        highest_sequence_id=6,
        publish_time_ms=1000,
        num_messages=2,
        compression=pb.LZ4,
        uncompressed_size=21,
    )
    assert metadata == expected


SEND_METADATA = wire(
    "0a 03",  # producer_name (1), 3 bytes
    b"p-1",
    "10 05",  # sequence_id (2) = 5
    "18 e8 07",  # publish_time (3) = 1000
    "58 02",  # num_messages_in_batch (11) = 2
    "c0 01 06",  # highest_sequence_id (24) = 6
)  # 15 bytes


def test_send_with_batch_metadata_golden_bytes() -> None:
    checked = wire(
        "0000000f",  # metadataSize = 15
        SEND_METADATA,
        b"abc",  # payload
    )
    expected = wire(
        "0000002c",  # totalSize = 4 + 12 + 2 + 4 + 4 + 15 + 3 = 44
        "0000000c",  # commandSize = 12
        "08 06",  # type = SEND (6)
        "32 08",  # send (6 << 3 | 2 = 50), 8 bytes
        "08 03",  # producer_id (1) = 3
        "10 05",  # sequence_id (2) = 5
        "18 02",  # num_messages (3) = 2
        "30 06",  # highest_sequence_id (6) = 6
        "0e 01",  # magic: CRC32-C checksum follows
        "e0 51 07 f9",  # crc32c of metadataSize + metadata + payload
        checked,
    )
    assert crc32c_reference(checked) == 0xE05107F9
    metadata = commands.batch_metadata(
        producer_name="p-1",
        sequence_id=5,
        highest_sequence_id=6,
        publish_time_ms=1000,
        num_messages=2,
        compression=pb.NONE,
        uncompressed_size=3,
    )
    frame = commands.send(
        producer_id=3,
        sequence_id=5,
        highest_sequence_id=6,
        num_messages=2,
        metadata=metadata,
        payload=b"abc",
    )
    assert frame == expected


def test_send_checksum_matches_reference_for_a_large_payload() -> None:
    payload = bytes(range(256)) * 300
    frame = commands.send(
        producer_id=1,
        sequence_id=0,
        highest_sequence_id=0,
        num_messages=1,
        metadata=SEND_METADATA,
        payload=payload,
    )
    (total, command_size) = struct.unpack_from(">II", frame, 0)
    assert total == len(frame) - 4
    magic_at = 8 + command_size
    magic, checksum = struct.unpack_from(">HI", frame, magic_at)
    assert magic == 0x0E01
    checked = frame[magic_at + 6 :]
    assert checked == struct.pack(">I", len(SEND_METADATA)) + SEND_METADATA + payload
    assert checksum == crc32c_reference(checked)


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


# -- golden decodings ---------------------------------------------------------------------------


def test_decode_connected_with_max_message_size() -> None:
    data = wire(
        "0000001e",  # totalSize = 30
        "0000001a",  # commandSize = 26
        "08 03",  # type = CONNECTED (3)
        "1a 16",  # connected (3, length-delimited), 22 bytes
        "0a 0d",  # server_version (1), 13 bytes
        b"Pulsar Server",
        "10 14",  # protocol_version (2) = 20
        "18 80 80 c0 02",  # max_message_size (3) = 5 MiB = 5242880
    )
    frame = decode_one(data)
    assert frame.command.type == pb.BaseCommand.CONNECTED
    connected = frame.command.connected
    assert connected.server_version == "Pulsar Server"
    assert connected.protocol_version == 20
    assert connected.HasField("max_message_size")
    assert connected.max_message_size == 5 * 1024 * 1024
    assert frame.metadata is None
    assert frame.payload == b""


def test_decode_connected_without_max_message_size() -> None:
    data = wire("0000000d 00000009", "08 03", "1a 05", "0a 03", b"2.0")
    connected = decode_one(data).command.connected
    assert connected.server_version == "2.0"
    assert not connected.HasField("max_message_size")


def test_decode_ping() -> None:
    frame = decode_one(wire("00000009 00000005", "08 12", "92 01 00"))
    assert frame.command.type == pb.BaseCommand.PING
    assert frame.command.HasField("ping")


def test_decode_ping_without_its_empty_submessage() -> None:
    frame = decode_one(wire("00000006 00000002", "08 12"))
    assert frame.command.type == pb.BaseCommand.PING


def test_decode_pong() -> None:
    frame = decode_one(wire("00000009 00000005", "08 13", "9a 01 00"))
    assert frame.command.type == pb.BaseCommand.PONG


def test_decode_partitioned_metadata_response_success() -> None:
    data = wire(
        "0000000f",  # totalSize = 15
        "0000000b",  # commandSize = 11
        "08 16",  # type = PARTITIONED_METADATA_RESPONSE (22)
        "b2 01 06",  # partitionMetadataResponse (22 << 3 | 2 = 178 -> b2 01), 6 bytes
        "08 04",  # partitions (1) = 4
        "10 07",  # request_id (2) = 7
        "18 00",  # response (3) = Success
    )
    command = decode_one(data).command
    assert command.type == pb.BaseCommand.PARTITIONED_METADATA_RESPONSE
    response = command.partitionMetadataResponse
    assert response.partitions == 4
    assert response.request_id == 7
    assert response.response == pb.CommandPartitionedTopicMetadataResponse.Success


def test_decode_partitioned_metadata_response_failed() -> None:
    data = wire(
        "00000014",  # totalSize = 20
        "00000010",  # commandSize = 16
        "08 16",  # type = PARTITIONED_METADATA_RESPONSE
        "b2 01 0b",  # partitionMetadataResponse, 11 bytes
        "10 07",  # request_id (2) = 7
        "18 01",  # response (3) = Failed
        "20 0b",  # error (4) = TopicNotFound (11)
        "2a 03",  # message (5), 3 bytes
        b"bad",
    )
    response = decode_one(data).command.partitionMetadataResponse
    assert response.response == pb.CommandPartitionedTopicMetadataResponse.Failed
    assert response.error == pb.TopicNotFound
    assert response.message == "bad"
    assert not response.HasField("partitions")


def test_decode_lookup_response_connect() -> None:
    data = wire(
        "00000021",  # totalSize = 33
        "0000001d",  # commandSize = 29
        "08 18",  # type = LOOKUP_RESPONSE (24)
        "c2 01 18",  # lookupTopicResponse (24 << 3 | 2 = 194 -> c2 01), 24 bytes
        "0a 10",  # brokerServiceUrl (1), 16 bytes
        b"pulsar://b1:6650",
        "18 01",  # response (3) = Connect
        "20 08",  # request_id (4) = 8
        "28 01",  # authoritative (5) = true
    )
    command = decode_one(data).command
    assert command.type == pb.BaseCommand.LOOKUP_RESPONSE
    response = command.lookupTopicResponse
    assert response.response == pb.CommandLookupTopicResponse.Connect
    assert response.brokerServiceUrl == "pulsar://b1:6650"
    assert response.request_id == 8
    assert response.authoritative is True
    assert response.proxy_through_service_url is False


def test_decode_lookup_response_redirect() -> None:
    data = wire(
        "00000023",  # totalSize = 35
        "0000001f",  # commandSize = 31
        "08 18",  # type = LOOKUP_RESPONSE
        "c2 01 1a",  # lookupTopicResponse, 26 bytes
        "0a 10",  # brokerServiceUrl (1), 16 bytes
        b"pulsar://b2:6650",
        "18 00",  # response (3) = Redirect
        "20 09",  # request_id (4) = 9
        "28 00",  # authoritative (5) = false
        "40 01",  # proxy_through_service_url (8) = true
    )
    response = decode_one(data).command.lookupTopicResponse
    assert response.response == pb.CommandLookupTopicResponse.Redirect
    assert response.brokerServiceUrl == "pulsar://b2:6650"
    assert response.request_id == 9
    assert response.authoritative is False
    assert response.proxy_through_service_url is True


def test_decode_lookup_response_failed() -> None:
    data = wire(
        "00000015",  # totalSize = 21
        "00000011",  # commandSize = 17
        "08 18",  # type = LOOKUP_RESPONSE
        "c2 01 0c",  # lookupTopicResponse, 12 bytes
        "18 02",  # response (3) = Failed
        "20 0a",  # request_id (4) = 10
        "30 06",  # error (6) = ServiceNotReady (6)
        "3a 04",  # message (7), 4 bytes
        b"busy",
    )
    response = decode_one(data).command.lookupTopicResponse
    assert response.response == pb.CommandLookupTopicResponse.Failed
    assert response.request_id == 10
    assert response.error == pb.ServiceNotReady
    assert response.message == "busy"
    assert not response.HasField("brokerServiceUrl")


def test_decode_producer_success() -> None:
    data = wire(
        "00000014",  # totalSize = 20
        "00000010",  # commandSize = 16
        "08 11",  # type = PRODUCER_SUCCESS (17)
        "8a 01 0b",  # producer_success (17 << 3 | 2 = 138 -> 8a 01), 11 bytes
        "08 09",  # request_id (1) = 9
        "12 03",  # producer_name (2), 3 bytes
        b"p-1",
        "18 29",  # last_sequence_id (3) = 41
        "30 01",  # producer_ready (6) = true
    )
    command = decode_one(data).command
    assert command.type == pb.BaseCommand.PRODUCER_SUCCESS
    success = command.producer_success
    assert success.request_id == 9
    assert success.producer_name == "p-1"
    assert success.last_sequence_id == 41
    assert success.producer_ready is True


def test_decode_producer_success_with_negative_last_sequence_id() -> None:
    data = wire(
        "0000001b",  # totalSize = 27
        "00000017",  # commandSize = 23
        "08 11",  # type = PRODUCER_SUCCESS
        "8a 01 12",  # producer_success, 18 bytes
        "08 01",  # request_id (1) = 1
        "12 03",  # producer_name (2), 3 bytes
        b"p-2",
        "18 ff ff ff ff ff ff ff ff ff 01",  # last_sequence_id (3, int64) = -1: 10 bytes
    )
    success = decode_one(data).command.producer_success
    assert success.last_sequence_id == -1
    assert success.producer_ready is True  # default


def test_decode_producer_success_defaults_last_sequence_id_to_minus_one() -> None:
    data = wire("00000011 0000000d", "08 11", "8a 01 08", "08 01", "12 04", b"name")
    success = decode_one(data).command.producer_success
    assert not success.HasField("last_sequence_id")
    assert success.last_sequence_id == -1


def test_decode_send_receipt() -> None:
    data = wire(
        "00000014",  # totalSize = 20
        "00000010",  # commandSize = 16
        "08 07",  # type = SEND_RECEIPT (7)
        "3a 0c",  # send_receipt (7 << 3 | 2 = 58), 12 bytes
        "08 03",  # producer_id (1) = 3
        "10 05",  # sequence_id (2) = 5
        "1a 04",  # message_id (3), 4 bytes
        "08 0c",  # MessageIdData.ledgerId (1) = 12
        "10 22",  # MessageIdData.entryId (2) = 34
        "20 06",  # highest_sequence_id (4) = 6
    )
    command = decode_one(data).command
    assert command.type == pb.BaseCommand.SEND_RECEIPT
    receipt = command.send_receipt
    assert (receipt.producer_id, receipt.sequence_id, receipt.highest_sequence_id) == (3, 5, 6)
    assert (receipt.message_id.ledgerId, receipt.message_id.entryId) == (12, 34)
    assert receipt.message_id.partition == -1  # default


def test_decode_send_error() -> None:
    data = wire(
        "00000014",  # totalSize = 20
        "00000010",  # commandSize = 16
        "08 08",  # type = SEND_ERROR (8)
        "42 0c",  # send_error (8 << 3 | 2 = 66), 12 bytes
        "08 03",  # producer_id (1) = 3
        "10 05",  # sequence_id (2) = 5
        "18 02",  # error (3) = PersistenceError (2)
        "22 04",  # message (4), 4 bytes
        b"oops",
    )
    command = decode_one(data).command
    assert command.type == pb.BaseCommand.SEND_ERROR
    error = command.send_error
    assert (error.producer_id, error.sequence_id) == (3, 5)
    assert error.error == pb.PersistenceError
    assert error.message == "oops"


def test_decode_close_producer() -> None:
    data = wire(
        "0000001e",  # totalSize = 30
        "0000001a",  # commandSize = 26
        "08 0f",  # type = CLOSE_PRODUCER (15)
        "7a 16",  # close_producer, 22 bytes
        "08 03",  # producer_id (1) = 3
        "10 0b",  # request_id (2) = 11
        "1a 10",  # assignedBrokerServiceUrl (3), 16 bytes
        b"pulsar://b3:6650",
    )
    command = decode_one(data).command
    assert command.type == pb.BaseCommand.CLOSE_PRODUCER
    close = command.close_producer
    assert (close.producer_id, close.request_id) == (3, 11)
    assert close.assignedBrokerServiceUrl == "pulsar://b3:6650"


def test_decode_close_producer_as_the_java_broker_sends_it() -> None:
    # ServerCnx.closeProducer writes request_id -1L: a ten-byte varint.
    data = wire(
        "0000002e",  # totalSize = 46
        "0000002a",  # commandSize = 42
        "08 0f",  # type = CLOSE_PRODUCER (15)
        "7a 26",  # close_producer, 38 bytes
        "08 07",  # producer_id (1) = 7
        "10 ff ff ff ff ff ff ff ff ff 01",  # request_id (2) = 2**64 - 1
        "22 17",  # assignedBrokerServiceUrlTls (4), 23 bytes
        b"pulsar+ssl://green:6651",
    )
    close = decode_one(data).command.close_producer
    assert (close.producer_id, close.request_id) == (7, 2**64 - 1)
    assert not close.HasField("assignedBrokerServiceUrl")
    assert close.assignedBrokerServiceUrlTls == "pulsar+ssl://green:6651"


def test_decode_topic_migrated() -> None:
    data = wire(
        "0000003b",  # totalSize = 59
        "00000037",  # commandSize = 55
        "08 44",  # type = TOPIC_MIGRATED (68)
        "a2 04 32",  # topicMigrated: tag (68 << 3 | 2 = 546 -> a2 04), 50 bytes
        "08 03",  # resource_id (1) = 3
        "10 00",  # resource_type (2) = Producer (0)
        "1a 13",  # brokerServiceUrl (3), 19 bytes
        b"pulsar://green:6650",
        "22 17",  # brokerServiceUrlTls (4), 23 bytes
        b"pulsar+ssl://green:6651",
    )
    command = decode_one(data).command
    assert command.type == pb.BaseCommand.TOPIC_MIGRATED
    migrated = command.topicMigrated
    assert migrated.resource_id == 3
    assert migrated.resource_type == pb.CommandTopicMigrated.Producer
    assert migrated.brokerServiceUrl == "pulsar://green:6650"
    assert migrated.brokerServiceUrlTls == "pulsar+ssl://green:6651"


def test_decode_success() -> None:
    data = wire(
        "0000000a",  # totalSize = 10
        "00000006",  # commandSize = 6
        "08 0d",  # type = SUCCESS (13)
        "6a 02",  # success (13 << 3 | 2 = 106), 2 bytes
        "08 0c",  # request_id (1) = 12
    )
    command = decode_one(data).command
    assert command.type == pb.BaseCommand.SUCCESS
    assert command.success.request_id == 12


def test_decode_error() -> None:
    data = wire(
        "00000012",  # totalSize = 18
        "0000000e",  # commandSize = 14
        "08 0e",  # type = ERROR (14)
        "72 0a",  # error (14 << 3 | 2 = 114), 10 bytes
        "08 0d",  # request_id (1) = 13
        "10 0b",  # error (2) = TopicNotFound (11)
        "1a 04",  # message (3), 4 bytes
        b"nope",
    )
    command = decode_one(data).command
    assert command.type == pb.BaseCommand.ERROR
    assert command.error.request_id == 13
    assert command.error.error == pb.TopicNotFound
    assert command.error.message == "nope"


def test_decode_skips_unknown_command_slots() -> None:
    # A MESSAGE (9) frame: its slot (9) is not declared here and is skipped as unknown.
    data = wire(
        "0000000e",  # totalSize = 14
        "0000000a",  # commandSize = 10
        "08 09",  # type = MESSAGE (9)
        "4a 06",  # message (9, length-delimited), 6 bytes: unknown field
        "08 01 12 02 08 00",  # consumer_id = 1, message_id { ledgerId = 0 }
    )
    assert decode_one(data).command.type == pb.BaseCommand.MESSAGE


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
