"""The commands a producer sends (``frame/commands.py``): golden bytes for every frame we
encode, and the chunks of a message larger than one frame.

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

import struct

import pytest
from pulsar_bruce import __version__
from pulsar_bruce.frame import commands
from pulsar_bruce.frame import pulsar_api_pb2 as pb
from pulsar_bruce.frame.codec import FrameDecoder

from tests.unit.daemon.frame.helpers import SEND_METADATA, TOPIC, crc32c_reference, wire

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


# -- chunks of a message larger than one frame ----------------------------------------------
#
# Fields of a chunk, as pulsar-client-java's ``ProducerImpl.sendAsync`` writes them:
# ``CommandSend.is_chunk`` (7), one message, no ``highest_sequence_id`` (the
# message is not batched); ``MessageMetadata`` has the message's own fields
# (properties 4, partition_key 6, event_time 12), ``uncompressed_size`` (9) and
# ``uuid`` (26) = producer name + "-" + sequence id, ``num_chunks_from_msg`` (27),
# ``total_chunk_msg_size`` (28), ``chunk_id`` (29).  Fields 16 and above take a
# two-byte tag: ``(26 << 3) | 2`` = 210 = ``d2 01``.

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
