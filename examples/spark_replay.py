"""Replay a Parquet, CSV or JSON dataset into a Pulsar topic through the local pulsar-bruce daemons.

Every Spark task sends its rows to the daemon on its own executor host (over the
daemon's stream socket) and succeeds only once the broker has acked them all, so
a job that finishes has delivered every row (at least once: a retried task sends
its rows again).

Locally, next to ``make run`` (whose stream socket is ./run/bruce.stream.sock)::

    python examples/spark_replay.py events.parquet --topic replay \\
        --socket ./run/bruce.stream.sock --key-column user_id

On a cluster (a daemon on every executor host, stream socket at the default
/run/pulsar-bruce/bruce.stream.sock, or name it with --socket; ``warm_up``
ships ``to_pulsar`` to the executors)::

    spark-submit examples/spark_replay.py \\
        s3a://bucket/events/ --format parquet --topic events \\
        --value-column payload --key-column user_id --partition-key-column shard

It writes through ``to_pulsar.spark.write`` (Arrow batches where the executors' Python
has pyarrow, else ``df.rdd``, which needs nothing there), its workers started by
``to_pulsar.spark.warm_up`` while Spark reads the input; ``--data-source`` writes
through the format ``df.write.format("to_pulsar")`` instead, which needs pyarrow there.
With a local master (``--master 'local[2]'``, or none) Spark's Python workers run in
this interpreter unless ``$PYSPARK_PYTHON`` is set. A failure is one line on stderr,
exit 1; with a local master a wrong ``--socket`` fails at once, before Spark starts.

On success it prints one line: rows read, acked, discarded (with
``--data-source --tolerate-discards``, the discards are in to_pulsar's log line).

Without --value-column each row is sent as one JSON object (Spark's ``to_json``).
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from pathlib import Path

try:
    import to_pulsar.spark
except ImportError:  # run from a checkout: use the source tree
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "client_lib"))
    import to_pulsar.spark

from pyspark import SparkConf
from pyspark.sql import DataFrame, Observation, SparkSession
from pyspark.sql import functions as F

PROG = "spark_replay.py"
# A to_pulsar error raised in a Python worker, inside Spark's (Py4J) wrapping of it.
_WORKER_ERROR = re.compile(r"ToPulsarSparkError: (to_pulsar: [^\n]*)")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="Replay a dataset into a Pulsar topic through the local pulsar-bruce daemons.",
    )
    parser.add_argument("input", help="file or directory (any path Spark can read)")
    parser.add_argument(
        "--format",
        choices=("parquet", "csv", "json"),
        default=None,
        help="input format [default: from the file extension, else parquet]",
    )
    parser.add_argument("--topic", required=True, help="target topic (t, tenant/ns/t or full)")
    parser.add_argument(
        "--socket",
        default=None,
        help="the daemon's stream socket on every executor host "
        "[default: $TO_PULSAR_STREAM_SOCKET there, else /run/pulsar-bruce/bruce.stream.sock]",
    )
    parser.add_argument(
        "--value-column", help="column to send as the value [default: the whole row as JSON]"
    )
    parser.add_argument("--key-column", help="column to use as the message key")
    parser.add_argument(
        "--partition-key-column",
        help="integer column routing each row to partition (value %% partitions)",
    )
    parser.add_argument(
        "--timestamp-column", help="timestamp (or epoch-milliseconds) column for the event time"
    )
    parser.add_argument(
        "--topic-column", help="string column overriding --topic per row (e.g. a table name)"
    )
    parser.add_argument(
        "--partitions",
        type=int,
        default=None,
        help="repartition to N tasks first (N parallel connections) [default: as read]",
    )
    parser.add_argument("--flush-timeout-ms", type=int, default=60_000)
    parser.add_argument(
        "--tolerate-discards",
        action="store_true",
        help="commit tasks even if the daemon discarded some rows (they are logged)",
    )
    parser.add_argument(
        "--data-source",
        action="store_true",
        help="write through df.write.format('to_pulsar') (needs pyarrow on the executors) "
        "instead of to_pulsar.spark.write",
    )
    parser.add_argument("--rows", action="store_true", help=argparse.SUPPRESS)  # the default
    parser.add_argument("--master", help="Spark master, e.g. local[4] [default: spark-submit's]")
    return parser.parse_args(argv)


def read(spark: SparkSession, path: str, fmt: str | None) -> DataFrame:
    if fmt is None:
        suffix = Path(path.rstrip("/")).suffix.lower().lstrip(".")
        fmt = suffix if suffix in ("csv", "json") else "parquet"
    reader = spark.read
    if fmt == "csv":
        reader = reader.option("header", "true").option("inferSchema", "true")
    return reader.format(fmt).load(path)


def to_messages(df: DataFrame, args: argparse.Namespace) -> DataFrame:
    """Map the dataset's columns onto the data source's: value, key, partition_key, ..."""
    if args.value_column:
        value = F.col(args.value_column)
        if dict(df.dtypes)[args.value_column] not in ("string", "binary"):
            value = value.cast("string")
    else:
        value = F.to_json(F.struct(*[F.col(c) for c in df.columns]))
    columns = [value.alias("value")]
    if args.key_column:
        columns.append(F.col(args.key_column).cast("string").alias("key"))
    if args.partition_key_column:
        columns.append(F.col(args.partition_key_column).cast("bigint").alias("partition_key"))
    if args.timestamp_column:
        timestamp = F.col(args.timestamp_column)
        if dict(df.dtypes)[args.timestamp_column] not in ("timestamp", "timestamp_ntz"):
            timestamp = timestamp.cast("bigint")  # already epoch milliseconds
        columns.append(timestamp.alias("timestamp"))
    if args.topic_column:
        columns.append(F.col(args.topic_column).cast("string").alias("topic"))
    return df.select(*columns)


def is_local(master: str) -> bool:
    return master.strip().startswith("local")


def one_line(exc: BaseException) -> str:
    """The cause and its remedy in one line, not Spark's 40-line Py4J traceback."""
    text = str(exc)
    if not isinstance(exc, to_pulsar.ToPulsarError):
        match = _WORKER_ERROR.search(text)
        text = match.group(1) if match else (text.strip().splitlines() or [repr(exc)])[0]
    if "has no pyarrow" in text:
        text += "; with this example: leave out --data-source"
    return text


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    owned = SparkSession.getActiveSession() is None  # else embedded: leave the session be
    master = args.master or SparkConf().get("spark.master", "local[*]")
    if owned and is_local(master):
        # The tasks will run here: a wrong socket fails now, before Spark starts, not after
        # it planned the job (a minute, and Spark's log of the failed task).
        try:
            to_pulsar.spark.check_socket(args.socket)
        except to_pulsar.ToPulsarError as exc:
            print(f"{PROG}: error: {exc}", file=sys.stderr)
            return 1
        # a local master's workers: this Python (with pyarrow), not python3 on PATH
        to_pulsar.spark.use_this_python_locally(master)
    builder = SparkSession.builder.appName(f"spark_replay -> {args.topic}")
    if args.master:
        builder = builder.master(args.master)
    if owned:
        builder = builder.config("spark.ui.showConsoleProgress", "false")
    spark = builder.getOrCreate()
    if owned:  # Spark's log of a failed task (Java and Python tracebacks) would bury the line
        spark.sparkContext.setLogLevel("OFF")
    try:
        return replay(spark, args)
    except Exception as exc:  # Spark's, to_pulsar's: one line, never a traceback
        print(f"{PROG}: error: {one_line(exc)}", file=sys.stderr)
        return 1
    finally:
        if owned:
            spark.stop()


def replay(spark: SparkSession, args: argparse.Namespace) -> int:
    """Read, map and write; print the one summary line."""
    if args.data_source:
        to_pulsar.spark.register(spark)
    else:
        to_pulsar.spark.warm_up(spark)  # while Spark reads the input
    messages = to_messages(read(spark, args.input, args.format), args)
    if args.partitions:
        messages = messages.repartition(args.partitions)
    options = {
        "topic": args.topic,
        "socket": args.socket,
        "flushTimeoutMs": args.flush_timeout_ms,
        "tolerateDiscards": args.tolerate_discards,
    }
    started = time.monotonic()
    # Either way, this returns once every row is acked, and raises if a task could not
    # deliver its rows.
    if not args.data_source:
        summary = to_pulsar.spark.write(messages, **options)
        rows, acked = summary.rows, str(summary.acked)
        discarded = sum(summary.discarded.values())
        reasons = ", ".join(f"{r} {n}" for r, n in sorted(summary.discarded.items()))
        discards = f"{discarded} discarded" + (f" ({reasons})" if reasons else "")
    else:
        observed = Observation("spark_replay")  # counts the rows as they are written
        messages = messages.observe(observed, F.count(F.lit(1)).alias("rows"))
        writer = messages.write.format("to_pulsar").mode("append")
        for name, value in options.items():
            if value is not None:
                writer = writer.option(name, value)  # pyspark spells booleans true/false
        writer.save()
        rows = int(observed.get["rows"])
        # Without --tolerate-discards a write that returns had every row acked.
        acked, discards = (str(rows), "0 discarded")
        if args.tolerate_discards:
            acked, discards = "?", "discards (tolerated) in to_pulsar's log line"
    print(
        f"{PROG}: {rows} rows from {args.input} into {args.topic}: {acked} acked, {discards} "
        f"({time.monotonic() - started:.1f} s)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
