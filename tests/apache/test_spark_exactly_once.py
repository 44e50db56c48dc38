"""exactlyOnce on Apache Pulsar with deduplication on: a Spark task that fails midway and
is retried, and a streaming query restarted from its checkpoint after a failed
micro-batch, store every row exactly once; without exactlyOnce the same retried job
stores the early rows twice (the control).

The failure is injected by a ``mapInArrow`` step before the sink: past a number of rows
it waits (with a deadline) until the daemon has received some of them, so the failed
attempt's early rows really are in Pulsar, then raises. Everything is read back with
the official client's readers, partition by partition, to the end of each.
"""

from __future__ import annotations

import os
import shutil
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.apache_pulsar import ApachePulsar
from tests.support.processes import ROOT, Daemon, wait_for
from tests.support.spark_session import local_session

pytestmark = [pytest.mark.apache, pytest.mark.spark]

pytest.importorskip("pyspark", reason="pyspark is not installed (the [spark] extra)")

#: local[2,4]: two cores, and a task is tried up to 4 times (a local master's maxFailures).
MASTER = "local[2,4]"
PARTITIONS = 3  # the topic's; Spark partitions map onto them by position, not one to one
VALUE_PAD = 600  # bytes a row: a few chunks of the sink's 256 KiB buffer before the failure


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        pytest.skip("no Java runtime for Spark")
    session = local_session(
        "to_pulsar-exactly-once",
        [str(ROOT / "client_lib"), str(ROOT)],  # ROOT: the workers import this module's steps
        **{
            "spark.master": MASTER,
            "spark.sql.shuffle.partitions": "2",
            "spark.sql.execution.arrow.maxRecordsPerBatch": "200",
        },
    )
    if session.sparkContext.master != MASTER:
        session.stop()
        pytest.fail(f"another Spark session ({session.sparkContext.master}) was running")
    yield session
    session.stop()


@pytest.fixture(scope="module")
def namespace(apache: ApachePulsar) -> str:
    name = f"public/eo-{uuid.uuid4().hex[:8]}"
    apache.admin.create_namespace(name)
    apache.admin.set_deduplication(name, True)
    return name


def new_topic(apache: ApachePulsar, namespace: str, prefix: str) -> str:
    topic = f"persistent://{namespace}/{prefix}-{uuid.uuid4().hex[:8]}"
    apache.admin.create_partitioned_topic(topic, PARTITIONS)
    return topic


# -- the injected failure (runs in Spark's Python workers) ------------------------------------


def received(metrics_port: int) -> int:
    """The daemon's ``pulsar_bruce_received_total``, scraped."""
    url = f"http://127.0.0.1:{metrics_port}/metrics"
    with urllib.request.urlopen(url, timeout=10) as response:
        for line in response.read().decode().splitlines():
            if line.startswith("pulsar_bruce_received_total "):
                return int(float(line.split()[1]))
    raise AssertionError("no pulsar_bruce_received_total")


def fail_midway(
    metrics_port: int,
    after_rows: int,
    received_rows: int,
    failing: Callable[[Any], bool],
    baseline: int | None = None,
) -> Callable[[Iterator[Any]], Iterator[Any]]:
    """A ``mapInArrow`` step passing batches through; in a task ``failing(TaskContext)``
    picks, once ``after_rows`` rows have gone by, it waits until the daemon has received
    ``received_rows`` records more than ``baseline`` (default: when the task started),
    then raises."""

    def step(batches: Iterator[Any]) -> Iterator[Any]:
        from pyspark import TaskContext

        fails = failing(TaskContext.get())
        start = received(metrics_port) if baseline is None else baseline
        rows = 0
        for batch in batches:
            if fails and rows >= after_rows:
                deadline = time.monotonic() + 60
                while received(metrics_port) < start + received_rows:
                    if time.monotonic() > deadline:
                        break  # fail anyway; the test's checks will say what was missing
                    time.sleep(0.05)
                raise RuntimeError(f"injected failure after {rows} rows")
            yield batch
            rows += batch.num_rows

    return step


def first_attempt(context: Any) -> bool:
    return bool(context.attemptNumber() == 0)


# -- reading back -----------------------------------------------------------------------------


def read_all(service_url: str, topic: str) -> list[bytes]:
    """Every message stored on each partition of ``topic``, to its end."""
    import pulsar

    client = pulsar.Client(service_url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    values: list[bytes] = []
    try:
        for partition in range(PARTITIONS):
            reader = client.create_reader(
                f"{topic}-partition-{partition}", pulsar.MessageId.earliest
            )
            try:
                while reader.has_message_available():
                    values.append(reader.read_next(30_000).data())
            finally:
                reader.close()
    finally:
        client.close()
    return values


def settled(daemon: Daemon) -> None:
    """Wait until the daemon holds nothing: the failed attempts' rows are stored too."""
    wait_for(lambda: daemon.counters(cheap=True).buffered == 0, 120, "the daemon to settle")


def already_stored(daemon: Daemon) -> int:
    return int(daemon.metrics().get("pulsar_bruce_already_stored_total", 0))


def rows(prefix: str, count: int) -> list[str]:
    return [f"{prefix}{i:06d}-" + "x" * VALUE_PAD for i in range(count)]


# -- the tests --------------------------------------------------------------------------------


def test_a_retried_task_stores_nothing_twice_and_the_control_twice(
    apache: ApachePulsar, namespace: str, spark: Any, start_daemon: Any
) -> None:
    daemon = start_daemon(apache.url)
    n, per_task, fail_after = 6000, 3000, 2000
    outcome: dict[bool, tuple[int, int]] = {}
    for exactly_once in (True, False):
        topic = new_topic(apache, namespace, "eo" if exactly_once else "control")
        df = spark.range(n, numPartitions=n // per_task).selectExpr(
            f"concat(lpad(cast(id AS string), 6, '0'), '-', repeat('x', {VALUE_PAD})) AS value"
        )
        # Both tasks fail on their first attempt once the daemon has 2 x 1200 of their rows.
        step = fail_midway(
            daemon.metrics_port,
            fail_after,
            2400,
            first_attempt,
            daemon.counters(cheap=True).received,
        )
        writer = df.mapInArrow(step, df.schema).write.format("to_pulsar")
        writer = writer.option("socket", daemon.stream_path).option("topic", topic)
        writer.option("exactlyOnce", str(exactly_once).lower()).mode("append").save()
        settled(daemon)
        if exactly_once:
            assert already_stored(daemon) > 0, "the retries sent nothing the broker had"
        values = read_all(apache.url, topic)
        outcome[exactly_once] = (n - len(set(values)), len(values) - len(set(values)))
    missing, twice = outcome[True]
    control_missing, control_twice = outcome[False]
    print(
        f"exactlyOnce: {missing} missing, {twice} stored twice; "
        f"control: {control_missing} missing, {control_twice} stored twice"
    )
    assert (missing, twice) == (0, 0)
    assert control_missing == 0 and control_twice > 0


@pytest.mark.parametrize("sink", ["format", "foreach_batch"])
def test_a_stream_restarted_after_a_failed_micro_batch_stores_each_row_once(
    apache: ApachePulsar, namespace: str, spark: Any, start_daemon: Any, tmp_path: Path, sink: str
) -> None:
    """The format's stream writer (ids from each task's local properties) and
    foreach_batch() (the query id as the driver sees it, write() through mapInArrow)."""
    import to_pulsar.spark
    from pyspark.errors import StreamingQueryException

    daemon = start_daemon(apache.url)
    topic = new_topic(apache, namespace, "stream")
    source = tmp_path / "in"
    source.mkdir()
    files, per_file, fail_after = 3, 2500, 1800
    expected: list[str] = []
    for index in range(files):  # one file a micro-batch (maxFilesPerTrigger), in this order
        lines = rows(f"f{index}-", per_file)
        expected += lines
        path = source / f"part-{index}.txt"
        path.write_text("\n".join(lines) + "\n")
        os.utime(path, (1_700_000_000 + index, 1_700_000_000 + index))
    flag = tmp_path / "fail-micro-batch-1"
    flag.touch()
    flag_path = str(flag)

    def in_micro_batch_1_while_flagged(context: Any) -> bool:
        return context.getLocalProperty("streaming.sql.batchId") == "1" and os.path.exists(
            flag_path
        )

    step = fail_midway(daemon.metrics_port, fail_after, 1000, in_micro_batch_1_while_flagged)

    def run() -> Any:
        lines = spark.readStream.format("text").option("maxFilesPerTrigger", 1).load(str(source))
        stream = lines.mapInArrow(step, lines.schema).writeStream
        if sink == "format":
            stream = stream.format("to_pulsar").option("socket", daemon.stream_path)
            stream = stream.option("topic", topic).option("exactlyOnce", "true")
        else:
            stream = stream.foreachBatch(
                to_pulsar.spark.foreach_batch(
                    socket=daemon.stream_path, topic=topic, exactly_once=True
                )
            )
        stream = stream.option("checkpointLocation", str(tmp_path / "checkpoint"))
        return stream.trigger(availableNow=True).start()

    first = run()
    with pytest.raises(StreamingQueryException, match="injected failure"):
        first.awaitTermination()  # micro-batch 1 failed every attempt: the query stops
    assert daemon.counters(cheap=True).received >= per_file + 1000  # batch 0, part of 1
    flag.unlink()
    second = run()  # from the checkpoint: micro-batch 1 again, then 2
    assert second.id == first.id
    second.awaitTermination()
    settled(daemon)
    assert already_stored(daemon) > 0, "the rerun sent nothing the broker had"
    values = [value.decode() for value in read_all(apache.url, topic)]
    missing = len(set(expected) - set(values))
    twice = len(values) - len(set(values))
    print(f"stream ({sink}), exactlyOnce: {missing} missing, {twice} stored twice")
    assert (missing, twice, len(values)) == (0, 0, len(expected))
