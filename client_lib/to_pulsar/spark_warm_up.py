"""Starting a Spark session's Python workers before its first to_pulsar write.

The first ``df.write.format("to_pulsar")`` of a session otherwise starts, one after
the other, the three Python processes Spark runs a Python data source write in (one
plans the write, one runs the tasks, one commits), each importing pyspark from
Spark's ``pyspark.zip``, which holds no bytecode and so is compiled again in every
process; then each task's worker imports pyarrow, pandas and to_pulsar: about 6 s on
a 2-core machine before the first row goes, once per session (docs/spark.md).
:func:`start`, called by :func:`to_pulsar.spark.register`, writes one row per task
slot through the format in a background thread, with tasks that send nothing: those
processes start and import while the job goes on (reading its data, say), and the
first real write finds them running.

:func:`start_tasks`, called by :func:`to_pulsar.spark.warm_up`, starts only what
:func:`to_pulsar.spark.write` needs: the task workers (a ``mapInArrow`` job of one
task per slot), with what its tasks import (pyarrow, numpy, to_pulsar; not pandas,
which they never import). A write that comes at once runs in those same workers.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from pyspark.sql.datasource import DataSourceArrowWriter, WriterCommitMessage

from .spark_task import freeze_worker_once

__all__ = [
    "MAX_TASKS",
    "OPTION",
    "WarmUpWriter",
    "outcomes",
    "prepare_task_worker",
    "prepare_write_worker",
    "start",
    "start_tasks",
]

#: The option that makes a write through the format the warm-up (it sends nothing).
OPTION = "toPulsarWarmUp"
#: At most this many tasks: a local master's slots, or some of a cluster's.
MAX_TASKS = 8

log = logging.getLogger(__name__)

#: applicationId -> how its warm-up ended: "" (written) or why not.
outcomes: dict[str, str] = {}
_started: set[str] = set()
_lock = threading.Lock()


def _slots(spark: Any) -> tuple[str, int]:
    """The application's id, and how many tasks start its workers (one per slot, at most
    ``MAX_TASKS``)."""
    try:
        application = str(spark.sparkContext.applicationId)
        tasks = max(1, min(int(spark.sparkContext.defaultParallelism), MAX_TASKS))
    except Exception:  # Spark Connect: no SparkContext
        application, tasks = str(id(spark)), 2
    return application, tasks


def _first(key: str) -> bool:
    with _lock:
        if key in _started:
            return False
        _started.add(key)
        return True


def start_tasks(spark: Any, arrow: Callable[[], bool]) -> threading.Thread | None:
    """Start the task workers :func:`to_pulsar.spark.write` runs in, from a daemon thread, once
    per application (None if already), where ``arrow()`` says the executors have pyarrow
    (else the job would fail, and Spark log it, where write() takes ``df.rdd``)."""
    application, tasks = _slots(spark)
    if not _first(f"tasks {application}"):
        return None

    def run() -> None:
        try:
            ready = arrow()
        except Exception as exc:  # a stopped session: the write says what is wrong
            log.debug("to_pulsar: the warm-up could not ask about pyarrow: %s", exc)
            return
        if ready:
            _prepare_workers(spark, tasks, prepare_write_worker)

    thread = threading.Thread(target=run, name="to_pulsar warm-up", daemon=True)
    thread.start()
    return thread


def start(spark: Any, format_name: str) -> threading.Thread | None:
    """Run the warm-up write in a daemon thread, once per application; None if it already ran
    (or runs) for this one."""
    application, tasks = _slots(spark)
    if not _first(application):
        return None
    thread = threading.Thread(
        target=_write,
        args=(spark, format_name, tasks, application),
        name="to_pulsar warm-up",
        daemon=True,
    )
    thread.start()
    threading.Thread(
        target=_prepare_workers,
        args=(spark, tasks, prepare_task_worker),
        name="to_pulsar warm-up",
        daemon=True,
    ).start()
    return thread


def _prepare_workers(
    spark: Any, tasks: int, prepare: Callable[[Iterable[Any]], Iterator[Any]]
) -> bool:
    """Start the task workers at once (alongside the format's planning process: Spark runs a
    data source's tasks and ``mapInArrow``'s in the same Python workers, not RDDs'); True if
    every task ran."""
    try:
        rows = spark.range(tasks, numPartitions=tasks)
        return len(rows.mapInArrow(prepare, "ready BOOLEAN").collect()) == tasks
    except Exception as exc:  # no pyarrow there, say: write() asks, and says so
        log.debug("to_pulsar: the warm-up job failed: %s", exc)
        return False


def _ready(pyarrow: Any) -> Any:
    """One row, ``ready = true``, from its buffers (a conversion from Python values would
    import pandas)."""
    flag = pyarrow.Array.from_buffers(pyarrow.bool_(), 1, [None, pyarrow.py_buffer(b"\x01")])
    return pyarrow.RecordBatch.from_arrays([flag], names=["ready"])


def prepare_task_worker(batches: Iterable[Any]) -> Iterator[Any]:
    """In a Spark Python worker (``mapInArrow``): import what a task of the format needs
    (pandas too: Spark's end of such a task imports it), and freeze it (gc)."""
    import pyarrow

    for _ in batches:
        pass
    _import_for_batches()
    freeze_worker_once()
    yield _ready(pyarrow)


def prepare_write_worker(batches: Iterable[Any]) -> Iterator[Any]:
    """In a Spark Python worker (``mapInArrow``): import what a task of ``write()`` needs
    (not pandas), and freeze it (gc)."""
    import pyarrow

    for _ in batches:
        pass
    with contextlib.suppress(ImportError):  # numpy, pyarrow.compute (else rows' path)
        from . import spark_arrow  # noqa: F401
    freeze_worker_once()
    yield _ready(pyarrow)


def _import_for_batches() -> None:
    with contextlib.suppress(ImportError):  # numpy, pyarrow.compute (else rows' path)
        from . import spark_arrow  # noqa: F401
    with contextlib.suppress(ImportError):  # a bare executor (to_pulsar.spark.write's rows)
        import pyarrow

        pyarrow.array([b""])  # as Spark's end of a task: pyarrow imports pandas, if there


def _write(spark: Any, format_name: str, tasks: int, application: str) -> None:
    # Spark looks a registered data source up in the thread's active session, which a new
    # thread has not (pyspark's createDataFrame sets it the same way).
    with contextlib.suppress(Exception):  # Spark Connect: no JVM here, nothing to set
        session_class = spark._get_j_spark_session_class(spark._jvm)
        session_class.setActiveSession(spark._jsparkSession)
    try:
        rows = spark.range(tasks, numPartitions=tasks).selectExpr("CAST(id AS STRING) AS value")
        writer = rows.write.format(format_name).option(OPTION, "true").mode("append")
        writer.save()
    except Exception as exc:  # a real write says what is wrong; a stopped session ends it
        outcomes[application] = " ".join(str(exc).split())[:500] or repr(exc)
        log.debug("to_pulsar: the warm-up write failed: %s", exc)
    else:
        outcomes[application] = ""


class WarmUpWriter(DataSourceArrowWriter):
    """The warm-up's tasks: read the batches, import what a first batch needs, send nothing."""

    def write(self, iterator: Iterator[Any]) -> WriterCommitMessage:
        for _ in iterator:
            pass
        _import_for_batches()
        freeze_worker_once()
        return WriterCommitMessage()

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        pass

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        pass
