"""What the Spark benches share: the cases' DataFrames, the official client's side, CPU by process.

``bench/spark_sink.py`` (with ``bench/spark_cold.py``, its cold half) and
``bench/spark_stream.py`` build the same rows, write them with the same official
client side and count CPU the same way; this module holds those pieces so that the
benches and their Spark workers (which import ``official_partition`` from here) do
not import one another.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from bench.harness import ROOT
from bench.machine import CLOCK_TICKS
from tests.support.spark_session import local_session

_PADDED = "concat(lpad(cast(id AS string), 12, '0'), repeat('x', 88))"  # 100 characters
TEN_COLUMNS = (
    "id",
    "concat('user-', id % 100000) AS name",
    "id * 0.37 AS amount",
    "cast(id % 1000 AS int) AS qty",
    "id % 3 = 0 AS active",
    "timestamp_millis(1700000000000 + id) AS created",
    "date_add(DATE'2024-01-01', cast(id % 365 AS int)) AS day",
    "cast(id % 97 / 97 AS float) AS ratio",
    "cast(id % 30000 AS smallint) AS code",
    "concat('note for order ', id) AS note",
)


def official_partition(service_url: str, topic: str, case: str) -> Callable[[Iterable[Any]], None]:
    """The official client's side, as a ``foreachPartition`` function."""

    def write(rows: Iterable[Any]) -> None:
        import pulsar

        client = pulsar.Client(service_url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Warn))
        try:
            producer = client.create_producer(
                topic, batching_enabled=True, block_if_queue_full=True
            )
            send = producer.send_async
            if case == "binary":
                for row in rows:
                    send(row[0], None)
            elif case == "string":
                for row in rows:
                    send(row[0].encode(), None)
            else:
                for value, key, _ in rows:
                    send(value.encode(), None, partition_key=key)
            producer.flush()  # returns once every message is persisted; raises if one failed
            producer.close()
        finally:
            client.close()

    return write


def session(tasks: int) -> Any:
    """A ``local[2]`` session whose Python workers are this interpreter, with to_pulsar."""
    # The workers import bench/ (official_partition) from the checkout; to_pulsar is shipped.
    return local_session(
        "to_pulsar-bench",
        [str(ROOT)],
        **{"spark.driver.memory": "2g", "spark.sql.shuffle.partitions": str(tasks)},
    )


def frame(spark: Any, rows: int, tasks: int, case: str = "binary") -> Any:
    """N rows of ``case`` (see ``bench/spark_sink.py``'s docstring)."""
    ids = spark.range(rows, numPartitions=tasks)
    if case == "string":
        return ids.selectExpr(f"{_PADDED} AS value")
    if case == "binary":
        return ids.selectExpr(f"cast({_PADDED} AS binary) AS value")
    return ids.selectExpr(*TEN_COLUMNS).selectExpr(
        "to_json(struct(*)) AS value", "name AS key", "cast(id % 64 AS int) AS partition_key"
    )


def _cpu_seconds(fields: list[str], children: bool) -> float:
    """utime + stime (and, with ``children``, those of its reaped children) from /proc stat."""
    used = int(fields[11]) + int(fields[12])
    if children:  # pyspark's daemons fork a worker per task set and reap it
        used += int(fields[13]) + int(fields[14])
    return used / CLOCK_TICKS


def tree_cpu(pids: dict[str, int]) -> dict[str, float]:
    """CPU seconds so far of each named process, of the Spark JVM ("jvm"), of the Python
    processes below it ("workers", with their reaped children) and of this driver. From
    /proc, threads included; a process that exits unreaped meanwhile counts as "other"."""
    procs: dict[int, tuple[int, str, list[str]]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError):
            text = stat.read_text()
            fields = text[text.rindex(")") + 2 :].split()
            name = text[text.index("(") + 1 : text.rindex(")")]
            procs[int(stat.parent.name)] = (int(fields[1]), name, fields)
    result = {name: _cpu_seconds(procs[pid][2], False) for name, pid in pids.items()}
    result |= {"jvm": 0.0, "workers": 0.0, "driver": _cpu_seconds(procs[os.getpid()][2], False)}
    named = set(pids.values())
    todo = [(os.getpid(), "driver")]
    while todo:
        pid, part = todo.pop()
        for child, (parent, name, fields) in procs.items():
            if parent != pid or child in named:
                continue
            below = "jvm" if name == "java" else "workers" if part != "driver" else "driver"
            result[below] += _cpu_seconds(fields, below == "workers")
            todo.append((child, below))
    return result


def in_workdir(
    args: argparse.Namespace, run: Callable[[argparse.Namespace, Path], int], prefix: str
) -> int:
    """``run(args, workdir)`` in ``--workdir`` (kept), else in a temporary folder."""
    if args.workdir:
        args.workdir.mkdir(parents=True, exist_ok=True)
        return run(args, args.workdir)
    with tempfile.TemporaryDirectory(prefix=prefix) as workdir:
        return run(args, Path(workdir))
