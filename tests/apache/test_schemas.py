"""Producer schemas on Apache Pulsar: typed consumers read what the daemon forwards,
namespaces that enforce schemas take its producers, and a schema the topic refuses costs
that topic's messages only, counted as ``schema_incompatible``.

The schema files are written from the official Python client's own ``Record`` class
(``Record.schema()``: the Avro record schema its ``JsonSchema`` declares), so the
consumer's schema and the daemon's are the same record.  Every test shares the module's
one standalone broker, each in a namespace of its own.
"""

from __future__ import annotations

import json
import signal
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from tests.support.apache_pulsar import ApachePulsar
from tests.support.processes import Daemon, wait_for

pytestmark = pytest.mark.apache

#: Long enough that a discard before it is the broker's refusal, not a timeout.
SEND_TIMEOUT = ("--send-timeout-s", "300")


def order_record() -> Any:
    from pulsar.schema import Integer, Record, String

    class Order(Record):
        id = Integer()
        item = String()

    return Order


def namespace(apache: ApachePulsar, prefix: str) -> str:
    name = f"public/{prefix}-{uuid.uuid4().hex[:8]}"
    apache.admin.create_namespace(name)
    return name


def write_schema(tmp_path: Path, document: object, name: str = "order.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(document, indent=2))
    return path


def config(tmp_path: Path, schemas: dict[str, str]) -> str:
    """A config file with one ``[topics."..."]`` table per topic, giving its schema."""
    path = tmp_path / "bruce.toml"
    path.write_text("".join(f'[topics."{t}"]\nschema = "{s}"\n' for t, s in schemas.items()))
    return str(path)


def upload_schema(apache: ApachePulsar, topic: str, definition: object) -> None:
    """The topic exists and has ``definition`` as its JSON schema, as an admin would set it."""
    apache.admin.create_topic(topic)
    path = topic.split("://", 1)[1]
    body = {"type": "JSON", "schema": json.dumps(definition), "properties": {}}
    apache.admin.call("POST", f"/admin/v2/schemas/{path}/schema", body)


def send_orders(daemon: Daemon, topic: str, count: int, start: int = 0) -> list[bytes]:
    values = [json.dumps({"id": i, "item": f"item-{i}"}).encode() for i in range(start, count)]
    with daemon.sender() as sender:
        for value in values:
            sender.send(topic, value)
    return values


def read_typed(apache: ApachePulsar, topic: str, count: int, timeout: float = 60.0) -> list[Any]:
    """``count`` records read from the start with ``JsonSchema(Order)``: typed values."""
    import pulsar
    from pulsar.schema import JsonSchema

    client = pulsar.Client(apache.url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    try:
        consumer = client.subscribe(
            topic, f"typed-{uuid.uuid4().hex[:6]}", schema=JsonSchema(order_record()),
            initial_position=pulsar.InitialPosition.Earliest,
        )  # fmt: skip
        records = []
        deadline = time.monotonic() + timeout
        while len(records) < count and time.monotonic() < deadline:
            try:
                message = consumer.receive(2000)
            except pulsar.Timeout:
                continue
            records.append(message.value())
            consumer.acknowledge(message)
        return records
    finally:
        client.close()


def topic_discarded(daemon: Daemon, topic: str, reason: str) -> float:
    key = f'pulsar_bruce_topic_discarded_total{{reason="{reason}",topic="{topic}"}}'
    return daemon.metrics().get(key, 0)


def test_a_typed_consumer_reads_the_records_as_the_schema_declares(
    apache: ApachePulsar, start_daemon, tmp_path: Path
) -> None:
    topic = f"persistent://{namespace(apache, 'typed')}/orders"
    schema = write_schema(tmp_path, order_record().schema())
    daemon = start_daemon(apache.url, "--config", config(tmp_path, {topic: f"json:{schema}"}))
    send_orders(daemon, topic, 20)
    counters = daemon.wait_settled(20, timeout=60)
    assert counters.acked == 20 and counters.identity_holds()
    records = read_typed(apache, topic, 20)
    assert [(r.id, r.item) for r in records] == [(i, f"item-{i}") for i in range(20)]
    assert all(type(r).__name__ == "Order" for r in records)
    registered = apache.admin.get_json(f"/admin/v2/schemas/{topic.split('://')[1]}/schema")
    assert registered["type"] == "JSON"
    assert json.loads(registered["data"]) == order_record().schema()
    assert registered["properties"] == {
        "__alwaysAllowNull": "true", "__jsr310ConversionEnabled": "false",
    }  # fmt: skip


def test_a_namespace_that_enforces_schemas_takes_our_producer_with_its_schema(
    apache: ApachePulsar, start_daemon, tmp_path: Path
) -> None:
    """``schemaValidationEnforced``: a producer without a schema is refused on a topic that
    has one (``ServerCnx``: IncompatibleSchema), one with the topic's schema is taken."""
    ns = namespace(apache, "enforced")
    apache.admin.call("POST", f"/admin/v2/namespaces/{ns}/schemaValidationEnforced", True)
    typed, untyped = f"persistent://{ns}/typed", f"persistent://{ns}/untyped"
    for topic in (typed, untyped):
        upload_schema(apache, topic, order_record().schema())
    schema = write_schema(tmp_path, order_record().schema())
    daemon = start_daemon(
        apache.url, *SEND_TIMEOUT, "--config", config(tmp_path, {typed: f"json:{schema}"})
    )
    send_orders(daemon, typed, 10)
    send_orders(daemon, untyped, 5)
    counters = daemon.wait_settled(15, timeout=60)
    assert counters.acked == 10 and counters.discarded.get("schema_incompatible") == 5
    assert topic_discarded(daemon, untyped, "schema_incompatible") == 5
    assert [r.id for r in read_typed(apache, typed, 10)] == list(range(10))
    assert f"{untyped} refused by the broker (our schema bytes: IncompatibleSchema" in daemon.log()


def test_an_incompatible_schema_costs_its_topic_only_until_it_is_fixed(
    apache: ApachePulsar, start_daemon, tmp_path: Path
) -> None:
    """Under FULL compatibility, a record with other required fields is refused: the topic's
    messages are counted, another topic flows, and after the file is fixed and SIGHUP the
    producer's next retry is taken."""
    ns = namespace(apache, "compat")
    apache.admin.call("PUT", f"/admin/v2/namespaces/{ns}/schemaCompatibilityStrategy", "FULL")
    fixed, free = f"persistent://{ns}/fixed", f"persistent://{ns}/free"
    upload_schema(apache, fixed, order_record().schema())
    other = {"type": "record", "name": "Order", "fields": [{"name": "sku", "type": "long"}]}
    schema = write_schema(tmp_path, other)
    daemon = start_daemon(
        apache.url, *SEND_TIMEOUT, "--config", config(tmp_path, {fixed: f"json:{schema}"})
    )
    send_orders(daemon, fixed, 10)
    send_orders(daemon, free, 10)
    counters = daemon.wait_settled(20, timeout=60)
    assert counters.acked == 10 and counters.discarded.get("schema_incompatible") == 10
    assert topic_discarded(daemon, fixed, "schema_incompatible") == 10
    refusals = [line for line in daemon.log().splitlines() if "refused by the broker" in line]
    assert len(refusals) == 1  # one line, the broker's pretty-printed schemas collapsed
    assert f"{fixed} refused by the broker (our schema json:{schema}: Incompat" in refusals[0]
    assert refusals[0].endswith("); discarding its messages as schema_incompatible")

    write_schema(tmp_path, order_record().schema())  # the same file, now the topic's record
    daemon.process.send_signal(signal.SIGHUP)
    ready = f'pulsar_bruce_topic_partitions_ready{{topic="{fixed}"}}'
    wait_for(lambda: daemon.metrics().get(ready) == 1, 90, "the fixed schema accepted")
    send_orders(daemon, fixed, 15, start=10)
    counters = daemon.wait_settled(25, timeout=60)
    assert counters.acked == 15 and counters.identity_holds()
    assert [r.id for r in read_typed(apache, fixed, 5)] == list(range(10, 15))
