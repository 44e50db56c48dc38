"""The cold half of ``bench/spark_sink.py``: each side's first write in a Spark session of its own.

A user's job writes once per session (``spark-submit job.py``), so what it pays is the
first write of a fresh session, Python workers and all. Here each side runs in a
process of its own (``python -m bench.spark_cold --child ...``), as such a job:

1. creates the ``local[2]`` session (``tests/support/spark_session.py``); the
   ``to_pulsar`` side then calls ``to_pulsar.spark.register(spark)``, as its users must
   (with its warm-up, the default), the ``write`` side ``to_pulsar.spark.warm_up(spark)``,
   as docs/spark.md shows it, the ``official`` and ``write_bare`` (``write()`` alone)
   sides nothing;
2. builds the case's DataFrame (``bench.spark_common.frame``), caches and counts it;
3. writes it to a topic of its own (new to the daemon and to the official client
   alike), timed from the action's start to its return: the **first** write;
4. writes it again, the same session's **second** write (what the warm rounds measure).

``job`` is the child's wall time from its start to the first write's return; ``none``
is the same job without a write (session, DataFrame cached), so a side's ``job`` less
``none``'s is what writing costs the job, start-up included (``session`` and ``cached``:
the child's seconds when its session was up and when its DataFrame was cached). ``cpu``
is the CPU seconds of the job's processes by then (this one, Spark's JVM, every Python
process Spark started; ``bench.spark_common.tree_cpu``): on a shared machine a job's wall
time moves with the load by more than a write takes, its CPU far less. The
parent (``bench.spark_sink``) starts the broker and the daemon, runs the children one
after the other, sides alternating, and checks that the daemon acked every row of
the to_pulsar sides.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from typing import Any

STARTED = time.monotonic()

#: The cold sides (floor's cold cost is the official side's start-up, without a client);
#: ``write_bare``: write() without warm_up(); ``none``: the same job without a write.
COLD_SIDES = ("official", "to_pulsar", "write", "write_bare", "none")


def child(args: argparse.Namespace) -> dict[str, Any]:
    """One side's job: session, DataFrame, two writes; seconds of each, and of the job."""
    from bench.harness import ROOT
    from bench.spark_common import frame, official_partition, tree_cpu
    from tests.support.spark_session import local_session

    spark = local_session(
        "to_pulsar-bench-cold",
        [str(ROOT)],
        register=False,
        **{"spark.driver.memory": "2g", "spark.sql.shuffle.partitions": str(args.tasks)},
    )
    import to_pulsar.spark

    session = time.monotonic() - STARTED
    if args.side == "to_pulsar":
        to_pulsar.spark.register(spark, warm_up=args.warm_up)
    elif args.side == "write" and args.warm_up:
        to_pulsar.spark.warm_up(spark)
    df = frame(spark, args.rows, args.tasks, args.case)
    if not args.at_once:
        df = df.cache()
        df.count()
    cached = job = time.monotonic() - STARTED
    cpu = sum(tree_cpu({}).values())
    seconds = [0.0, 0.0] if args.side == "none" else []
    while len(seconds) < 2:
        started = time.monotonic()
        if args.side == "official":
            df.foreachPartition(official_partition(args.url, args.topic, args.case))
        elif args.side == "to_pulsar":
            df.write.format("to_pulsar").option("socket", args.stream).option(
                "topic", args.topic
            ).mode("append").save()
        else:
            to_pulsar.spark.write(df, topic=args.topic, socket=args.stream)
        seconds.append(time.monotonic() - started)
        if len(seconds) == 1:
            job = time.monotonic() - STARTED
            cpu = sum(tree_cpu({}).values())
    spark.stop()
    result = {"first": seconds[0], "second": seconds[1], "job": job}
    return result | {"session": session, "cached": cached, "cpu": cpu}


def run_child(
    side: str, case: str, rows: int, tasks: int, url: str, stream: str, topic: str
) -> dict[str, Any]:
    """Run one side's job in a fresh process; its result."""
    argv = [sys.executable, "-m", "bench.spark_cold", "--child", side, "--case", case,
            "--rows", str(rows), "--tasks", str(tasks), "--url", url, "--stream", stream,
            "--topic", topic]  # fmt: skip
    done = subprocess.run(argv, capture_output=True, text=True, timeout=900)
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        raise RuntimeError(f"{side} {case}: exit {done.returncode}: {done.stderr[-2000:]}")
    result: dict[str, Any] = json.loads(lines[-1])
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="one side's cold job (run by bench.spark_sink)")
    parser.add_argument("--child", choices=COLD_SIDES, required=True, dest="side")
    parser.add_argument("--case", required=True)
    parser.add_argument("--rows", type=int, required=True)
    parser.add_argument("--tasks", type=int, required=True)
    parser.add_argument("--url", required=True)
    parser.add_argument("--stream", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--no-warm-up", dest="warm_up", action="store_false",
                        help="register(spark, warm_up=False); no warm_up(spark)")  # fmt: skip
    parser.add_argument("--at-once", action="store_true",
                        help="write at once: the DataFrame not cached first")  # fmt: skip
    args = parser.parse_args(argv)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    print(json.dumps(child(args)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
