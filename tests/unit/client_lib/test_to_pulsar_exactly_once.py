"""The Producer record (ApiKey 261), ``publish_as()`` on both stream clients, and how an
exactly-once Spark task names its producer (against the fake stream daemon)."""

from __future__ import annotations

import asyncio
import dataclasses
import pickle
import struct
from collections.abc import Iterator
from typing import Any

import pytest
from to_pulsar import FlushResult, StreamSender, ToPulsarError, encode_any_partition
from to_pulsar.aio import AsyncStreamSender
from to_pulsar.protocol import API_KEY_PRODUCER, encode_producer_record

from tests.support.fakestream import FakeStreamDaemon

# -- the record ---------------------------------------------------------------------------------


def test_producer_record_golden_bytes() -> None:
    assert API_KEY_PRODUCER == 261
    assert encode_producer_record("p", 0) == bytes.fromhex(
        "00000015" "0105" "0000" "0000" "0001" "70" "0000000000000000"
    )  # fmt: skip
    name = "to_pulsar-0b2c-3"
    record = encode_producer_record(name, (7 << 32) + 5)
    assert record == (
        struct.pack(">ihhhh", 20 + len(name), 261, 0, 0, len(name))
        + name.encode()
        + struct.pack(">q", (7 << 32) + 5)
    )
    assert struct.unpack_from(">i", record)[0] == len(record) == 36
    # UTF-8: NameSize counts bytes, not characters; 255 bytes is the most.
    assert encode_producer_record("é", 1)[10:15] == b"\x00\x02\xc3\xa9\x00"
    assert len(encode_producer_record("€" * 85, 2**63 - 1)) == 10 + 2 + 255 + 8
    assert encode_producer_record("a b", 0)[12:15] == b"a b"  # the space is printable


@pytest.mark.parametrize(
    ("name", "first", "error", "needle"),
    [
        ("", 0, ValueError, "1 to 255 bytes of UTF-8, got 0"),
        ("x" * 256, 0, ValueError, "got 256"),
        ("€" * 86, 0, ValueError, "got 258"),
        ("a\nb", 0, ValueError, "control or other unprintable character (U+000A)"),
        ("a\x7fb", 0, ValueError, "(U+007F)"),
        ("a\x85b", 0, ValueError, "(U+0085)"),
        ("a\u200bb", 0, ValueError, "unprintable character (U+200B)"),
        ("a\u00a0b", 0, ValueError, "(U+00A0)"),
        ("a\ud800", 0, ValueError, "not valid UTF-8"),
        ("p", -1, ValueError, "0 to 2**63-1, got -1"),
        ("p", 2**63, ValueError, "0 to 2**63-1"),
        ("p", True, TypeError, "must be an int, not bool"),
        ("p", 1.0, TypeError, "must be an int, not float"),
        (b"p", 0, TypeError, "must be a str, not bytes"),
    ],
)
def test_producer_record_refuses(name: Any, first: Any, error: type, needle: str) -> None:
    with pytest.raises(error) as info:
        encode_producer_record(name, first)
    assert needle in str(info.value)


# -- publish_as ---------------------------------------------------------------------------------


def test_publish_as_goes_first_and_is_not_counted(fake: FakeStreamDaemon) -> None:
    with StreamSender(fake.path) as sender:
        sender.publish_as("job-1-0", 3 << 32)
        sender.send("t", b"a", timestamp_ms=1)
        sender.send("t", b"b", timestamp_ms=1)
        assert sender.unconfirmed == 2
        assert sender.flush() == FlushResult(2)
        sender.publish_as("job-1-0", 4 << 32)  # began with one: may switch
        sender.send("t", b"c", timestamp_ms=1)
        assert sender.flush() == FlushResult(1)
    assert fake.producers == [
        (0, encode_producer_record("job-1-0", 3 << 32)),
        (0, encode_producer_record("job-1-0", 4 << 32)),
    ]
    assert fake.message_records() == [encode_any_partition("t", v, b"", 1) for v in "abc"]
    assert [len(flush.records) for flush in fake.flushes] == [2, 1]


def test_publish_as_after_anything_else_is_refused(fake: FakeStreamDaemon) -> None:
    with StreamSender(fake.path) as sender:
        sender.send("t", b"a")
        with pytest.raises(ToPulsarError, match=r"publish_as\(\) must come first .* 1 messages"):
            sender.publish_as("p", 0)
    with StreamSender(fake.path) as sender:
        sender.flush()  # a flush of nothing went first: no longer a fresh connection
        with pytest.raises(ToPulsarError, match="must come first"):
            sender.publish_as("p", 0)
        with pytest.raises(ToPulsarError, match=r"sent by publish_as\(\)"):
            sender.send_raw(encode_producer_record("p", 0))
    with StreamSender(fake.path) as sender, pytest.raises(ValueError, match="control"):
        sender.publish_as("a\tb", 0)  # refused before anything is queued
    assert fake.producers == []


def test_async_publish_as(fake: FakeStreamDaemon) -> None:
    async def main() -> FlushResult:
        async with AsyncStreamSender(fake.path) as sender:
            await sender.publish_as("q-0", 5)
            await sender.send("t", b"a", timestamp_ms=1)
            result = await sender.flush()
            await sender.publish_as("q-0", 9)
            await sender.send("t", b"b", timestamp_ms=1)
            result += await sender.flush()  # the fake has read the record before this
        async with AsyncStreamSender(fake.path) as other:
            await other.send("t", b"b", timestamp_ms=1)
            with pytest.raises(ToPulsarError, match="must come first"):
                await other.publish_as("q-1", 0)
        return result

    assert asyncio.run(main()) == FlushResult(2)
    assert fake.producers == [
        (0, encode_producer_record("q-0", 5)),
        (0, encode_producer_record("q-0", 9)),
    ]


# -- Spark: naming the producer ---------------------------------------------------------------


class FakeTaskContext:
    """What ExactlyOnce.producer() asks of pyspark's TaskContext."""

    def __init__(self, partition: int, **properties: str) -> None:
        self.partition = partition
        self.properties = properties

    def partitionId(self) -> int:
        return self.partition

    def getLocalProperty(self, key: str) -> str | None:
        return self.properties.get(key)


@pytest.fixture
def task_context(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """``task_context(partition, **local_properties)``: what TaskContext.get() returns."""
    pyspark = pytest.importorskip("pyspark", reason="pyspark is not installed (the [spark] extra)")
    pytest.importorskip("pyarrow")
    current: list[FakeTaskContext | None] = [None]
    monkeypatch.setattr(pyspark.TaskContext, "get", classmethod(lambda cls: current[0]))

    def use(partition: int, **properties: str) -> FakeTaskContext:
        current[0] = FakeTaskContext(partition, **properties)
        return current[0]

    yield use


QUERY = {"sql.streaming.queryId": "3f1c-query", "streaming.sql.batchId": "7"}


def value_schema() -> Any:
    from pyspark.sql.types import StringType, StructField, StructType

    return StructType([StructField("value", StringType(), True)])


def test_options_and_the_driver_side_ids(task_context: Any) -> None:
    from to_pulsar.spark import ToPulsarDataSource, ToPulsarSparkError, plan_write
    from to_pulsar.spark_exactly_once import ExactlyOnce, for_micro_batch, for_write
    from to_pulsar.spark_plan import write_options

    schema = value_schema()
    assert plan_write({"topic": "t"}, schema).exactly_once is None
    assert plan_write({"topic": "t", "exactlyOnce": "TRUE"}, schema).exactly_once == ExactlyOnce()
    options = write_options({"exactly_once": True, "producer_name_prefix": "etl", "topic": "t"})
    assert options == {"exactlyOnce": "true", "producerNamePrefix": "etl", "topic": "t"}
    assert plan_write(options, schema).exactly_once == ExactlyOnce("etl")
    for bad, needle in [
        ({"exactlyOnce": "yes"}, "exactlyOnce must be true or false, got 'yes'"),
        ({"producerNamePrefix": ""}, "must not be empty"),
        ({"producerNamePrefix": "a\nb"}, "printable UTF-8"),
        ({"producerNamePrefix": "x" * 208}, "must be 1 to 207 bytes"),
    ]:
        with pytest.raises(ToPulsarSparkError, match=needle):
            plan_write({"topic": "t", **bad}, schema)
    plan_write({"topic": "t", "producerNamePrefix": "x" * 207}, schema)

    # A batch write: one id made on the driver, the same in every (pickled) task.
    source = ToPulsarDataSource({"topic": "t", "exactlyOnce": "true"})
    writer = source.writer(schema, False)
    naming = writer.plan.exactly_once
    assert len(naming.write_id) == 32 and not naming.streaming and naming.batch_id is None
    assert pickle.loads(pickle.dumps(writer)).plan.exactly_once == naming
    assert source.writer(schema, False).plan.exactly_once.write_id != naming.write_id
    # The format's stream: ids read in each task.
    streaming = source.streamWriter(schema, False).plan.exactly_once
    assert (streaming.write_id, streaming.batch_id, streaming.streaming) == (None, None, True)
    # foreach_batch: the query id as the driver sees it inside foreachBatch.
    plan = plan_write({"topic": "t", "exactlyOnce": "true"}, schema)

    class Context:
        def getLocalProperty(self, key: str) -> str | None:
            return QUERY.get(key)

    class Session:
        sparkContext = Context()

    micro = for_micro_batch(plan, Session(), 9).exactly_once
    assert (micro.write_id, micro.batch_id, micro.streaming) == ("3f1c-query", 9, True)
    connect = for_micro_batch(plan, object(), 9).exactly_once  # no SparkContext: tasks read it
    assert (connect.write_id, connect.batch_id) == (None, 9)
    assert for_write(plan, Session(), None).exactly_once.write_id != plan.exactly_once.write_id
    with pytest.raises(ToPulsarSparkError, match="micro-batch id -1 is out of range"):
        for_micro_batch(plan, Session(), -1)
    off = plan_write({"topic": "t"}, schema)
    assert for_write(off, Session(), 3) is off and for_write(off, Session(), None) is off


def test_a_task_names_its_producer_first(task_context: Any, fake: FakeStreamDaemon) -> None:
    import pyarrow as pa
    from pyspark.sql import Row
    from to_pulsar.spark import plan_write
    from to_pulsar.spark_exactly_once import for_batch_write, for_micro_batch, for_stream

    plan = plan_write({"topic": "t", "exactlyOnce": "true", "socket": str(fake.path)},
                      value_schema())  # fmt: skip
    batch = pa.record_batch([pa.array(["a", "b", "c"])], names=["value"])

    # A batch write, the Arrow path (the format, mapInArrow): 0 onwards.
    task_context(3)
    batch_plan = for_batch_write(plan)
    assert batch_plan.write(iter([batch])).acked == 3
    write_id = batch_plan.exactly_once.write_id
    # The row path (write() through df.rdd), partition 0.
    task_context(0)
    assert batch_plan.write(iter([Row(value="d")])).acked == 1
    # The format's stream: query and micro-batch ids from the task's local properties.
    task_context(1, **QUERY)
    assert for_stream(plan).write(iter([batch])).acked == 3
    # foreach_batch: the micro-batch id from the driver.
    task_context(2, **QUERY)
    assert for_micro_batch(plan, object(), 8).write(iter([batch])).acked == 3
    assert fake.producers == [
        (0, encode_producer_record(f"to_pulsar-{write_id}-3", 0)),
        (1, encode_producer_record(f"to_pulsar-{write_id}-0", 0)),
        (2, encode_producer_record("to_pulsar-3f1c-query-1", 7 << 32)),
        (3, encode_producer_record("to_pulsar-3f1c-query-2", 8 << 32)),
    ]
    assert [len(flush.records) for flush in fake.flushes] == [3, 1, 3, 3]
    assert len(fake.message_records()) == 10
    # An empty task connects to nothing, so names nothing.
    assert for_stream(plan).write(iter([])).rows == 0
    assert fake.connections == 4


def test_a_stream_task_without_its_ids_fails(task_context: Any, fake: FakeStreamDaemon) -> None:
    from to_pulsar.spark import ToPulsarSparkError, plan_write
    from to_pulsar.spark_exactly_once import for_stream

    plan = for_stream(plan_write({"topic": "t", "exactlyOnce": "true"}, value_schema()))
    plan = dataclasses.replace(plan, socket=str(fake.path))
    task_context(0, **{"sql.streaming.queryId": "q"})  # no micro-batch id
    with pytest.raises(ToPulsarSparkError, match="no streaming query or micro-batch id"):
        plan.write(iter([("a",)]))
    assert fake.producers == [] and fake.message_records() == []
