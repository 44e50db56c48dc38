"""to_pulsar.spark's planning and per-task writing, without a Spark session.

The task side (rows or Arrow batches -> records -> flush -> commit or fail) runs
against the fake stream daemon; the planning side against hand-built schemas.
The Spark session tests are in tests/integration/test_spark.py.
"""

from __future__ import annotations

import dataclasses
import datetime
import pickle
import socket
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import to_pulsar

pytest.importorskip("pyspark", reason="pyspark is not installed (the [spark] extra)")
pa = pytest.importorskip("pyarrow")

from pyspark.sql import Row  # noqa: E402
from pyspark.sql.types import (  # noqa: E402
    BinaryType,
    DoubleType,
    IntegerType,
    LongType,
    ShortType,
    StringType,
    StructField,
    StructType,
    TimestampNTZType,
    TimestampType,
)
from to_pulsar import encode_any_partition, encode_partition_key  # noqa: E402
from to_pulsar import spark as to_pulsar_spark  # noqa: E402
from to_pulsar import spark_ship as to_pulsar_spark_ship  # noqa: E402
from to_pulsar.spark import (  # noqa: E402
    ToPulsarCommitMessage,
    ToPulsarDataSource,
    ToPulsarSparkError,
    plan_write,
)
from to_pulsar.spark_plan import write_options  # noqa: E402
from to_pulsar.spark_task import TaskPlan, TaskResult, stream_socket_beside  # noqa: E402

from tests.support.fakestream import FakeStreamDaemon, Flush, flush_response  # noqa: E402

MS = 1_700_000_000_123


@pytest.fixture
def sock_path(tmp_path: Path) -> Iterator[Path]:
    if len(str(tmp_path)) < 90:
        yield tmp_path / "s.sock"
        return
    with tempfile.TemporaryDirectory(prefix="tp") as short:
        yield Path(short) / "s.sock"


def schema(**columns: object) -> StructType:
    return StructType([StructField(name, t, True) for name, t in columns.items()])


FULL = schema(
    value=StringType(),
    key=BinaryType(),
    partition_key=LongType(),
    topic=StringType(),
    timestamp=TimestampType(),
    other=DoubleType(),
)


def plan(s: StructType, **options: str) -> TaskPlan:
    return plan_write(options, s)


# -- planning ------------------------------------------------------------------------------------


def test_plan_finds_columns_case_insensitively_and_reads_options() -> None:
    p = plan(
        schema(Value=BinaryType(), TS=LongType(), timestamp=LongType(), Partition_Key=ShortType()),
        topic="t",
        socket="/x.sock",
        flushTimeoutMs="1500",
        tolerateDiscards="TRUE",
    )
    assert (p.value, p.partition_key, p.timestamp, p.key, p.topic_column) == (0, 3, 2, None, None)
    assert (p.socket, p.topic, p.flush_timeout_s) == ("/x.sock", "t", 1.5)
    assert p.tolerate_discards is True
    assert p.timestamp_kind == "ms"
    defaults = plan(schema(value=StringType()), topic="t")
    assert (defaults.socket, defaults.flush_timeout_s, defaults.tolerate_discards) == (
        None,
        60.0,
        False,
    )


@pytest.mark.parametrize(
    ("columns", "options", "message"),
    [
        (
            {"payload": StringType()},
            {"topic": "t"},
            "to_pulsar: the DataFrame needs a 'value' column (string or binary)",
        ),
        (
            {"value": LongType()},
            {"topic": "t"},
            "column 'value' must be string or binary, not bigint",
        ),
        ({"value": StringType(), "key": IntegerType()}, {"topic": "t"}, "'key' must be string"),
        (
            {"value": StringType(), "partition_key": StringType()},
            {"topic": "t"},
            "to_pulsar: column 'partition_key' must be an integer type "
            "(tinyint, smallint, int or bigint), not string",
        ),
        ({"value": StringType(), "topic": BinaryType()}, {}, "'topic' must be string, not binary"),
        ({"value": StringType(), "timestamp": StringType()}, {"topic": "t"}, "'timestamp' must be"),
        ({"value": StringType()}, {}, "no topic: set .option('topic', ...) or add a 'topic'"),
        ({"value": StringType()}, {"topic": "t", "flushTimeoutMs": "0"}, "positive number"),
        ({"value": StringType()}, {"topic": "t", "tolerateDiscards": "yes"}, "true or false"),
        (
            {"value": StringType()},
            {"topic": "a/b/c/d"},
            "to_pulsar: option 'topic': invalid topic 'a/b/c/d': expected t, ",
        ),
    ],
)
def test_plan_rejects_bad_schemas_and_options(
    columns: dict[str, object], options: dict[str, str], message: str
) -> None:
    with pytest.raises(ToPulsarSparkError) as info:
        plan(schema(**columns), **options)
    assert message in str(info.value)


def test_data_source_refuses_overwrite() -> None:
    source = ToPulsarDataSource({"topic": "t"})
    assert ToPulsarDataSource.name() == "to_pulsar"
    with pytest.raises(ToPulsarSparkError, match=r"mode\('append'\)"):
        source.writer(schema(value=StringType()), True)
    writer = pickle.loads(pickle.dumps(source.writer(schema(value=StringType()), False)))
    assert writer.plan.topic == "t"
    assert pickle.loads(pickle.dumps(source.streamWriter(schema(value=StringType()), True)))


# -- one task --------------------------------------------------------------------------------


def arrow_batch() -> object:
    return pa.record_batch(
        [
            pa.array(["a", None, "c"], pa.string()),
            pa.array([b"k1", None, b"\xff"], pa.binary()),
            pa.array([None, 7, 4_294_967_295], pa.int64()),
            pa.array([None, "other", None], pa.string()),
            pa.array([MS * 1000 + 999, None, 0], pa.timestamp("us", tz="UTC")),
            pa.array([1.0, 2.0, 3.0]),
        ],
        names=["value", "key", "partition_key", "topic", "timestamp", "other"],
    )


def test_arrow_batches_become_records(fake: FakeStreamDaemon) -> None:
    p = plan(FULL, topic="default", socket=str(fake.path))
    commit = p.write(iter([arrow_batch(), arrow_batch()]))
    assert commit == TaskResult(6, 6, {}, commit.host)
    assert ToPulsarCommitMessage.of(commit) == ToPulsarCommitMessage(6, 6, {}, commit.host)
    records = fake.message_records()
    assert records[:3] == [
        encode_any_partition("default", b"a", b"k1", MS),
        encode_partition_key(7, "other", b"", b"", records_ts(records[1])),  # null ts: now
        encode_partition_key(4_294_967_295, "default", b"c", b"\xff", 0),
    ]
    assert len(records) == 6 and (records[3], records[5]) == (records[0], records[2])
    assert len(fake.flushes) == 1  # one connection, one flush per task


def test_rows_become_records_with_local_and_ntz_timestamps(fake: FakeStreamDaemon) -> None:
    local = plan(
        schema(value=BinaryType(), timestamp=TimestampType(), partition_key=IntegerType()),
        topic="t",
        socket=str(fake.path),
    )
    # pyspark hands TimestampType to Python as naive local time.
    naive_local = datetime.datetime.fromtimestamp(MS / 1000)
    ntz = plan(schema(value=StringType(), timestamp=TimestampNTZType()), topic="t")
    ntz = dataclasses.replace(ntz, socket=str(fake.path))
    local.write(iter([Row(value=b"r", timestamp=naive_local, partition_key=-1)]))
    ntz.write(iter([Row(value="n", timestamp=datetime.datetime(2023, 11, 14, 22, 13, 20, 123000))]))
    assert fake.message_records() == [
        encode_partition_key(-1, "t", b"r", b"", MS),
        encode_any_partition("t", b"n", b"", MS),
    ]


def test_discards_fail_the_task_with_counts(fake: FakeStreamDaemon) -> None:
    def policy(flush: Flush) -> bytes:
        return flush_response(flush.request_id, len(flush.records) - 2, {"too_large": 2})

    fake.policy = policy
    p = plan(schema(value=StringType(), partition_key=LongType()), topic="t", socket=str(fake.path))
    batch = pa.record_batch(
        [pa.array([str(i) for i in range(10)]), pa.array([1, 2, 3, 2**40, 5, 6, 7, 8, 9, 10])],
        names=["value", "partition_key"],
    )
    with pytest.raises(ToPulsarSparkError) as info:
        p.write(iter([batch]))
    message = str(info.value)
    assert "to_pulsar: 3 of 10 rows were not delivered (invalid 1, too_large 2), 7 acked" in message
    assert "first invalid row 4: partition key must be in" in message
    assert "tolerateDiscards=true" in message

    tolerant = dataclasses.replace(p, tolerate_discards=True)
    commit = tolerant.write(iter([batch]))
    assert (commit.rows, commit.acked, commit.discarded) == (10, 7, {"too_large": 2, "invalid": 1})


def test_a_row_without_topic_is_invalid(fake: FakeStreamDaemon) -> None:
    p = plan(schema(value=StringType(), topic=StringType()), socket=str(fake.path))
    batch = pa.record_batch([pa.array(["a", "b"]), pa.array(["t", None])], names=["value", "topic"])
    with pytest.raises(ToPulsarSparkError, match="row 2: no topic"):
        p.write(iter([batch]))


def test_empty_task_needs_no_daemon(sock_path: Path) -> None:
    p = plan(schema(value=StringType()), topic="t", socket=str(sock_path))
    assert p.write(iter([])).rows == 0
    with pytest.raises(ToPulsarSparkError, match="no daemon listening on stream socket"):
        p.write(iter([Row(value="x")]))


def test_no_confirmation_in_time(fake: FakeStreamDaemon) -> None:
    fake.policy = lambda flush: b""
    p = plan(schema(value=StringType()), topic="t", socket=str(fake.path), flushTimeoutMs="200")
    with pytest.raises(ToPulsarSparkError, match=r"within 0\.2 s for 1 rows \(flushTimeoutMs\)"):
        p.write(iter([Row(value="x")]))


def test_daemon_closing_the_connection_fails_the_task(fake: FakeStreamDaemon) -> None:
    fake.policy = lambda flush: None
    p = plan(schema(value=StringType()), topic="t", socket=str(fake.path))
    with pytest.raises(ToPulsarSparkError, match=r"task failed after 1 rows on .*closed"):
        p.write(iter([Row(value="x")]))


def test_default_socket_is_resolved_on_the_executor(
    fake: FakeStreamDaemon, monkeypatch: pytest.MonkeyPatch
) -> None:
    p = plan(schema(value=StringType()), topic="t")
    assert p.socket is None
    monkeypatch.setenv("TO_PULSAR_STREAM_SOCKET", str(fake.path))
    assert p.write(iter([Row(value="x")])).acked == 1
    assert to_pulsar.resolve_stream_socket_path() == str(fake.path)


# -- the socket option: the datagram socket means the stream socket beside it -----------------


@pytest.fixture
def datagram_socket(sock_path: Path) -> Iterator[Path]:
    """A bound datagram socket at <dir>/bruce.sock, as the daemon's."""
    path = sock_path.parent / "bruce.sock"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.bind(str(path))
        yield path


def test_the_datagram_socket_path_means_the_stream_socket_beside_it(
    datagram_socket: Path,
) -> None:
    beside = FakeStreamDaemon(datagram_socket.parent / "bruce.stream.sock")
    try:
        p = plan(schema(value=StringType(), timestamp=LongType()), topic="t",
                 socket=str(datagram_socket))  # fmt: skip
        assert p.write(iter([Row(value="x", timestamp=MS), Row(value="y", timestamp=1)])).acked == 2
        assert beside.message_records() == [
            encode_any_partition("t", b"x", b"", MS),
            encode_any_partition("t", b"y", b"", 1),
        ]
    finally:
        beside.close()


def test_a_datagram_socket_without_a_stream_socket_beside_it(datagram_socket: Path) -> None:
    p = plan(schema(value=StringType()), topic="t", socket=str(datagram_socket))
    with pytest.raises(ToPulsarSparkError) as info:
        p.write(iter([Row(value="x")]))
    message = str(info.value)
    assert f"{datagram_socket} is the daemon's datagram socket" in message
    assert f"no daemon listening on stream socket {datagram_socket.parent}/bruce.stream.sock" in (
        message
    )


def test_the_stream_socket_beside_follows_the_daemons_auto_rule() -> None:
    config = pytest.importorskip("pulsar_bruce.config")
    for path in ("/run/pulsar-bruce/bruce.sock", "./run/x.sock", "/tmp/odd-name"):
        daemon = config.load_config({"socket": path}, {})
        assert stream_socket_beside(path) == daemon.stream_socket_path


# -- write(): the row path, and what the executors need ----------------------------------------


def test_write_options_are_the_formats_with_python_values() -> None:
    options = write_options(
        {"Topic": "t", "tolerateDiscards": True, "flushtimeoutms": 1500, "socket": None}
    )
    assert options == {"topic": "t", "tolerateDiscards": "true", "flushTimeoutMs": "1500"}
    assert plan(schema(value=StringType()), **options).flush_timeout_s == 1.5
    with pytest.raises(ToPulsarSparkError, match="unknown option 'topc' \\(options: socket, "):
        to_pulsar_spark.foreach_batch(topc="t")


def test_rows_with_microsecond_timestamps(fake: FakeStreamDaemon) -> None:
    """What write() hands the tasks for a timestamp column: exact microseconds."""
    p = plan(schema(value=StringType(), timestamp=TimestampType()), topic="t")
    p = dataclasses.replace(p, socket=str(fake.path), timestamp_kind="us")
    p.write(iter([Row(value="a", timestamp=MS * 1000 + 999), Row(value="b", timestamp=None)]))
    records = fake.message_records()
    assert records[0] == encode_any_partition("t", b"a", b"", MS)
    assert records_ts(records[1]) > MS  # null: now


def test_the_shipped_zip_runs_the_task_side_without_site_packages() -> None:
    archive = to_pulsar_spark_ship.package_zip()
    assert archive is not None and archive == to_pulsar_spark_ship.package_zip()  # built once
    names = zipfile.ZipFile(archive).namelist()
    assert {"to_pulsar/__init__.py", "to_pulsar/spark_task.py", "to_pulsar/py.typed"} <= set(names)
    assert not [n for n in names if not n.startswith("to_pulsar/") or "__pycache__" in n]
    sources = [name for name in names if name.endswith(".py")]
    assert sorted(name for name in names if name.endswith(".pyc")) == [f"{n}c" for n in sources]
    # -I -S: no site-packages at all, so neither pyspark nor pyarrow nor an installed to_pulsar.
    script = (
        "import sys; sys.path.insert(0, sys.argv[1]); "
        "import to_pulsar.spark_task as t, to_pulsar.spark_plan; "
        "assert t.__file__.startswith(sys.argv[1]), t.__file__; "
        "assert not {'pyspark', 'pyarrow'} & set(sys.modules); print(t.__file__[-4:])"
    )
    done = subprocess.run(
        [sys.executable, "-I", "-S", "-c", script, str(archive)], capture_output=True, text=True
    )
    assert (done.returncode, done.stdout, done.stderr) == (0, ".pyc\n", "")  # not compiled


def test_the_shipped_bytecode_of_another_python_is_passed_over(tmp_path: Path) -> None:
    """A worker whose Python is another version than the driver's (its magic number) imports
    the shipped sources instead."""
    archive = to_pulsar_spark_ship.package_zip()
    assert archive is not None
    other = tmp_path / "other.zip"
    with zipfile.ZipFile(archive) as source, zipfile.ZipFile(other, "w") as copy:
        for name in source.namelist():
            data = source.read(name)
            copy.writestr(name, b"\0\0\r\n" + data[4:] if name.endswith(".pyc") else data)
    script = "import sys; sys.path.insert(0, sys.argv[1]); import to_pulsar.spark_task as t; "
    script += "print(t.__file__[-3:])"
    done = subprocess.run(
        [sys.executable, "-I", "-S", "-c", script, str(other)], capture_output=True, text=True
    )
    assert (done.returncode, done.stdout, done.stderr) == (0, ".py\n", "")


def test_the_format_says_what_to_do_without_pyarrow(monkeypatch: pytest.MonkeyPatch) -> None:
    real = to_pulsar_spark.importlib.util.find_spec
    monkeypatch.setattr(
        to_pulsar_spark.importlib.util,
        "find_spec",
        lambda name, *args: None if name == "pyarrow" else real(name, *args),
    )
    source = ToPulsarDataSource({"topic": "t"})
    for make in (source.writer, source.streamWriter):
        with pytest.raises(ToPulsarSparkError) as info:
            make(schema(value=StringType()), False)
        assert f"({sys.executable}) has no pyarrow" in str(info.value)
        assert "use to_pulsar.spark.write(df, ...) or foreach_batch(...)" in str(info.value)


def records_ts(record: bytes) -> int:
    """Timestamp of a PartitionKey record."""
    import struct

    (topic_size,) = struct.unpack_from(">h", record, 14)
    return int(struct.unpack_from(">q", record, 16 + topic_size)[0])


def test_a_properties_column_becomes_message_properties(fake: FakeStreamDaemon) -> None:
    """A map<string,string> 'properties' column sends the Message record (ApiKey 260)."""
    import struct

    from pyspark.sql.types import MapType
    from to_pulsar.encoding import encode_message_record

    p = plan(
        schema(value=StringType(), properties=MapType(StringType(), StringType())),
        topic="t",
        socket=str(fake.path),
    )
    batch = pa.record_batch(
        [
            pa.array(["a", "b"]),
            pa.array([[("source", "web")], None], pa.map_(pa.string(), pa.string())),
        ],
        names=["value", "properties"],
    )
    assert p.write(iter([batch, Row(value="c", properties={"n": "1"})])).acked == 3
    records = fake.message_records()
    assert records[0] == encode_message_record("t", b"a", b"", records_ts(records[0]), None,
                                               {"source": "web"})  # fmt: skip
    (topic_size,) = struct.unpack_from(">h", records[1], 10)  # AnyPartition: ts after topic
    (any_ts,) = struct.unpack_from(">q", records[1], 12 + topic_size)
    assert records[1] == encode_any_partition("t", b"b", b"", any_ts)
    assert records[2] == encode_message_record("t", b"c", b"", records_ts(records[2]), None,
                                               {"n": "1"})  # fmt: skip
    with pytest.raises(ToPulsarSparkError, match="map<string,string>"):
        plan(schema(value=StringType(), properties=MapType(StringType(), IntegerType())), topic="t")


def test_write_arrow_is_write_with_one_arrow_row_for_the_driver(fake: FakeStreamDaemon) -> None:
    """What write() runs in mapInArrow where the executors have pyarrow: the task as the
    format's, its outcome as one row of RESULT_SCHEMA."""
    from to_pulsar.spark_task import RESULT_SCHEMA, python_has_arrow

    def policy(flush: Flush) -> bytes:
        return flush_response(flush.request_id, len(flush.records) - 1, {"too_large": 1})

    fake.policy = policy
    p = plan(FULL, topic="default", socket=str(fake.path), tolerateDiscards="true")
    (result,) = list(p.write_arrow(iter([arrow_batch()])))
    assert RESULT_SCHEMA.startswith("rows BIGINT, acked BIGINT, discarded MAP<STRING, BIGINT>")
    assert result.schema.names == ["rows", "acked", "discarded", "host"]
    assert result.schema.field("discarded").type == pa.map_(pa.string(), pa.int64())
    row = result.to_pylist()[0]
    assert row == {"rows": 3, "acked": 2, "discarded": [("too_large", 1)], "host": row["host"]}
    assert fake.message_records()[0] == encode_any_partition("default", b"a", b"k1", MS)
    assert python_has_arrow()


_NO_PANDAS = """
import pickle, sys
import pyarrow as pa
from to_pulsar.spark_arrow import encode_batch
plan = pickle.loads(open(sys.argv[1], "rb").read())
batches = list(pa.ipc.open_stream(open(sys.argv[2], "rb").read()))
assert "pandas" not in sys.modules
assert all(encode_batch(batch, plan, 0) is not None for batch in batches)
(result,) = plan.write_arrow(iter(batches))
from to_pulsar.spark_warm_up import prepare_write_worker
(ready,) = prepare_write_worker(iter(batches))
assert ready.num_rows == 1
print(result.to_pylist()[0]["rows"], "pandas" in sys.modules)
"""


def test_a_mapinarrow_task_does_not_import_pandas(fake: FakeStreamDaemon, tmp_path: Path) -> None:
    """pyarrow imports pandas (0.5 s in a fresh Spark worker) at its first conversion from
    Python values or to numpy: write()'s tasks (Arrow batches to records to their result
    row) and its warm-up's make none, in a Python that has pandas."""
    p = plan(FULL, topic="default", socket=str(fake.path))
    batch = arrow_batch()
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, batch.schema) as stream:
        stream.write_batch(batch)
        stream.write_batch(batch.slice(1))
    (tmp_path / "plan").write_bytes(pickle.dumps(p))
    (tmp_path / "batches").write_bytes(sink.getvalue().to_pybytes())
    argv = [sys.executable, "-c", _NO_PANDAS, str(tmp_path / "plan"), str(tmp_path / "batches")]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["5", "False"]
    assert len(fake.message_records()) == 5


def test_a_reused_spark_worker_is_frozen_once_and_nothing_else_is(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """pyspark's reused workers gc.collect() after every task: the first to_pulsar task
    freezes what is alive then, once; any other process (these tests) is left alone."""
    import gc

    from to_pulsar import spark_task

    freezes: list[int] = []
    real_freeze = gc.freeze

    def counted_freeze() -> None:  # (the frozen count itself drops as frozen objects die)
        freezes.append(gc.get_freeze_count())
        real_freeze()

    monkeypatch.setattr(gc, "freeze", counted_freeze)
    monkeypatch.setattr(spark_task, "_frozen", False)
    monkeypatch.delenv("SPARK_REUSE_WORKER", raising=False)
    spark_task.freeze_worker_once()
    assert freezes == [] and not spark_task._frozen
    monkeypatch.setenv("SPARK_REUSE_WORKER", "1")
    try:
        spark_task.freeze_worker_once()
        assert len(freezes) == 1 and spark_task._frozen
        assert gc.get_freeze_count() > freezes[0]  # what was alive is frozen now
        spark_task.freeze_worker_once()
        assert len(freezes) == 1
    finally:
        gc.unfreeze()
