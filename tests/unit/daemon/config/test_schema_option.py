"""``schema``: bytes, string, json:FILE or avro:FILE, globally and per topic.

The file is read and checked when the configuration is loaded, so a missing file or
one that is not an Avro record schema is one line at start (and ``--check-config``);
what the producers declare is the compact JSON with the Java client's properties.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from pulsar_bruce.cli import effective_config_toml
from pulsar_bruce.config import ConfigError, load_config
from pulsar_bruce.model.schema import STRUCT_PROPERTIES, ProducerSchema, SchemaKind
from pulsar_bruce.producer.partition_producer import PartitionProducer
from pulsar_bruce.route.topic import Topic
from pulsar_bruce.route.topic_settings import TopicConfigurator

ORDER: dict[str, Any] = {
    "type": "record",
    "name": "Order",
    "namespace": "shop",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "item", "type": ["null", "string"], "default": None},
    ],
}


def write(tmp_path: Path, name: str, document: object) -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(document, indent=4) if not isinstance(document, str) else document)
    return path


def schema_error(value: str) -> str:
    with pytest.raises(ConfigError) as raised:
        load_config({"schema": value}, {})
    return str(raised.value)


def test_the_default_declares_nothing() -> None:
    schema = load_config({}, {}).schema
    assert schema == ProducerSchema() and not schema.declared and str(schema) == "bytes"


@pytest.mark.parametrize(("text", "kind"), [("string", "string"), (" String ", "string"),
                                             ("BYTES", "bytes")])  # fmt: skip
def test_bytes_and_string_take_no_file(text: str, kind: str) -> None:
    schema = load_config({"schema": text}, {}).schema
    assert schema.kind == SchemaKind(kind) and schema.definition == b"" and schema.spec == kind


def test_a_json_file_is_declared_compact_with_the_java_clients_properties(tmp_path: Path) -> None:
    path = write(tmp_path, "order.json", ORDER)
    schema = load_config({"schema": f"json:{path}"}, {}).schema
    assert schema.kind is SchemaKind.JSON and schema.declared
    assert schema.definition == json.dumps(ORDER, separators=(",", ":")).encode()
    assert schema.properties == STRUCT_PROPERTIES
    assert str(schema) == f"json:{path}"


def test_avro_from_the_environment(tmp_path: Path) -> None:
    path = write(tmp_path, "order.avsc", ORDER)
    schema = load_config({}, {"PULSAR_BRUCE_SCHEMA": f"avro:{path}"}).schema
    assert schema.kind is SchemaKind.AVRO and json.loads(schema.definition) == ORDER


def test_per_topic_schemas_from_the_file(tmp_path: Path) -> None:
    path = write(tmp_path, "order.json", ORDER)
    config_file = write(
        tmp_path,
        "bruce.toml",
        f'[topics."orders"]\nschema = "json:{path}"\n[topics."text-*"]\nschema = "string"\n',
    )
    config = load_config({}, {}, str(config_file))
    orders = config.topic_settings("persistent://public/default/orders").schema
    assert orders.kind is SchemaKind.JSON and orders.spec == f"json:{path}"
    assert config.topic_settings("persistent://public/default/text-1").schema.kind == "string"
    assert not config.topic_settings("persistent://public/default/other").schema.declared


def test_the_producers_of_a_topic_get_its_schema_through_their_policy(tmp_path: Path) -> None:
    path = write(tmp_path, "order.json", ORDER)
    config_file = write(tmp_path, "bruce.toml", f'[topics."orders"]\nschema = "json:{path}"\n')
    configurator = TopicConfigurator(load_config({}, {}, str(config_file)))
    orders, other = Topic("persistent://public/default/orders"), Topic("persistent://x/y/z")
    producer = PartitionProducer(orders.name, 0, 1, configurator.policy(orders))
    orders.attach([producer])
    configurator.apply(orders)
    assert producer.policy.schema.kind is SchemaKind.JSON
    assert not configurator.policy(other).schema.declared
    # SIGHUP with the override gone: the producer declares nothing from its next creation
    configurator.reconfigure(load_config({}, {}), [orders])
    assert not producer.policy.schema.declared


def test_check_config_prints_the_schema_as_configured(tmp_path: Path) -> None:
    path = write(tmp_path, "order.json", ORDER)
    printed = effective_config_toml(load_config({"schema": f"avro:{path}"}, {}))
    assert f'schema = "avro:{path}"' in printed.splitlines()


# -- one line at start ---------------------------------------------------------------------


def test_a_missing_file_names_the_option_and_the_file(tmp_path: Path) -> None:
    missing = tmp_path / "nope.json"
    assert schema_error(f"json:{missing}") == (
        f"--schema: cannot read {missing}: No such file or directory"
    )


def test_a_mistake_in_a_topic_table_names_the_table(tmp_path: Path) -> None:
    config_file = write(tmp_path, "bruce.toml", '[topics."orders"]\nschema = "xml:o.xsd"\n')
    with pytest.raises(ConfigError) as raised:
        load_config({}, {}, str(config_file))
    assert str(raised.value) == (
        f"{config_file}: topics.'orders'.schema: expected bytes, string, json:FILE or "
        "avro:FILE, got 'xml:o.xsd'"
    )


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("json", "expected bytes, string, json:FILE or avro:FILE, got 'json'"),
        ("avro:", "expected bytes, string, json:FILE or avro:FILE, got 'avro:'"),
        ("string:x", "expected bytes, string, json:FILE or avro:FILE, got 'string:x'"),
    ],
)
def test_words_that_are_no_schema(text: str, reason: str) -> None:
    assert schema_error(text) == f"--schema: {reason}"


BROKEN: list[tuple[object, str]] = [
    ("{not json", "not JSON (Expecting property name enclosed in double quotes: line 1 column 2"
     " (char 1))"),
    ({"type": "string"}, 'not an Avro record schema: expected a JSON object with "type": '
     '"record"'),
    ({"type": "record", "name": "R"}, 'not an Avro record schema: schema: "fields" is missing'),
    ({"type": "record", "name": "R", "fields": [{"name": "a", "type": "strnig"}]},
     "not an Avro record schema: R.a: unknown type 'strnig'"),
    ({"type": "record", "name": "R", "fields": [{"name": "a", "type": "int"},
                                                {"name": "a", "type": "long"}]},
     "not an Avro record schema: R.fields[1]: field 'a' appears twice"),
    ({"type": "record", "name": "1R", "fields": []},
     "not an Avro record schema: schema: invalid name '1R'"),
    ({"type": "record", "name": "R", "fields": [{"name": "a", "type": ["null", "null"]}]},
     "not an Avro record schema: R.a: 'null' appears twice in the union"),
    ({"type": "record", "name": "R", "fields": [{"name": "a", "type": ["null", ["int"]]}]},
     "not an Avro record schema: R.a[1]: a union directly inside a union"),
    ({"type": "record", "name": "R", "fields": [
        {"name": "e", "type": {"type": "enum", "name": "E", "symbols": ["A", "A"]}}]},
     "not an Avro record schema: R.e.E: symbols must be a list of distinct names"),
    ({"type": "record", "name": "R", "fields": [{"name": "a", "type": "R2"}]},
     "not an Avro record schema: R.a: unknown type 'R2'"),
]  # fmt: skip


@pytest.mark.parametrize(("document", "reason"), BROKEN)
def test_a_file_that_is_no_avro_record_schema(
    tmp_path: Path, document: object, reason: str
) -> None:
    path = write(tmp_path, "bad.json", document)
    assert schema_error(f"json:{path}") == f"--schema: {path}: {reason}"


def test_not_utf8(tmp_path: Path) -> None:
    path = tmp_path / "latin1.json"
    path.write_bytes(b'{"type": "record", "name": "caf\xe9", "fields": []}')
    assert schema_error(f"avro:{path}") == f"--schema: {path}: not UTF-8 text"


def test_named_types_nested_types_and_references_are_accepted(tmp_path: Path) -> None:
    """What Avro's parser takes: nested records, enums, fixed, arrays, maps, logical types,
    references to types defined earlier (by short name in the namespace, or full name)."""
    document = {
        "type": "record", "name": "Event", "namespace": "acme.events",
        "fields": [
            {"name": "id", "type": {"type": "string", "logicalType": "uuid"}},
            {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
            {"name": "kind", "type": {"type": "enum", "name": "Kind", "symbols": ["A", "B"]}},
            {"name": "hash", "type": {"type": "fixed", "name": "Md5", "size": 16}},
            {"name": "where", "type": {"type": "record", "name": "Place", "fields": [
                {"name": "city", "type": "string"}]}},
            {"name": "from", "type": ["null", "Place"]},
            {"name": "to", "type": "acme.events.Place"},
            {"name": "tags", "type": {"type": "array", "items": "string"}},
            {"name": "counts", "type": {"type": "map", "values": ["null", "long", "Kind"]}},
            {"name": "other", "type": {"type": "record", "name": "other.Thing", "fields": []}},
            {"name": "again", "type": "other.Thing"},
        ],
    }  # fmt: skip
    path = write(tmp_path, "event.avsc", document)
    assert json.loads(load_config({"schema": f"avro:{path}"}, {}).schema.definition) == document
