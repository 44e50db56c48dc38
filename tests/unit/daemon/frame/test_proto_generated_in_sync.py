"""Guards for the checked-in protobuf bindings of proto/pulsar_api.proto.

1. The generated ``pulsar_api_pb2.py`` / ``.pyi`` must be exactly what
   ``make proto`` produces from the current ``.proto`` (no stale gencode).
2. A handful of wire facts (field numbers, labels, enum values, a golden
   encoding) are pinned against upstream Pulsar's PulsarApi.proto, so a typo in
   our subset cannot slip through.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest
from google.protobuf.descriptor import FieldDescriptor

REPO_ROOT = Path(__file__).resolve().parents[4]
PROTO_DIR = REPO_ROOT / "proto"
PROTO_FILE = PROTO_DIR / "pulsar_api.proto"
DAEMON_DIR = REPO_ROOT / "daemon"
GEN_DIR = DAEMON_DIR / "pulsar_bruce" / "frame"
GENERATED = ("pulsar_api_pb2.py", "pulsar_api_pb2.pyi")

STALE = "generated code is stale: run `make proto`"


def _load_pb2() -> ModuleType:
    from pulsar_bruce.frame import pulsar_api_pb2

    return pulsar_api_pb2


def test_generated_code_matches_proto(tmp_path: Path) -> None:
    # Same invocation as the Makefile's `proto` target, only the output
    # directory differs.
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "grpc_tools.protoc",
            "-Iproto",
            f"--python_out={tmp_path}",
            f"--pyi_out={tmp_path}",
            "proto/pulsar_api.proto",
        ],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, f"protoc failed:\n{result.stdout}\n{result.stderr}"

    for name in GENERATED:
        fresh = tmp_path / name
        checked_in = GEN_DIR / name
        assert fresh.is_file(), f"protoc did not produce {name}"
        assert checked_in.is_file(), f"{checked_in} is missing; {STALE}"
        assert fresh.read_bytes() == checked_in.read_bytes(), f"{name}: {STALE}"


def test_generated_stub_is_valid_python() -> None:
    # protoc copies enum value names verbatim into the .pyi; a value named
    # after a Python keyword (upstream Schema.Type has `None`) makes the stub
    # unparsable and breaks mypy for every importer.
    stub = GEN_DIR / "pulsar_api_pb2.pyi"
    ast.parse(stub.read_text(encoding="utf-8"), filename=str(stub))


# (message, field, number, label) -- label is "required", "optional" or "repeated".
WIRE_FIELDS = [
    ("BaseCommand", "type", 1, "required"),
    ("BaseCommand", "connect", 2, "optional"),
    ("BaseCommand", "connected", 3, "optional"),
    ("BaseCommand", "producer", 5, "optional"),
    ("BaseCommand", "send", 6, "optional"),
    ("BaseCommand", "send_receipt", 7, "optional"),
    ("BaseCommand", "send_error", 8, "optional"),
    ("BaseCommand", "success", 13, "optional"),
    ("BaseCommand", "error", 14, "optional"),
    ("BaseCommand", "close_producer", 15, "optional"),
    ("BaseCommand", "producer_success", 17, "optional"),
    ("BaseCommand", "ping", 18, "optional"),
    ("BaseCommand", "pong", 19, "optional"),
    ("BaseCommand", "partitionMetadata", 21, "optional"),
    ("BaseCommand", "partitionMetadataResponse", 22, "optional"),
    ("BaseCommand", "lookupTopic", 23, "optional"),
    ("BaseCommand", "lookupTopicResponse", 24, "optional"),
    ("MessageMetadata", "producer_name", 1, "required"),
    ("MessageMetadata", "publish_time", 3, "required"),
    ("MessageMetadata", "compression", 8, "optional"),
    ("MessageMetadata", "uncompressed_size", 9, "optional"),
    ("MessageMetadata", "num_messages_in_batch", 11, "optional"),
    ("MessageMetadata", "schema_version", 16, "optional"),
    ("MessageMetadata", "txnid_least_bits", 22, "optional"),
    ("MessageMetadata", "highest_sequence_id", 24, "optional"),
    ("MessageMetadata", "null_partition_key", 30, "optional"),
    ("SingleMessageMetadata", "payload_size", 3, "required"),
    ("SingleMessageMetadata", "sequence_id", 8, "optional"),
    ("CommandConnect", "auth_data", 3, "optional"),
    ("CommandConnect", "auth_method_name", 5, "optional"),
    ("CommandConnect", "feature_flags", 10, "optional"),
    ("CommandLookupTopicResponse", "request_id", 4, "required"),
    ("CommandPartitionedTopicMetadataResponse", "request_id", 2, "required"),
    ("CommandProducer", "producer_access_mode", 10, "optional"),
    ("CommandSend", "highest_sequence_id", 6, "optional"),
    ("CommandSendReceipt", "message_id", 3, "optional"),
    ("MessageIdData", "ledgerId", 1, "required"),
    ("MessageIdData", "entryId", 2, "required"),
    ("Schema", "schema_data", 3, "required"),
]


def _label(field: FieldDescriptor) -> str:
    if field.is_repeated:
        return "repeated"
    return "required" if field.is_required else "optional"


@pytest.mark.parametrize(("message", "field", "number", "label"), WIRE_FIELDS)
def test_wire_field_numbers(message: str, field: str, number: int, label: str) -> None:
    pb2 = _load_pb2()
    descriptor = pb2.DESCRIPTOR.message_types_by_name[message]
    fd = descriptor.fields_by_name[field]
    assert fd.number == number, f"{message}.{field}: expected field number {number}"
    assert _label(fd) == label, f"{message}.{field}: expected {label}"


def test_wire_defaults_and_enums() -> None:
    pb2 = _load_pb2()

    # Defaults that differ from the type's zero value.
    assert pb2.MessageMetadata().num_messages_in_batch == 1
    assert pb2.MessageIdData().partition == -1
    assert pb2.MessageIdData().batch_index == -1
    assert pb2.CommandSend().num_messages == 1
    assert pb2.CommandProducerSuccess().last_sequence_id == -1
    assert pb2.CommandProducerSuccess().producer_ready is True
    assert pb2.CommandProducer().user_provided_producer_name is True

    # Enum values.
    assert pb2.BaseCommand.CONNECT == 2
    assert pb2.BaseCommand.SEND == 6
    assert pb2.BaseCommand.PRODUCER_SUCCESS == 17
    assert pb2.BaseCommand.LOOKUP_RESPONSE == 24
    assert pb2.BaseCommand.NEW_TXN == 50
    assert pb2.BaseCommand.TOPIC_MIGRATED == 68
    assert pb2.CompressionType.Value("LZ4") == 1
    assert pb2.CompressionType.Value("SNAPPY") == 4
    assert pb2.ServerError.Value("ProducerBusy") == 16
    assert pb2.ServerError.Value("ProducerFenced") == 25
    assert pb2.ProtocolVersion.Value("v20") == 20
    assert pb2.CommandLookupTopicResponse.Connect == 1
    assert pb2.Schema.Type.Value("None_") == 0  # upstream name: `None`
    assert pb2.Schema.Type.Value("ProtobufNative") == 20


def test_golden_encodings() -> None:
    pb2 = _load_pb2()

    # PING: type=18 (tag 0x08), then empty sub-message in field 18 (tag 0x92 0x01).
    ping = pb2.BaseCommand(type=pb2.BaseCommand.PING, ping=pb2.CommandPing())
    assert ping.SerializeToString() == bytes.fromhex("0812920100")

    # SEND header: field 6 (tag 0x32) wrapping producer_id=1, sequence_id=7.
    send = pb2.BaseCommand(
        type=pb2.BaseCommand.SEND,
        send=pb2.CommandSend(producer_id=1, sequence_id=7),
    )
    assert send.SerializeToString() == bytes.fromhex("0806320408011007")
