"""Structured Streaming through the "to_pulsar" format: a local Spark session, a real daemon,
a real broker; rows read back with the official client.

The session is the Spark tests' (``conftest.py``); each test has its own daemon, topic,
source folder and checkpoint.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.support.consume import consume
from tests.support.processes import Broker

pytestmark = [pytest.mark.spark, pytest.mark.broker]

pytest.importorskip("pyspark", reason="pyspark is not installed (the [spark] extra)")

ROWS_PER_FILE = 50


def full(topic: str) -> str:
    return f"persistent://public/default/{topic}"


def add_files(source: Path, first: int, files: int) -> None:
    """JSON files of ``ROWS_PER_FILE`` rows each, ids numbered across the files."""
    for f in range(first, first + files):
        lines = [json.dumps({"id": f * ROWS_PER_FILE + i, "file": f}) for i in range(ROWS_PER_FILE)]
        (source / f"part-{f:03d}.json").write_text("\n".join(lines) + "\n")


def batch_log(checkpoint: Path, log: str) -> list[int]:
    """The micro-batch ids in the checkpoint's ``offsets`` (planned) or ``commits`` log."""
    return sorted(int(p.name) for p in (checkpoint / log).iterdir() if p.name.isdigit())


def file_query(spark: Any, source: Path, value: str) -> Any:
    """One micro-batch per file of ``source``: ``value`` (SQL over ``id``) and the file as key."""
    return (
        spark.readStream.schema("id BIGINT, file INT")
        .option("maxFilesPerTrigger", 1)
        .json(str(source))
        .selectExpr(f"{value} AS value", "cast(file AS string) AS key")
    )


def run_to_end(start: Callable[[], Any]) -> Any:
    """Start a query with ``trigger(availableNow=True)`` and wait for it; it must not fail."""
    query = start()
    assert query.awaitTermination(120), "the query did not finish"
    assert query.exception() is None
    return query


def test_streaming_query_delivers_every_micro_batch(
    spark: Any, broker: Broker, start_daemon, tmp_path: Path
) -> None:
    stream = str(tmp_path / "st.sock")
    daemon = start_daemon(broker.url, "--stream-socket", stream)
    topic = f"spark-stream-{uuid.uuid4().hex[:8]}"
    source = tmp_path / "in"
    source.mkdir()
    checkpoint = tmp_path / "checkpoint"

    def start() -> Any:
        return (
            file_query(spark, source, "cast(id AS string)")
            .writeStream.format("to_pulsar")
            .option("socket", stream)
            .option("topic", topic)
            .option("checkpointLocation", str(checkpoint))
            .trigger(availableNow=True)
            .start()
        )

    add_files(source, 0, 4)
    first = run_to_end(start)
    batches = [p for p in first.recentProgress if p["numInputRows"] > 0]
    assert [p["numInputRows"] for p in batches] == [ROWS_PER_FILE] * 4
    assert daemon.counters().acked == 200
    assert batch_log(checkpoint, "commits") == [0, 1, 2, 3]

    # Restarted from its checkpoint, the query sends only what is new.
    add_files(source, 4, 2)
    second = run_to_end(start)
    assert [p["numInputRows"] for p in second.recentProgress if p["numInputRows"] > 0] == [50] * 2
    assert daemon.counters().acked == 300

    messages = consume(broker.url, full(topic), 300)
    assert sorted(int(m.value) for m in messages) == list(range(300))
    assert all(m.key == str(int(m.value) // ROWS_PER_FILE) for m in messages)


def test_a_failed_micro_batch_is_not_committed_and_runs_again_from_the_checkpoint(
    spark: Any, broker: Broker, start_daemon, tmp_path: Path
) -> None:
    """A micro-batch with a row the daemon discards fails its task, so the query stops with
    that micro-batch planned (in ``offsets``) but not in ``commits``; restarted from the
    checkpoint (here tolerating the discard), it runs that micro-batch again, with the same
    rows, and commits it. At-least-once: the rows the failed attempt had delivered arrive
    twice."""
    stream = str(tmp_path / "st.sock")
    daemon = start_daemon(broker.url, "--stream-socket", stream, "--max-message-bytes", "1024")
    topic = f"spark-stream-fail-{uuid.uuid4().hex[:8]}"
    source = tmp_path / "in"
    source.mkdir()
    checkpoint = tmp_path / "checkpoint"
    too_large = 75  # in the second file: micro-batch 1

    def start(tolerate: bool) -> Any:
        value = f"CASE WHEN id = {too_large} THEN repeat('y', 2000) ELSE cast(id AS string) END"
        return (
            file_query(spark, source, value)
            .writeStream.format("to_pulsar")
            .option("socket", stream)
            .option("topic", topic)
            .option("tolerateDiscards", str(tolerate).lower())
            .option("checkpointLocation", str(checkpoint))
            .trigger(availableNow=True)
            .start()
        )

    add_files(source, 0, 1)
    run_to_end(lambda: start(tolerate=False))
    assert batch_log(checkpoint, "commits") == [0]

    add_files(source, 1, 1)
    failed = start(tolerate=False)
    with pytest.raises(Exception, match="to_pulsar: ") as info:
        failed.awaitTermination(120)
    assert "1 of 50 rows were not delivered (too_large 1), 49 acked" in str(info.value)
    assert batch_log(checkpoint, "offsets") == [0, 1]
    assert batch_log(checkpoint, "commits") == [0]
    assert daemon.counters().acked == 50 + 49

    again = run_to_end(lambda: start(tolerate=True))
    rerun = [(p["batchId"], p["numInputRows"]) for p in again.recentProgress if p["numInputRows"]]
    assert rerun == [(1, ROWS_PER_FILE)]
    assert batch_log(checkpoint, "commits") == [0, 1]
    assert daemon.counters().acked == 50 + 49 + 49
    assert daemon.counters().discarded["too_large"] == 2

    messages = consume(broker.url, full(topic), 148)
    assert len(messages) == 148
    counts: dict[int, int] = {}
    for message in messages:
        counts[int(message.value)] = counts.get(int(message.value), 0) + 1
    assert counts == {i: 1 for i in range(50)} | {i: 2 for i in range(50, 100) if i != too_large}
