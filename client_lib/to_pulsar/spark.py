"""Spark data source ``"to_pulsar"``: DataFrames and streams into Pulsar through the local daemon.

::

    import to_pulsar.spark
    to_pulsar.spark.register(spark)        # also ships to_pulsar to the executors

    (df.write.format("to_pulsar")
       .option("topic", "clicks")
       .mode("append")
       .save())

    (stream_df.writeStream.format("to_pulsar")
       .option("topic", "clicks")
       .option("checkpointLocation", "/checkpoints/clicks")
       .start())

Each Spark task opens one connection to the pulsar-bruce daemon on its own host
(its *stream* socket), sends its rows, flushes, and commits only once the daemon
reports every row acked by the broker; otherwise the task fails with the counts
(unless ``tolerateDiscards``). Delivery is at-least-once, a retried task sending its
rows again, or exactly-once (:mod:`to_pulsar.spark_exactly_once`). The task side is
:mod:`to_pulsar.spark_task`.

Spark hands rows to a Python data source as Arrow batches, so the format needs
pyarrow in the Python Spark runs for its workers. :func:`write` (and
:func:`foreach_batch` for streams) do the same from the driver: with Arrow
batches too (``mapInArrow``) where the executors have pyarrow, else through
``df.rdd``, rows pickled to the executors, needing nothing there but the daemon.

Options: ``socket`` (the daemon's stream socket, or its datagram socket meaning
the stream socket beside it; default ``$TO_PULSAR_STREAM_SOCKET`` on the
executor, else ``/run/pulsar-bruce/bruce.stream.sock``), ``topic`` (required
unless the DataFrame has a ``topic`` column), ``flushTimeoutMs`` (default
60000), ``tolerateDiscards`` (default false), ``exactlyOnce`` (default false),
``producerNamePrefix`` (default ``to_pulsar``).

Columns: ``value`` (string or binary, required; null sends an empty value),
``key`` (string or binary; null: no key), ``partition_key`` (tinyint, smallint,
int or bigint in -2^31..2^32-1; null: the daemon picks the partition), ``topic``
(string; overrides the option per row), ``timestamp`` (timestamp, timestamp_ntz
as UTC, or bigint milliseconds since the epoch; null: now), ``properties``,
``deliver_at`` (as ``timestamp``; delayed delivery, null: none). Other columns are
ignored.

Needs pyspark >= 4.0 on the driver; ``import to_pulsar`` itself never imports pyspark.
"""

from __future__ import annotations

import functools
import importlib.util
import logging
import os
import re
import sys
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceStreamWriter,
    DataSourceWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import StructType

from . import spark_warm_up
from .paths import STREAM_SOCKET_ENV_VAR as STREAM_SOCKET_ENV
from .protocol import FlushResult
from .spark_driver import _executors_have_arrow, _narrow, _run_tasks
from .spark_exactly_once import for_batch_write, for_stream, for_write
from .spark_plan import OPTIONS, plan_write, write_options
from .spark_ship import ship
from .spark_task import (
    INVALID,
    TaskPlan,
    TaskResult,
    ToPulsarSparkError,
    check_socket,
    freeze_worker_once,
)

try:  # pyspark >= 4.1: the stream writer gets Arrow batches too
    from pyspark.sql.datasource import DataSourceStreamArrowWriter as _StreamWriterBase
except ImportError:  # pyspark 4.0: rows
    from pyspark.sql.datasource import (  # type: ignore[assignment]
        DataSourceStreamWriter as _StreamWriterBase,
    )

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

__all__ = [
    "FORMAT",
    "INVALID",
    "OPTIONS",
    "ToPulsarCommitMessage",
    "ToPulsarDataSource",
    "ToPulsarSparkError",
    "WriteSummary",
    "check_socket",
    "foreach_batch",
    "plan_write",
    "register",
    "ship",
    "use_this_python_locally",
    "warm_up",
    "write",
]

FORMAT = "to_pulsar"

log = logging.getLogger(__name__)

_TASK_ERROR = re.compile(r"ToPulsarSparkError: (to_pulsar: [^\n]*)")


def register(spark: SparkSession, *, warm_up: bool = True) -> None:
    """Register the ``"to_pulsar"`` format with this Spark session, and :func:`ship`. With
    ``warm_up``, start the Python processes a write runs in now, in the background
    (:mod:`to_pulsar.spark_warm_up`), so the first write does not wait for them."""
    ship(spark)  # first: a registered data source keeps the Python includes it was given
    spark.dataSource.register(_data_source_for(spark))
    if warm_up:
        spark_warm_up.start(spark, FORMAT)


def warm_up(spark: SparkSession) -> None:
    """Start, in the background, the Python workers :func:`write` runs its tasks in, so the
    session's first write finds them (and pyarrow) ready: call it once the session exists,
    before the job reads its data. It starts nothing a write would not start (a write that
    comes at once runs in the same workers): where the executors lack pyarrow (asked as
    write() asks), nothing. Also :func:`ship`."""
    ship(spark)
    spark_warm_up.start_tasks(spark, functools.partial(_executors_have_arrow, spark))


def use_this_python_locally(master: str | None) -> bool:
    """For a local master (``local``, ``local[2]``, ...), run Spark's Python workers in this
    interpreter unless ``$PYSPARK_PYTHON`` says otherwise: Spark's default, ``python3`` from
    PATH, is often not the Python (a virtualenv's) that has pyarrow. Call before the session
    is created (SparkContext reads the variable once); True if it set it."""
    if master is None or not master.strip().startswith("local"):
        return False
    if os.environ.get("PYSPARK_PYTHON"):
        return False
    os.environ["PYSPARK_PYTHON"] = sys.executable
    return True


# -- write(): the format's work from the driver, Arrow where the executors have it -------------


@dataclass(frozen=True)
class WriteSummary:
    """What :func:`write` delivered: tasks, rows sent, acked, discarded (tolerated) by reason."""

    tasks: int
    rows: int
    acked: int
    discarded: dict[str, int] = field(default_factory=dict)


def _write_rows(df: DataFrame, options: dict[str, str], batch: int | None) -> WriteSummary:
    plan = for_write(plan_write(options, df.schema), df.sparkSession, batch)  # exactlyOnce
    ship(df.sparkSession)
    rows, plan = _narrow(df, plan)
    try:
        results = _run_tasks(rows, plan)
    except Exception as exc:  # Spark's wrapping of the failed task's exception
        match = _TASK_ERROR.search(str(exc))
        if match is None:
            raise
        raise ToPulsarSparkError(match.group(1)) from exc
    _log_commit(results, "write" if batch is None else f"micro-batch {batch}")
    tasks, sent, total = _totals(results)
    return WriteSummary(tasks, sent, total.acked, dict(total.discarded))


def write(df: DataFrame, **options: object) -> WriteSummary:
    """Write ``df`` as ``df.write.format("to_pulsar")`` would, with the same options, checks
    and per-task commit-on-ack, and as fast where the executors' Python has pyarrow (the
    tasks get Arrow batches, through ``mapInArrow``); where it has not, through ``df.rdd``,
    needing nothing there. Returns once every task's rows are acked; raises
    :class:`ToPulsarSparkError` with the failed task's message otherwise."""
    return _write_rows(df, write_options(options), None)


def foreach_batch(**options: object) -> Callable[[DataFrame, int], None]:
    """For ``stream_df.writeStream.foreachBatch(...)``: each micro-batch through :func:`write`;
    the query commits a micro-batch only once it is acked, and stops with the error if not."""
    checked = write_options(options)  # a bad name fails now, not at the first micro-batch

    def write_batch(df: DataFrame, batch_id: int) -> None:
        _write_rows(df, checked, batch_id)

    return write_batch


# -- Spark's classes ------------------------------------------------------------------------------


@dataclass
class ToPulsarCommitMessage(TaskResult, WriterCommitMessage):
    """One task's outcome, sent to the driver: rows sent, acked, discarded (tolerated)."""

    @classmethod
    def of(cls, result: TaskResult) -> ToPulsarCommitMessage:
        return cls(result.rows, result.acked, result.discarded, result.host)


def _totals(messages: Iterable[object]) -> tuple[int, int, FlushResult]:
    """(tasks, rows, counts) over the tasks that committed."""
    tasks = rows = 0
    total = FlushResult()
    for message in messages:
        if isinstance(message, TaskResult):
            tasks += 1
            rows += message.rows
            total = total + FlushResult(message.acked, message.discarded)
    return tasks, rows, total


def _log_commit(messages: Iterable[object], what: str) -> None:
    tasks, rows, total = _totals(messages)
    if total.ok:
        log.info("to_pulsar: %s: %d rows acked by %d tasks", what, total.acked, tasks)
    else:
        log.warning(
            "to_pulsar: %s: %d of %d rows acked by %d tasks, discarded (tolerated): %s",
            what,
            total.acked,
            rows,
            tasks,
            total.describe_discards(),
        )


def _log_abort(messages: Iterable[object], what: str) -> None:
    tasks, _, total = _totals(messages)
    log.warning(
        "to_pulsar: %s aborted; %d rows from %d tasks that succeeded are already in Pulsar",
        what,
        total.acked,
        tasks,
    )


def _require_arrow() -> None:
    """Planning runs in the Python Spark starts for its workers: without pyarrow there, say
    so (and what works instead) rather than let Spark fail on its own import."""
    if importlib.util.find_spec("pyarrow") is None:
        raise ToPulsarSparkError(
            f"to_pulsar: the Python Spark runs for its workers ({sys.executable}) has no "
            "pyarrow, which format('to_pulsar') needs (Spark passes rows to Python data "
            "sources as Arrow); use to_pulsar.spark.write(df, ...) or foreach_batch(...), "
            "which need nothing there, or install pyspark[sql] in that Python, or point "
            "PYSPARK_PYTHON at one that has it"
        )


class _BatchWriter(DataSourceArrowWriter):
    def __init__(self, plan: TaskPlan) -> None:
        self.plan = plan

    def write(self, iterator: Iterator[Any]) -> WriterCommitMessage:
        freeze_worker_once()
        return ToPulsarCommitMessage.of(self.plan.write(iterator))

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        _log_commit(messages, "write")

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        _log_abort(messages, "write")


class _StreamWriter(_StreamWriterBase):
    def __init__(self, plan: TaskPlan) -> None:
        self.plan = plan

    def write(self, iterator: Iterator[Any]) -> WriterCommitMessage:
        freeze_worker_once()
        return ToPulsarCommitMessage.of(self.plan.write(iterator))

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        _log_commit(messages, f"micro-batch {batchId}")

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        _log_abort(messages, f"micro-batch {batchId}")


class ToPulsarDataSource(DataSource):
    """The ``"to_pulsar"`` format (write only: batch and streaming)."""

    #: The tasks run on the host that plans the write (a local master): planning connects to
    #: the daemon as a task would, so a wrong socket fails in a second, in one to_pulsar
    #: line, before any task (not after the tasks' flush timeout, in Spark's task logs).
    tasks_run_here = False

    @classmethod
    def name(cls) -> str:
        return FORMAT

    def _socket_error(self) -> str | None:
        """Where the tasks run here: what a task would fail with, connecting (raised by the
        caller, so that Spark's message holds one frame of traceback around it)."""
        if self.tasks_run_here:
            try:
                check_socket(self.options.get("socket") or None)
            except ToPulsarSparkError as exc:
                return str(exc)
        return None

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        if overwrite:
            raise ToPulsarSparkError(
                "to_pulsar: a Pulsar topic can only be appended to: use .mode('append')"
            )
        if self.options.get(spark_warm_up.OPTION):
            _require_arrow()
            return spark_warm_up.WarmUpWriter()
        plan = plan_write(self.options, schema)
        _require_arrow()
        if (error := self._socket_error()) is not None:
            raise ToPulsarSparkError(error)
        return _BatchWriter(for_batch_write(plan))  # made once: every task gets its write id

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        plan = plan_write(self.options, schema)
        _require_arrow()
        if (error := self._socket_error()) is not None:
            raise ToPulsarSparkError(error)
        return _StreamWriter(for_stream(plan))


def _data_source_for(spark: SparkSession) -> type[ToPulsarDataSource]:
    """The class to register: with a local master, one that checks the socket when it plans
    (made here, so Spark pickles it by value with its ``tasks_run_here``)."""
    try:
        context = spark.sparkContext
        local = str(context.master).startswith("local")
        # The tasks' environment, not this one, may name the socket: then let them look.
        local = local and not context.getConf().get(f"spark.executorEnv.{STREAM_SOCKET_ENV}")
    except Exception:  # Spark Connect: the tasks run elsewhere
        local = False
    if not local:
        return ToPulsarDataSource
    attributes = {"tasks_run_here": True, "__module__": __name__}
    return type("ToPulsarDataSource", (ToPulsarDataSource,), attributes)
