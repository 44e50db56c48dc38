#!/usr/bin/env python3
"""PySpark Structured Streaming into Pulsar: ``writeStream.format("to_pulsar")`` against
``foreachBatch`` with the official client.

One broker (pulsar-lite, or Apache Pulsar standalone with ``--broker apache``; topics of
4 partitions) and one daemon with its defaults, started here; one ``local[2]`` Spark
session whose Python workers run this same Python. The source is Spark's
``rate-micro-batch``: every micro-batch exactly ``--rows-per-batch`` rows, as JSON
rows of ten typed columns (``bench.spark_sink``'s ``json`` case: about 180 bytes,
with a string ``key`` and an int ``partition_key``). Sides (``--sides``):

- ``official``: ``foreachBatch``, each micro-batch through ``foreachPartition`` with the
  official client at its best (``bench.spark_common.official_partition``: per task one
  ``pulsar.Client``, batching on, ``send_async(value, None, partition_key=key)`` per
  row, ``flush()``), as a user who wants speed writes it;
- ``to_pulsar``: ``writeStream.format("to_pulsar")``: each micro-batch's tasks over the
  daemon's stream socket, the micro-batch committed once every row is acked;
- ``foreach_batch``: ``foreachBatch(to_pulsar.spark.foreach_batch(...))``, each
  micro-batch through ``to_pulsar.spark.write()``.

Each side runs a query of its own (own topic, own checkpoint) in turn: ``--warm``
micro-batches first (Python workers started, JIT warm), then ``--batches`` measured
ones. ``--trigger-ms 0`` (the default) starts each micro-batch as soon as the previous
one has committed: the **sustained rate** is the measured rows over the time from the
first measured micro-batch's trigger to the last one's commit. ``--trigger-ms N``
triggers every N ms (a steady rate of ``rows-per-batch`` per N ms, if the side keeps
up). **Latency** is each micro-batch's trigger to its commit (Spark's
``durationMs.triggerExecution``; ``addBatch``, the sink's write alone, beside it),
median and max. **CPU** per row, in µs, over the measured micro-batches (polled: a
micro-batch's edges may fall either side), from ``/proc``: Spark's JVM, its Python
workers, this driver, the daemon, the broker. Exits 1 if the daemon did not ack
every committed row of a to_pulsar side.

    python -m bench.spark_stream                                 # pulsar-lite, 100,000 rows a batch
    python -m bench.spark_stream --broker apache --batches 5
    python -m bench.spark_stream --rows-per-batch 20000 --trigger-ms 1000   # 20,000 rows/s steady
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from bench.brokers import CHOICES, Brokers, kinds
from bench.harness import Daemon, describe_revision
from bench.spark_common import TEN_COLUMNS, in_workdir, official_partition, session, tree_cpu

PARTITIONS = 4
SIDES = ("official", "to_pulsar", "foreach_batch")
CPU_PARTS = ("jvm", "workers", "driver", "daemon", "broker")
POLL_S = 0.05


def stream_frame(spark: Any, rows_per_batch: int, tasks: int) -> Any:
    """The streaming DataFrame: ``rows_per_batch`` JSON rows a micro-batch."""
    rows = (
        spark.readStream.format("rate-micro-batch")
        .option("rowsPerBatch", rows_per_batch)
        .option("numPartitions", tasks)
        .load()
    )
    return (
        rows.selectExpr("value AS id")
        .selectExpr(*TEN_COLUMNS)
        .selectExpr(
            "to_json(struct(*)) AS value", "name AS key", "cast(id % 64 AS int) AS partition_key"
        )
    )


def start_query(side: str, df: Any, topic: str, url: str, stream: str, args: Any) -> Any:
    """``side``'s streaming query, started."""
    import to_pulsar.spark

    writer = df.writeStream.option("checkpointLocation", str(args.checkpoints / topic))
    if args.trigger_ms:
        writer = writer.trigger(processingTime=f"{args.trigger_ms} milliseconds")
    if side == "to_pulsar":
        writer = writer.format("to_pulsar").option("topic", topic).option("socket", stream)
    elif side == "foreach_batch":
        writer = writer.foreachBatch(to_pulsar.spark.foreach_batch(topic=topic, socket=stream))
    else:
        write_partition = official_partition(url, topic, "json")

        def write_batch(batch: Any, batch_id: int) -> None:
            batch.foreachPartition(write_partition)

        writer = writer.foreachBatch(write_batch)
    return writer.queryName(topic.replace("-", "_")).start()


def committed(query: Any) -> list[dict[str, Any]]:
    """The query's progress reports of micro-batches that had rows, by batch id."""
    found = {p["batchId"]: p for p in query.recentProgress if p["numInputRows"]}
    return [found[batch] for batch in sorted(found)]


def wait_batches(query: Any, count: int, timeout: float) -> list[dict[str, Any]]:
    deadline = time.monotonic() + timeout
    while True:
        done = committed(query)
        if len(done) >= count:
            return done
        if query.exception() is not None:
            raise RuntimeError(f"the query failed: {query.exception()}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"only {len(done)} of {count} micro-batches in {timeout:.0f} s")
        time.sleep(POLL_S)


def _epoch(progress: dict[str, Any]) -> float:
    """A progress report's trigger time, in seconds since the epoch."""
    from datetime import datetime

    return datetime.fromisoformat(progress["timestamp"].replace("Z", "+00:00")).timestamp()


def run_side(side: str, spark: Any, daemon: Daemon, broker: Any, args: Any) -> dict[str, Any]:
    """One side's query: warm micro-batches, then the measured ones; its figures."""
    topic = f"spark-stream-{os.getpid()}-{side}-{time.monotonic_ns() % 10**6}"
    broker.make_partitioned(topic, PARTITIONS)
    if side != "official":
        daemon.warm_up(topic, PARTITIONS)
    pids = {"daemon": daemon.pid, "broker": broker.pid}
    acked = daemon.counters().acked
    query = start_query(
        side, stream_frame(spark, args.rows_per_batch, args.tasks), topic, broker.url,
        str(daemon.stream_path), args,
    )  # fmt: skip
    try:
        wait_batches(query, args.warm, args.timeout)
        before = tree_cpu(pids)
        done = wait_batches(query, args.warm + args.batches, args.timeout)
        after = tree_cpu(pids)
    finally:
        query.stop()
    measured = done[args.warm : args.warm + args.batches]
    rows = sum(p["numInputRows"] for p in measured)
    started = _epoch(measured[0])
    ended = max(_epoch(p) + p["durationMs"]["triggerExecution"] / 1000 for p in measured)
    latency = [p["durationMs"]["triggerExecution"] for p in measured]
    sink = [p["durationMs"].get("addBatch", 0) for p in measured]
    cpu = {part: (after[part] - before[part]) / rows * 1e6 for part in CPU_PARTS}
    result = {
        "side": side,
        "rows": rows,
        "rate": rows / (ended - started),
        "latency_p50": statistics.median(latency),
        "latency_max": max(latency),
        "sink_p50": statistics.median(sink),
        "cpu": cpu,
        "lost": 0,
    }
    if side != "official":
        total = sum(p["numInputRows"] for p in committed(query))
        counters = daemon.counters()
        if counters.acked - acked < total or counters.total_discarded:
            result["lost"] = 1
            print(f"  {side}: {counters.acked - acked} acked of {total} committed, {counters}")
    return result


def describe(result: dict[str, Any]) -> str:
    cpu = result["cpu"]
    return (
        f"{result['side']:<13} {result['rate']:>9,.0f} rows/s, micro-batch trigger->commit "
        f"p50 {result['latency_p50']:,.0f} ms (max {result['latency_max']:,.0f}; the sink's "
        f"write p50 {result['sink_p50']:,.0f}), CPU µs/row: "
        + ", ".join(f"{part} {cpu[part]:.2f}" for part in CPU_PARTS)
        + f" (total {sum(cpu.values()):.2f})"
    )


def measure(args: argparse.Namespace, workdir: Path) -> int:
    lost = 0
    print(f"code: {describe_revision()}; load average {os.getloadavg()[0]:.1f}")
    pace = "back to back"
    if args.trigger_ms:  # then the trigger sets the rate: latency and CPU tell the sides apart
        pace = f"every {args.trigger_ms} ms: the rate is the trigger's if the side keeps up"
    print(f"{args.rows_per_batch:,} JSON rows a micro-batch ({pace}), {args.tasks} Spark "
          f"partitions, local[2], {args.warm} warm + {args.batches} measured micro-batches "
          f"per side, topics of {PARTITIONS} partitions")  # fmt: skip
    args.checkpoints = workdir / "checkpoints"
    spark = session(args.tasks)
    try:
        import to_pulsar.spark

        to_pulsar.spark.register(spark)
        for kind in kinds(args.broker):
            brokers = Brokers(kind, workdir / kind)
            broker = brokers.get(PARTITIONS)
            daemon = Daemon(workdir / f"daemon-{kind}", broker.url, [])
            results: dict[str, list[dict[str, Any]]] = {side: [] for side in args.sides}
            try:
                for round_ in range(args.rounds):
                    order = args.sides if round_ % 2 == 0 else args.sides[::-1]
                    for side in order:
                        result = run_side(side, spark, daemon, broker, args)
                        results[side].append(result)
                        lost += result["lost"]
                        print(f"  round {round_ + 1} {describe(result)}; load "
                              f"{os.getloadavg()[0]:.1f}", flush=True)  # fmt: skip
            finally:
                daemon.stop()
                brokers.stop()
            summarise(kind, results)
    finally:
        spark.stop()
    print("no rows lost" if not lost else f"{lost} to_pulsar runs lost rows")
    return 1 if lost else 0


def summarise(kind: str, results: dict[str, list[dict[str, Any]]]) -> None:
    medians = {}
    print(f"{kind}: medians over the rounds")
    for side, runs in results.items():
        median = {
            "side": side,
            "rate": statistics.median(r["rate"] for r in runs),
            "latency_p50": statistics.median(r["latency_p50"] for r in runs),
            "latency_max": max(r["latency_max"] for r in runs),
            "sink_p50": statistics.median(r["sink_p50"] for r in runs),
            "cpu": {p: statistics.median(r["cpu"][p] for r in runs) for p in CPU_PARTS},
        }
        medians[side] = median
        print(f"  {describe(median)}")
    if "official" in medians:
        for side in ("to_pulsar", "foreach_batch"):
            if side in medians:
                mine, theirs = medians[side], medians["official"]
                print(f"  {side}: {mine['rate'] / theirs['rate']:.2f} x the official client's "
                      f"rate, {sum(theirs['cpu'].values()) / sum(mine['cpu'].values()):.2f} x "
                      "less CPU per row")  # fmt: skip


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description="writeStream.format('to_pulsar') vs foreachBatch with the official client"
    )
    parser.add_argument("--rows-per-batch", type=int, default=100_000,
                        help="rows per micro-batch (100000)")  # fmt: skip
    parser.add_argument("--batches", type=int, default=8, help="measured micro-batches (8)")
    parser.add_argument("--warm", type=int, default=2, help="micro-batches before (2)")
    parser.add_argument("--trigger-ms", type=int, default=0,
                        help="trigger interval; 0: each micro-batch at once (0)")  # fmt: skip
    parser.add_argument("--tasks", type=int, default=4, help="Spark partitions (4)")
    parser.add_argument("--rounds", type=int, default=1, help="rounds, sides alternating (1)")
    parser.add_argument("--sides", default=",".join(SIDES),
                        help=f"comma-separated: {','.join(SIDES)} (all)")  # fmt: skip
    parser.add_argument("--broker", default="lite", choices=CHOICES,
                        help="lite, apache, both (lite)")  # fmt: skip
    parser.add_argument("--timeout", type=float, default=600.0,
                        help="seconds a side's micro-batches may take (600)")  # fmt: skip
    parser.add_argument("--workdir", type=Path, help="keep the brokers' data and logs here")
    args = parser.parse_args(argv)
    args.sides = [side.strip() for side in args.sides.split(",") if side.strip()]
    if not args.sides or any(side not in SIDES for side in args.sides):
        parser.error(f"--sides: choose from {', '.join(SIDES)}")
    if min(args.rows_per_batch, args.batches, args.warm, args.tasks, args.rounds) < 1:
        parser.error("--rows-per-batch, --batches, --warm, --tasks and --rounds must be >= 1")
    if args.broker == "cluster":
        parser.error("--broker: lite, apache or both")
    return args


def main(argv: list[str] | None = None) -> int:
    return in_workdir(parse_args(argv), measure, "bench-spark-stream-")


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        sys.exit(main())
