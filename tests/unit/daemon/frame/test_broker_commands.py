"""What the broker sends us, decoded (``frame/codec.py`` on ``pulsar_api_pb2``): golden
bytes, written by hand, for every command the daemon reads.

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

from pulsar_bruce.frame import pulsar_api_pb2 as pb

from tests.unit.daemon.frame.helpers import decode_one, wire

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
