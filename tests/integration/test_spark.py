"""The "to_pulsar" Spark data source: a local Spark session, a real daemon, a real broker.

Rows are read back with the official client. One Spark session for the module
(starting one takes seconds); each test has its own daemon and topic.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
import uuid
from pathlib import Path
from typing import Any

import pytest

from tests.support.consume import consume
from tests.support.processes import ROOT, Broker

pytestmark = [pytest.mark.spark, pytest.mark.broker]

pyspark = pytest.importorskip("pyspark", reason="pyspark is not installed (the [spark] extra)")

BASE_MS = 1_700_000_000_000


def start(start_daemon, broker: Broker, tmp_path: Path, *args: str) -> tuple[Any, str]:
    stream = str(tmp_path / "st.sock")
    return start_daemon(broker.url, "--stream-socket", stream, *args), stream


def full(topic: str) -> str:
    return f"persistent://public/default/{topic}"


def test_batch_20000_rows_land_complete_on_their_partitions(
    spark: Any, broker: Broker, start_daemon, tmp_path: Path
) -> None:
    daemon, stream = start(start_daemon, broker, tmp_path)
    topic = f"spark-batch-{uuid.uuid4().hex[:8]}"
    daemon.warm_up(topic, 4)  # so no keyed row is failed over while producers connect
    n = 20_000
    df = spark.range(n, numPartitions=4).selectExpr(
        "concat('v-', id) AS value",
        "concat('k', id) AS key",
        "id AS partition_key",
        f"timestamp_millis({BASE_MS} + id) AS timestamp",
        "id AS unrelated_column",
    )
    df.write.format("to_pulsar").option("socket", stream).option("topic", topic).mode(
        "append"
    ).save()
    # The job committed only after every row was acked.
    counters = daemon.counters()
    assert counters.acked == n + 1 and counters.total_discarded == 0

    messages = [m for m in consume(broker.url, full(topic), n + 1, 120) if m.value != b"warm-up"]
    assert len(messages) == n
    by_id = {int(m.value.decode().removeprefix("v-")): m for m in messages}
    assert sorted(by_id) == list(range(n))
    for i, message in by_id.items():
        assert message.key == f"k{i}"
        assert message.partition == i % 4
        assert message.event_time == BASE_MS + i


def test_register_starts_the_formats_python_processes_in_the_background(spark: Any) -> None:
    """register() writes through the format from a thread of its own, sending nothing, so the
    Python processes Spark runs a write in (planning, tasks, commit) are running before the
    first write, not started one after the other by it (about 6 s on 2 cores). That thread
    has no active Spark session, where Spark looks the format up (it once failed with
    DATA_SOURCE_NOT_FOUND); a task that connected would fail on this host's missing default
    socket."""
    from to_pulsar import spark_warm_up

    for thread in threading.enumerate():
        if thread.name == "to_pulsar warm-up":
            thread.join(180)
    assert spark_warm_up.outcomes.get(spark.sparkContext.applicationId) == ""


def test_warm_up_starts_the_workers_write_runs_in(spark: Any) -> None:
    """warm_up() runs, from a thread of its own, a mapInArrow job of one task per slot: the
    Python workers write()'s tasks run in start and import before its first write, once
    per application, where the executors have pyarrow (asked as write() asks: here, the
    local workers run this interpreter)."""
    import to_pulsar.spark
    from to_pulsar import spark_driver, spark_warm_up

    application = spark.sparkContext.applicationId
    spark_warm_up._started.discard(f"tasks {application}")
    spark_driver._ARROW_ON_EXECUTORS.pop(application, None)
    to_pulsar.spark.warm_up(spark)
    for thread in threading.enumerate():
        if thread.name == "to_pulsar warm-up":
            thread.join(180)
    assert spark_driver._ARROW_ON_EXECUTORS[application] is True
    assert spark_warm_up.start_tasks(spark, lambda: True) is None


def test_topic_column_binary_values_and_long_timestamps(
    spark: Any, broker: Broker, start_daemon, tmp_path: Path
) -> None:
    daemon, stream = start(start_daemon, broker, tmp_path)
    prefix = f"spark-cols-{uuid.uuid4().hex[:8]}"
    df = spark.range(10, numPartitions=2).selectExpr(
        "unhex(concat('00ff', lpad(hex(id), 2, '0'))) AS value",
        "CASE WHEN id % 2 = 0 THEN NULL ELSE cast(concat('bk', id) AS binary) END AS key",
        f"concat('{prefix}-', id % 2) AS topic",
        f"{BASE_MS} + id AS timestamp",
    )
    df.write.format("to_pulsar").option("socket", stream).mode("append").save()
    for parity in (0, 1):
        messages = consume(broker.url, full(f"{prefix}-{parity}"), 5)
        values = sorted(m.value for m in messages)
        assert values == [bytes([0, 255, i]) for i in range(parity, 10, 2)]
        for message in messages:
            i = message.value[2]
            assert message.key == ("" if i % 2 == 0 else f"bk{i}")
            assert message.event_time == BASE_MS + i
    assert daemon.counters().acked == 10


def test_a_properties_column_arrives_as_message_properties(
    spark: Any, broker: Broker, start_daemon, tmp_path: Path
) -> None:
    """A map<string,string> 'properties' column: the official consumer's properties()."""
    daemon, stream = start(start_daemon, broker, tmp_path)
    topic = f"spark-props-{uuid.uuid4().hex[:8]}"
    df = spark.range(6, numPartitions=2).selectExpr(
        "concat('v-', id) AS value",
        "CASE WHEN id = 5 THEN NULL ELSE map('row', cast(id AS string), 'job', 'spark') END"
        " AS properties",
    )
    df.write.format("to_pulsar").option("socket", stream).option("topic", topic).mode(
        "append"
    ).save()
    assert daemon.counters().acked == 6
    received = {m.value: m.properties for m in consume(broker.url, full(topic), 6)}
    assert received == {
        **{f"v-{i}".encode(): {"row": str(i), "job": "spark"} for i in range(5)},
        b"v-5": {},
    }


def test_write_takes_the_formats_arrow_path_where_the_executors_have_pyarrow(
    spark: Any, broker: Broker, start_daemon, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """to_pulsar.spark.write() asks an executor once whether its Python has pyarrow; these
    have it, so the tasks get Arrow batches (mapInArrow), as the format's do, never Rows
    through df.rdd: every column, discards and the failing task's message included; and
    foreach_batch() for streams, which calls it."""
    import to_pulsar.spark
    from pyspark.sql import DataFrame
    from to_pulsar import spark_driver

    def no_rdd(self: Any) -> Any:
        raise AssertionError("write() went through df.rdd")

    monkeypatch.setattr(DataFrame, "rdd", property(no_rdd))
    daemon, stream = start(start_daemon, broker, tmp_path, "--max-message-bytes", "1024")
    topic = f"spark-write-arrow-{uuid.uuid4().hex[:8]}"
    daemon.warm_up(topic, 4)
    n = 3000
    df = spark.range(n, numPartitions=3).selectExpr(
        "CASE WHEN id = 7 THEN repeat('x', 2000) ELSE concat('v-', id) END AS value",
        "cast(concat('k', id) AS binary) AS key",
        "id AS partition_key",
        f"timestamp_millis({BASE_MS} + id) AS timestamp",
        "CASE WHEN id % 2 = 0 THEN map('row', cast(id AS string)) END AS properties",
        "id * 2 AS other",
    )
    with pytest.raises(to_pulsar.spark.ToPulsarSparkError) as info:  # another topic: the
        to_pulsar.spark.write(df, topic=f"{topic}-f", socket=stream)  # other tasks may run
    assert "1 of 1000 rows were not delivered (too_large 1), 999 acked" in str(info.value)
    summary = to_pulsar.spark.write(df, topic=topic, socket=stream, tolerateDiscards=True)
    assert summary == to_pulsar.spark.WriteSummary(3, n, n - 1, {"too_large": 1})
    assert spark_driver._ARROW_ON_EXECUTORS[spark.sparkContext.applicationId] is True

    messages = [m for m in consume(broker.url, full(topic), n, 120) if m.value != b"warm-up"]
    assert len(messages) == n - 1
    by_id = {int(m.value.decode().removeprefix("v-")): m for m in messages}
    assert sorted(by_id) == [i for i in range(n) if i != 7]
    for i, message in by_id.items():
        assert (message.key, message.partition, message.event_time) == (f"k{i}", i % 4, BASE_MS + i)
        assert message.properties == ({"row": str(i)} if i % 2 == 0 else {})

    # foreach_batch: each micro-batch through write(), so through Arrow too.
    source = tmp_path / "in"
    source.mkdir()
    for f in range(2):
        (source / f"{f}.json").write_text("".join(f'{{"id": {f * 5 + i}}}\n' for i in range(5)))
    query = (
        spark.readStream.schema("id BIGINT").option("maxFilesPerTrigger", 1).json(str(source))
        .selectExpr("concat('s-', id) AS value")
        .writeStream.foreachBatch(to_pulsar.spark.foreach_batch(topic=f"{topic}-s", socket=stream))
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )  # fmt: skip
    assert query.awaitTermination(120), "the query did not finish"
    assert query.exception() is None
    assert [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]] == [5, 5]
    streamed = consume(broker.url, full(f"{topic}-s"), 10)
    assert sorted(m.value for m in streamed) == sorted(f"s-{i}".encode() for i in range(10))


def test_discarded_rows_fail_the_job_with_the_counts(
    spark: Any, broker: Broker, start_daemon, tmp_path: Path
) -> None:
    daemon, stream = start(start_daemon, broker, tmp_path, "--max-message-bytes", "1024")
    topic = f"spark-discard-{uuid.uuid4().hex[:8]}"
    df = spark.range(100, numPartitions=1).selectExpr(
        "CASE WHEN id = 42 THEN repeat('x', 2000) ELSE cast(id AS string) END AS value"
    )
    writer = df.write.format("to_pulsar").option("socket", stream).option("topic", topic)
    with pytest.raises(Exception, match="to_pulsar: ") as info:
        writer.mode("append").save()
    message = str(info.value)
    assert "1 of 100 rows were not delivered (too_large 1), 99 acked" in message
    assert "tolerateDiscards" in message
    assert daemon.counters().discarded["too_large"] == 1

    # Tolerated: the job commits, the 99 others are delivered (again: at-least-once).
    writer.option("tolerateDiscards", "true").mode("append").save()
    assert daemon.counters().discarded["too_large"] == 2
    assert len(consume(broker.url, full(topic), 198)) == 198

    # A streaming query stops with the same message.
    source = tmp_path / "in"
    source.mkdir()
    (source / "rows.json").write_text("".join(f'{{"id": {i}}}\n' for i in range(10)))
    query = (
        spark.readStream.schema("id BIGINT")
        .json(str(source))
        .selectExpr("CASE WHEN id = 3 THEN repeat('y', 2000) ELSE cast(id AS string) END AS value")
        .writeStream.format("to_pulsar")
        .option("socket", stream)
        .option("topic", topic)
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    with pytest.raises(Exception, match="to_pulsar: ") as streaming:
        query.awaitTermination(120)
    assert "1 of 10 rows were not delivered (too_large 1), 9 acked" in str(streaming.value)
    assert query.exception() is not None


def test_schema_and_options_are_checked_before_any_task(spark: Any, tmp_path: Path) -> None:
    missing = str(tmp_path / "no-daemon.sock")

    def save(df: Any, **options: str) -> str:
        writer = df.write.format("to_pulsar").option("socket", missing)
        for name, value in options.items():
            writer = writer.option(name, value)
        with pytest.raises(Exception, match="to_pulsar: ") as info:
            writer.mode("append").save()
        return str(info.value)

    no_value = spark.range(3).selectExpr("cast(id AS string) AS payload")
    assert "to_pulsar: the DataFrame needs a 'value' column (string or binary)" in save(
        no_value, topic="t"
    )
    bad_key = spark.range(3).selectExpr("'v' AS value", "cast(id AS string) AS partition_key")
    assert "to_pulsar: column 'partition_key' must be an integer type" in save(bad_key, topic="t")
    assert "not string" in save(bad_key, topic="t")
    bad_value = spark.range(3).selectExpr("id AS value")
    assert "column 'value' must be string or binary, not bigint" in save(bad_value, topic="t")
    ok = spark.range(3).selectExpr("'v' AS value")
    assert "no topic" in save(ok)
    assert "flushTimeoutMs must be a positive number" in save(ok, topic="t", flushTimeoutMs="x")
    # A good schema with no daemon on the host fails, saying where it looked: with this local
    # master when Spark plans the write, before any task (it was a task failure after the
    # flush timeout, 150 lines of Spark's logs around it), in one frame of traceback.
    said = save(ok, topic="t")
    assert f"no daemon listening on stream socket {missing}" in said
    assert "Failed to initialize Python data source writer" in said
    assert "to_pulsar: checking the daemon on " in said and len(said.splitlines()) <= 6


def test_spark_replay_example(
    spark: Any, broker: Broker, start_daemon, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """examples/spark_replay.py, in this session: a CSV as JSON rows through the format, a
    Parquet by column through to_pulsar.spark.write (--rows); one summary line each."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "spark_replay", ROOT / "examples" / "spark_replay.py"
    )
    assert spec is not None and spec.loader is not None
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)

    daemon, stream = start(start_daemon, broker, tmp_path)
    topic = f"spark-replay-{uuid.uuid4().hex[:8]}"
    daemon.warm_up(topic, 4)
    csv = tmp_path / "orders.csv"
    csv.write_text("id,user,amount\n" + "".join(f"{i},u{i % 7},{i * 1.5}\n" for i in range(100)))
    argv = [str(csv), "--topic", topic, "--socket", stream, "--key-column", "user"]
    assert example.main([*argv, "--partition-key-column", "id", "--partitions", "3"]) == 0
    summary = f"spark_replay.py: 100 rows from {csv} into {topic}: 100 acked, 0 discarded ("
    assert capsys.readouterr().out.startswith(summary)

    parquet = tmp_path / "events.parquet"
    spark.range(50).selectExpr("concat('e', id) AS payload", "id").write.parquet(str(parquet))
    assert example.main([str(parquet), "--topic", topic, "--socket", stream,
                         "--value-column", "payload", "--data-source"]) == 0  # fmt: skip
    summary = f"spark_replay.py: 50 rows from {parquet} into {topic}: 50 acked, 0 discarded ("
    assert capsys.readouterr().out.startswith(summary)

    messages = [m for m in consume(broker.url, full(topic), 151) if m.value != b"warm-up"]
    assert len(messages) == 150
    rows = [json.loads(m.value) for m in messages if m.value.startswith(b"{")]
    assert sorted(r["id"] for r in rows) == list(range(100))
    for message in messages:
        if message.value.startswith(b"{"):
            row = json.loads(message.value)
            assert message.key == f"u{row['id'] % 7}" and message.partition == row["id"] % 4
    assert sorted(m.value for m in messages if not m.value.startswith(b"{")) == sorted(
        f"e{i}".encode() for i in range(50)
    )


# -- executors with a bare Python: neither to_pulsar nor pyarrow ---------------------------------

BARE_DRIVER = r'''
import json, os, sys
sys.path.insert(0, sys.argv[1])  # the driver's to_pulsar; PYTHONPATH would reach the executors
from pyspark.sql import SparkSession
import to_pulsar.spark

socket_path, topic, source, checkpoint = sys.argv[2:6]
spark = (SparkSession.builder.master("local[2]").appName("to_pulsar-bare")
         .config("spark.ui.enabled", "false").config("spark.driver.host", "127.0.0.1")
         .config("spark.driver.bindAddress", "127.0.0.1")
         .config("spark.pyspark.python", os.environ["PYSPARK_PYTHON"])
         .config("spark.sql.session.timeZone", "UTC").getOrCreate())
spark.sparkContext.setLogLevel("ERROR")

def probe(_):
    import importlib.util, sys
    yield [sys.executable] + [m for m in ("pyarrow", "to_pulsar") if importlib.util.find_spec(m)]

def report(**what):
    print("REPORT " + json.dumps(what), flush=True)

report(before=spark.sparkContext.parallelize([0, 1], 2).mapPartitions(probe).collect())
to_pulsar.spark.register(spark)
to_pulsar.spark.register(spark)  # twice: shipped once
report(after=spark.sparkContext.parallelize([0, 1], 2).mapPartitions(probe).collect(),
       includes=[n for n in spark.sparkContext._python_includes if n.startswith("to_pulsar")])

df = spark.range(2000, numPartitions=2).selectExpr(
    "concat('v-', id) AS value", "concat('k', id) AS key", "id AS partition_key",
    "timestamp_millis(1700000000000 + id) AS timestamp", "id * 2 AS other")
summary = to_pulsar.spark.write(df, topic=topic, socket=socket_path)
report(write=[summary.tasks, summary.rows, summary.acked, summary.discarded])

big = spark.range(10, numPartitions=1).selectExpr(
    "CASE WHEN id = 3 THEN repeat('x', 2000) ELSE concat('b-', id) END AS value")
try:
    to_pulsar.spark.write(big, topic=topic, socket=socket_path)
    report(too_large="no error")
except to_pulsar.spark.ToPulsarSparkError as exc:
    report(too_large=str(exc))

try:
    df.write.format("to_pulsar").option("topic", topic).option("socket", socket_path) \
        .mode("append").save()
    report(format="no error")
except Exception as exc:
    report(format=str(exc))

query = (spark.readStream.schema("id BIGINT").option("maxFilesPerTrigger", 1).json(source)
         .selectExpr("concat('s-', id) AS value")
         .writeStream.foreachBatch(to_pulsar.spark.foreach_batch(topic=topic, socket=socket_path))
         .option("checkpointLocation", checkpoint).trigger(availableNow=True).start())
query.awaitTermination(120)
report(stream=[p["numInputRows"] for p in query.recentProgress if p["numInputRows"]])
spark.stop()
'''


def bare_python(tmp_path: Path) -> str:
    """A venv without pip: the standard library and nothing else."""
    venv = tmp_path / "bare"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = str(venv / "bin" / "python")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    found = subprocess.run(
        [python, "-c", "import importlib.util as u; "
         "print([m for m in ('pyarrow', 'to_pulsar', 'pandas') if u.find_spec(m)])"],
        env=env, capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    assert found == "[]\n"
    return python


def test_bare_executors_need_nothing_but_the_daemon(
    broker: Broker, start_daemon, tmp_path: Path
) -> None:
    """register() ships to_pulsar; write() and foreach_batch() need no pyarrow on the
    executors, deliver the same rows and fail the same way; the format says what to do.
    The daemon is named by its datagram socket (the stream socket beside it is used)."""
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        pytest.skip("no Java runtime for Spark")
    daemon = start_daemon(broker.url, "--max-message-bytes", "1024")
    topic = f"spark-bare-{uuid.uuid4().hex[:8]}"
    daemon.warm_up(topic, 4)
    source = tmp_path / "in"
    source.mkdir()
    for f in range(2):
        (source / f"{f}.json").write_text("".join(f'{{"id": {f * 5 + i}}}\n' for i in range(5)))
    python = bare_python(tmp_path)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYSPARK_DRIVER_PYTHON")}
    env.update(PYSPARK_PYTHON=python, SPARK_LOCAL_IP="127.0.0.1")
    args = [str(ROOT / "client_lib"), daemon.socket_path, topic, str(source),
            str(tmp_path / "checkpoint")]  # fmt: skip
    done = subprocess.run(
        [sys.executable, "-c", BARE_DRIVER, *args],
        env=env, capture_output=True, text=True, timeout=240,
    )  # fmt: skip
    reports: dict[str, Any] = {}
    for line in done.stdout.splitlines():
        if line.startswith("REPORT "):
            reports.update(json.loads(line.removeprefix("REPORT ")))
    assert done.returncode == 0, done.stderr[-3000:]

    assert reports["before"] == [[python], [python]]  # neither package on the executors
    assert reports["after"] == [[python, "to_pulsar"], [python, "to_pulsar"]]
    assert len(reports["includes"]) == 1
    assert reports["write"] == [2, 2000, 2000, {}]
    assert reports["too_large"].startswith(
        "to_pulsar: 1 of 10 rows were not delivered (too_large 1), 9 acked, on "
    )
    assert f"({python}) has no pyarrow" in reports["format"]
    assert reports["stream"] == [5, 5]

    expected = 2000 + 9 + 10
    messages = [m for m in consume(broker.url, full(topic), expected + 1) if m.value != b"warm-up"]
    assert len(messages) == expected
    rows = {m.value.decode(): m for m in messages}
    for i in range(2000):
        message = rows[f"v-{i}"]
        assert (message.key, message.partition, message.event_time) == (
            f"k{i}",
            i % 4,
            1_700_000_000_000 + i,
        )
    assert {v for v in rows if v.startswith("b-")} == {f"b-{i}" for i in range(10) if i != 3}
    assert {v for v in rows if v.startswith("s-")} == {f"s-{i}" for i in range(10)}
