"""The tasks of :func:`to_pulsar.spark.write`, started from the driver: only the columns they
read, and whether they get Arrow batches (``mapInArrow``, where the executors' Python has
pyarrow: asked once per application) or rows (``df.rdd``, needing nothing there)."""

from __future__ import annotations

import dataclasses
import os
import shutil
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .spark_task import RESULT_SCHEMA, TaskPlan, TaskResult, python_has_arrow

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession


def _narrow(df: DataFrame, plan: TaskPlan) -> tuple[DataFrame, TaskPlan]:
    """Only the columns the tasks read, timestamps as exact microseconds from the JVM
    (pyspark would hand them out as naive local datetimes)."""
    from pyspark.sql import functions

    names = ("value", "key", "partition_key", "topic_column", "properties", "timestamp")
    used = [name for name in names if getattr(plan, name) is not None]
    columns = []
    for name in used:
        column = df[getattr(plan, name)]
        if name == "timestamp" and plan.timestamp_kind == "ts":
            column = functions.unix_micros(column)
        columns.append(column.alias(name))
    positions: dict[str, Any] = {name: None for name in names}
    positions.update({name: index for index, name in enumerate(used)})
    kind = "us" if plan.timestamp_kind == "ts" else plan.timestamp_kind
    return df.select(*columns), dataclasses.replace(plan, timestamp_kind=kind, **positions)


#: applicationId -> whether its executors' Python has pyarrow (asked once per application).
_ARROW_ON_EXECUTORS: dict[str, bool] = {}


def _executors_have_arrow(spark: SparkSession) -> bool:
    """Ask one executor (one tiny job, once per application) whether its Python has pyarrow:
    then write() takes the format's path, Arrow batches straight to records. The question
    goes as a SQL Python UDF (not Arrow-optimised, so it runs without pyarrow), which runs
    in the Python worker process that the ``mapInArrow`` tasks then use; an RDD job would
    start one of its own."""
    try:
        context = spark.sparkContext
    except Exception:  # Spark Connect: no RDDs, so no row path either
        return True
    known = _ARROW_ON_EXECUTORS.get(context.applicationId)
    if known is None and _local_workers_run_this_python(context):
        known = _ARROW_ON_EXECUTORS[context.applicationId] = python_has_arrow()
    if known is None:
        from pyspark.sql import functions

        probe = functions.udf(python_has_arrow, "boolean", useArrow=False)
        try:
            answers = [row[0] for row in spark.range(1).select(probe()).collect()]
        except Exception:  # the row path will fail with the real error
            answers = [False]
        known = _ARROW_ON_EXECUTORS[context.applicationId] = all(answers)
    return known


def _local_workers_run_this_python(context: Any) -> bool:
    """With a local master, Spark runs the workers' Python (``context.pythonExec``) on this
    host: when that is this interpreter (the same path, or the same file in the same folder:
    a virtualenv's ``python3`` and ``python``), it has what this one has, unasked."""
    if not str(context.master).startswith("local"):
        return False
    found = shutil.which(str(context.pythonExec))
    if found is None:
        return False
    here, there = Path(sys.executable).absolute(), Path(found).absolute()
    if here == there:
        return True
    try:
        return here.parent == there.parent and os.path.samefile(here, there)
    except OSError:
        return False


def _run_tasks(rows: DataFrame, plan: TaskPlan) -> list[TaskResult]:
    """Every partition through ``plan``: as Arrow batches (``mapInArrow``, as the format's
    tasks get them) where the executors have pyarrow, else as Rows through ``df.rdd``."""
    if _executors_have_arrow(rows.sparkSession):
        try:
            results = rows.mapInArrow(plan.write_arrow, RESULT_SCHEMA)
        except ImportError:  # no pandas or pyarrow on the driver (mapInArrow's needs)
            pass
        else:
            return [
                TaskResult(row.rows, row.acked, dict(row.discarded or {}), row.host)
                for row in results.collect()
            ]
    return rows.rdd.mapPartitions(plan.write_partition).collect()
