#!/usr/bin/env python3
"""PySpark into Pulsar: ``df.write.format("to_pulsar")`` against the official client.

One pulsar-lite broker (topics of 4 partitions) and one daemon, started here; one
``local[2]`` Spark session whose executors run this same Python. Each round writes
the same DataFrame (N rows, 100-byte binary values, ``--tasks`` Spark partitions)
to one topic twice, sides alternating:

(a) ``foreachPartition`` with the official client at its best: per partition one
    ``pulsar.Client``, ``create_producer(topic, batching_enabled=True,
    block_if_queue_full=True)``, ``send_async(value, None)`` per row, ``flush()``;
(b) ``df.write.format("to_pulsar")``: every task's rows over the daemon's stream
    socket, committed only once the daemon confirms them all acked.

Each is timed from the action's start to its return (both return only once the
broker has every row), so Spark's own costs count on both sides. Reports rows/s
per round and the medians, with where the CPU went, in µs per row: the Spark JVM,
``python`` (Spark's Python workers, where either client runs, and this driver),
the daemon, the broker, and ``other``: the rest of the machine's busy CPU meanwhile
(someone else's work on a shared machine). Exits 1 if the daemon did not ack every row.

    python -m bench.spark_sink                       # 1,000,000 rows, 3 rounds
    python -m bench.spark_sink --rows 20000 --rounds 1
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from bench.harness import ROOT, Broker, Daemon, MachineCpu, cpu_seconds, describe_revision
from tests.support.spark_session import local_session

VALUE_BYTES = 100
PARTITIONS = 4


def official_partition(service_url: str, topic: str) -> Callable[[Iterable[Any]], None]:
    """The official client's side, as a ``foreachPartition`` function."""

    def write(rows: Iterable[Any]) -> None:
        import pulsar

        client = pulsar.Client(service_url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Warn))
        try:
            producer = client.create_producer(
                topic, batching_enabled=True, block_if_queue_full=True
            )
            send = producer.send_async
            for row in rows:
                send(row[0], None)
            producer.flush()  # returns once every message is persisted; raises if one failed
            producer.close()
        finally:
            client.close()

    return write


def executor_python(_: Iterable[Any]) -> Iterable[list[str]]:
    """What a Python worker runs: its interpreter and the two clients' versions."""
    import importlib.metadata
    import sys

    versions = [importlib.metadata.version(name) for name in ("pyarrow", "pulsar-client")]
    yield [sys.executable, *versions]


def session(tasks: int) -> Any:
    """A ``local[2]`` session whose Python workers are this interpreter, with to_pulsar."""
    # The workers import bench/ (official_partition) from the checkout; to_pulsar is shipped.
    return local_session(
        "to_pulsar-bench",
        [str(ROOT)],
        **{"spark.driver.memory": "2g", "spark.sql.shuffle.partitions": str(tasks)},
    )


def frame(spark: Any, rows: int, tasks: int) -> Any:
    """N rows of one 100-byte binary ``value`` (the row number, zero-padded, then x's)."""
    pad = VALUE_BYTES - 12
    return spark.range(rows, numPartitions=tasks).selectExpr(
        f"cast(concat(lpad(cast(id AS string), 12, '0'), repeat('x', {pad})) AS binary) AS value"
    )


def tree_cpu(pids: dict[str, int]) -> dict[str, float]:
    """CPU seconds so far of each named process, of the Spark JVM ("jvm") and of every other
    process below this one ("python": this driver and Spark's Python workers). From /proc,
    threads included; a process that exits meanwhile is lost (it counts as "other")."""
    parents: dict[int, tuple[int, str]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError):
            text = stat.read_text()
            name = text[text.index("(") + 1 : text.rindex(")")]
            parents[int(stat.parent.name)] = (int(text[text.rindex(")") + 2 :].split()[1]), name)
    result = {name: cpu_seconds(pid) for name, pid in pids.items()}
    result |= {"jvm": 0.0, "python": 0.0}
    named = set(pids.values())
    todo = [os.getpid()]
    while todo:
        pid = todo.pop()
        with contextlib.suppress(OSError):
            result["jvm" if parents[pid][1] == "java" else "python"] += cpu_seconds(pid)
        todo += [child for child, (parent, _) in parents.items()
                 if parent == pid and child not in named]  # fmt: skip
    return result


class Sides:
    """The two measured writes, on one topic, with the daemon's acks checked."""

    def __init__(self, broker: Broker, daemon: Daemon, topic: str) -> None:
        self.daemon = daemon
        self.topic = topic
        self.stream = daemon.socket_path.removesuffix(".sock") + ".stream.sock"
        self.official = official_partition(broker.url, topic)
        self.pids = {"daemon": daemon.pid, "broker": broker.pid}
        self.lost = 0

    def run(self, side: str, df: Any, rows: int) -> tuple[float, dict[str, float]]:
        """Seconds for ``side`` ("official" or "to_pulsar") to write ``df``, and the CPU
        µs per row of each part (:func:`tree_cpu`) and of the rest of the machine."""
        acked = self.daemon.counters().acked
        cpu = tree_cpu(self.pids)
        machine = MachineCpu.now()
        started = time.monotonic()
        if side == "official":
            df.foreachPartition(self.official)
        else:
            df.write.format("to_pulsar").option("socket", self.stream).option(
                "topic", self.topic
            ).mode("append").save()
        elapsed = time.monotonic() - started
        used = {name: seconds - cpu[name] for name, seconds in tree_cpu(self.pids).items()}
        used["other"] = max(0.0, MachineCpu.now().busy - machine.busy - sum(used.values()))
        if side == "to_pulsar":
            counters = self.daemon.counters()
            if counters.acked - acked != rows or counters.total_discarded:
                self.lost += 1
                print(f"  to_pulsar: {counters.acked - acked} of {rows} acked, {counters}")
        return elapsed, {name: seconds / rows * 1e6 for name, seconds in used.items()}


def measure(args: argparse.Namespace, workdir: Path) -> int:
    broker = Broker(workdir / "broker", partitions=PARTITIONS)
    broker.start()
    with contextlib.ExitStack() as stack:
        stack.callback(broker.stop)
        daemon = Daemon(workdir / "daemon", broker.url, ["--buffer-max-bytes", "512MiB"])
        stack.callback(daemon.stop)
        topic = f"spark-sink-{os.getpid()}"
        daemon.warm_up(topic, PARTITIONS)
        spark = session(args.tasks)
        stack.callback(spark.stop)
        probe = spark.sparkContext.parallelize([0], 1).mapPartitions(executor_python).collect()
        python, pyarrow_version, pulsar_version = probe[0]
        print(f"executors' Python: {python} (pyarrow {pyarrow_version}, "
              f"pulsar-client {pulsar_version}); driver: {sys.executable}")  # fmt: skip
        print(f"code: {describe_revision()}")
        print(f"{args.rows:,} rows of {VALUE_BYTES} B, {args.tasks} Spark partitions, "
              f"local[2], one topic of {PARTITIONS} partitions, {args.rounds} rounds")  # fmt: skip
        sides = Sides(broker, daemon, topic)
        warm = frame(spark, min(args.rows, 20_000), args.tasks)
        for side in ("official", "to_pulsar"):  # Python workers started, JIT warm
            sides.run(side, warm, min(args.rows, 20_000))
        df = frame(spark, args.rows, args.tasks)
        rates: dict[str, list[float]] = {"official": [], "to_pulsar": []}
        cpus: dict[str, list[dict[str, float]]] = {"official": [], "to_pulsar": []}
        for round_ in range(args.rounds):
            order = ("official", "to_pulsar") if round_ % 2 == 0 else ("to_pulsar", "official")
            for side in order:
                seconds, cpu = sides.run(side, df, args.rows)
                rates[side].append(args.rows / seconds)
                cpus[side].append(cpu)
                print(f"round {round_ + 1} {side:<9} {args.rows / seconds:>9,.0f} rows/s "
                      f"({seconds:5.2f} s)  CPU µs/row: {describe(cpu)}", flush=True)  # fmt: skip
    print("median of the rounds:")
    for side, what in (("official", "official client (foreachPartition)"),
                       ("to_pulsar", "format('to_pulsar')")):  # fmt: skip
        cpu = {name: statistics.median(c[name] for c in cpus[side]) for name in cpus[side][0]}
        print(f"  {what:<35} {statistics.median(rates[side]):>9,.0f} rows/s  "
              f"CPU µs/row: {describe(cpu)}")  # fmt: skip
    ratio = statistics.median(rates["to_pulsar"]) / statistics.median(rates["official"])
    print(f"  ratio to_pulsar/official: {ratio:.2f}")
    print("no rows lost" if not sides.lost else f"{sides.lost} to_pulsar runs lost rows")
    return 1 if sides.lost else 0


def describe(cpu: dict[str, float]) -> str:
    names = ("jvm", "python", "daemon", "broker", "other")
    return ", ".join(f"{name} {cpu[name]:.1f}" for name in names)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description="df.write.format('to_pulsar') vs foreachPartition with the official client"
    )
    parser.add_argument("--rows", type=int, default=1_000_000, help="rows per write (1000000)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds, sides alternating (3)")
    parser.add_argument("--tasks", type=int, default=4, help="Spark partitions of the data (4)")
    parser.add_argument("--workdir", type=Path, help="keep the broker's data and logs here")
    args = parser.parse_args(argv)
    if args.rows < 1 or args.rounds < 1 or args.tasks < 1:
        parser.error("--rows, --rounds and --tasks must be >= 1")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.workdir:
        args.workdir.mkdir(parents=True, exist_ok=True)
        return measure(args, args.workdir)
    with tempfile.TemporaryDirectory(prefix="bench-spark-") as workdir:
        return measure(args, Path(workdir))


if __name__ == "__main__":
    sys.exit(main())
