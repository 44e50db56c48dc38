"""The schema a producer declares, byte for byte: ``CommandProducer.schema`` as the Java
client's ``Commands.newProducer`` sends its ``SchemaInfo``, and the schema version stamped
on what is framed afterwards.

The expected frames are spelled out field by field (protobuf tag, length, value), so a
change to the encoding shows up here as a named field, not as a different hex blob.
"""

from __future__ import annotations

import json

from pulsar_bruce.frame import commands
from pulsar_bruce.frame import pulsar_api_pb2 as pb
from pulsar_bruce.frame.codec import decode_frame_body
from pulsar_bruce.model.schema import STRUCT_PROPERTIES, ProducerSchema

ORDER = {"type": "record", "name": "Order", "fields": [{"name": "id", "type": ["null", "int"]}]}
COMPACT = b'{"type":"record","name":"Order","fields":[{"name":"id","type":["null","int"]}]}'


def field(tag: int, value: bytes) -> bytes:
    """A length-delimited protobuf field (every length here is below 128 but one)."""
    size = len(value)
    length = bytes([size]) if size < 128 else bytes([(size & 0x7F) | 0x80, size >> 7])
    return bytes([tag]) + length + value


def frame(command: bytes) -> bytes:
    return (len(command) + 4).to_bytes(4, "big") + len(command).to_bytes(4, "big") + command


def json_schema() -> ProducerSchema:
    """``json:FILE`` with the file indented: what is declared is the compact form."""
    return ProducerSchema.parse(
        "json:/etc/order.json", lambda _: json.dumps(ORDER, indent=2).encode()
    )


def test_a_json_schema_goes_as_name_data_type_and_the_java_clients_properties() -> None:
    schema_message = (
        field(0x0A, b"")  # 1 name: empty, as the Java client names struct schemas
        + field(0x1A, COMPACT)  # 3 schema_data: the Avro record schema, compact
        + b"\x20\x02"  # 4 type: Json
        + field(0x2A, field(0x0A, b"__alwaysAllowNull") + field(0x12, b"true"))  # 5
        + field(0x2A, field(0x0A, b"__jsr310ConversionEnabled") + field(0x12, b"false"))
    )
    producer = (
        field(0x0A, b"persistent://public/default/orders")  # 1 topic
        + b"\x10\x01"  # 2 producer_id
        + b"\x18\x02"  # 3 request_id
        + field(0x22, b"bruce-1")  # 4 producer_name
        + field(0x3A, schema_message)  # 7 schema
        + b"\x48\x01"  # 9 user_provided_producer_name
    )
    expected = frame(b"\x08\x05" + field(0x2A, producer))  # BaseCommand type PRODUCER, field 5

    built = commands.producer(
        "persistent://public/default/orders", 1, 2, "bruce-1", user_provided=True,
        schema=json_schema(),
    )  # fmt: skip
    assert built == expected
    assert built.hex() == (
        "000000d3000000cf08052aca010a2270657273697374656e743a2f2f7075626c69632f64656661756c74"
        "2f6f726465727310011802220762727563652d313a94010a001a4f7b2274797065223a227265636f7264"
        "222c226e616d65223a224f72646572222c226669656c6473223a5b7b226e616d65223a226964222c2274"
        "797065223a5b226e756c6c222c22696e74225d7d5d7d20022a190a115f5f616c77617973416c6c6f774e"
        "756c6c1204747275652a220a195f5f6a7372333130436f6e76657273696f6e456e61626c656412056661"
        "6c73654801"
    )


def test_an_avro_schema_differs_only_in_its_type() -> None:
    avro = ProducerSchema.parse("avro:order.avsc", lambda _: COMPACT)
    declared = decoded(commands.producer("t", 1, 2, None, schema=avro)).schema
    assert declared.type == pb.Schema.Avro and declared.schema_data == COMPACT
    assert [(p.key, p.value) for p in declared.properties] == list(STRUCT_PROPERTIES)


def test_a_string_schema_is_the_java_clients_string_schema() -> None:
    string = ProducerSchema.parse("string", lambda _: b"")
    expected_schema = field(0x0A, b"String") + field(0x1A, b"") + b"\x20\x01"  # type String
    producer = field(0x0A, b"t") + b"\x10\x01\x18\x02" + field(0x3A, expected_schema)
    assert commands.producer("t", 1, 2, None, schema=string) == frame(
        b"\x08\x05" + field(0x2A, producer)
    )


def test_bytes_declares_no_schema_as_the_java_client_does_for_schema_bytes() -> None:
    plain = commands.producer("t", 1, 2, None)
    assert commands.producer("t", 1, 2, None, schema=ProducerSchema()) == plain
    assert not decoded(plain).HasField("schema")


def test_the_schema_version_is_stamped_on_batches_and_single_messages() -> None:
    version = b"\x00\x00\x00\x00\x00\x00\x00\x03"
    metadata = pb.MessageMetadata.FromString(
        commands.batch_metadata(
            producer_name="p", sequence_id=0, highest_sequence_id=0, publish_time_ms=1,
            num_messages=1, compression=0, uncompressed_size=3, schema_version=version,
        )
    )  # fmt: skip
    assert metadata.schema_version == version
    (single,) = commands.single_message_sends(
        producer_id=1, producer_name="p", sequence_id=0, publish_time_ms=1, compression=0,
        uncompressed_size=3, message=pb.SingleMessageMetadata(payload_size=3), payload=b"abc",
        max_chunk_frame=1 << 20, schema_version=version,
    )  # fmt: skip
    stamped = decode_frame_body(single[4:]).metadata
    assert stamped is not None and stamped.schema_version == version
    unversioned = commands.batch_metadata(
        producer_name="p", sequence_id=0, highest_sequence_id=0, publish_time_ms=1,
        num_messages=1, compression=0, uncompressed_size=3,
    )  # fmt: skip
    assert not pb.MessageMetadata.FromString(unversioned).HasField("schema_version")


def decoded(built: bytes) -> pb.CommandProducer:
    return decode_frame_body(built[4:]).command.producer
