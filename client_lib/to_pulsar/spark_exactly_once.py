"""Exactly-once Spark writes: each task publishes under a producer name and sequence ids
that a retry of it reuses, so a broker with deduplication on stores nothing twice.

A task's producer name is ``<producerNamePrefix>-<write id>-<Spark partition id>``:

- a batch write (the format's ``writer``, :func:`to_pulsar.spark.write`): a write id
  made once on the driver for this write (uuid4 hex), so every attempt of a task gets
  the same name; its first sequence id is 0;
- a streaming query (the format's ``streamWriter``, :func:`to_pulsar.spark.foreach_batch`):
  the query's id, which a restart from the checkpoint keeps; its first sequence id is
  ``micro-batch id << 32``, so micro-batch N+1's ids are above N's (each task sends fewer
  than 2**32 rows to a partition in a micro-batch).

The daemon gives the n-th message a connection sends to a partition the sequence id
``first + n``: a retried task that sends the same rows in the same order sends the same
ids, and the broker drops those it already has (the daemon reports them acked).
Task-side, the query and micro-batch ids come from the local properties Spark's
``MicroBatchExecution`` sets on the jobs it runs.
"""

from __future__ import annotations

import contextlib
import dataclasses
import uuid
from dataclasses import dataclass
from typing import Any

from .protocol import MAX_PRODUCER_NAME_BYTES, encode_producer_record
from .spark_task import TaskPlan, ToPulsarSparkError

__all__ = [
    "DEFAULT_PREFIX",
    "ExactlyOnce",
    "for_batch_write",
    "for_micro_batch",
    "for_stream",
    "for_write",
    "parse",
]

DEFAULT_PREFIX = "to_pulsar"
#: The local properties Spark's MicroBatchExecution sets on the jobs of a micro-batch.
QUERY_ID_PROPERTY = "sql.streaming.queryId"
BATCH_ID_PROPERTY = "streaming.sql.batchId"
#: Sequence ids of micro-batch N start at N << BATCH_SHIFT.
BATCH_SHIFT = 32
_MAX_BATCH_ID = (1 << (63 - BATCH_SHIFT)) - 1
# "-" + a query id (36 characters) or write id (32) + "-" + a partition id (up to 10 digits)
_SUFFIX_BYTES = 1 + 36 + 1 + 10


@dataclass(frozen=True)
class ExactlyOnce:
    """How a task names its producer. ``write_id``: the batch write's id (None: the
    streaming query's, read in the task); ``batch_id``: the micro-batch's (None: 0 for a
    batch write, read in the task for a stream)."""

    prefix: str = DEFAULT_PREFIX
    write_id: str | None = None
    batch_id: int | None = None
    streaming: bool = False

    def producer(self) -> tuple[str, int]:
        """``(producer name, first sequence id)`` for the task running this."""
        from pyspark import TaskContext  # Spark's own, on every executor

        context = TaskContext.get()
        if context is None:
            raise ToPulsarSparkError("to_pulsar: exactlyOnce: not running in a Spark task")
        write_id, batch_id = self.write_id, self.batch_id
        if write_id is None:
            write_id = context.getLocalProperty(QUERY_ID_PROPERTY)
        if self.streaming and batch_id is None:
            raw = context.getLocalProperty(BATCH_ID_PROPERTY)
            batch_id = None if raw is None else int(raw)
        if write_id is None or (self.streaming and batch_id is None):
            raise ToPulsarSparkError(
                "to_pulsar: exactlyOnce: this task has no streaming query or micro-batch id "
                f"(Spark's local properties {QUERY_ID_PROPERTY}, {BATCH_ID_PROPERTY}); "
                "exactly-once streams need a micro-batch query"
            )
        first = 0 if batch_id is None else _first_sequence_id(batch_id)
        return f"{self.prefix}-{write_id}-{context.partitionId()}", first


def _first_sequence_id(batch_id: int) -> int:
    if not 0 <= batch_id <= _MAX_BATCH_ID:
        raise ToPulsarSparkError(
            f"to_pulsar: exactlyOnce: micro-batch id {batch_id} is out of range "
            f"(0..{_MAX_BATCH_ID})"
        )
    return batch_id << BATCH_SHIFT


def parse(options: Any) -> ExactlyOnce | None:
    """The options ``exactlyOnce`` (true or false, default false) and
    ``producerNamePrefix`` (default ``to_pulsar``), checked on the driver."""
    raw = options.get("exactlyOnce")
    text = "false" if raw is None else str(raw).strip().lower()
    if text not in ("true", "false"):
        raise ToPulsarSparkError(
            f"to_pulsar: option exactlyOnce must be true or false, got {raw!r}"
        )
    prefix = options.get("producerNamePrefix")
    prefix = DEFAULT_PREFIX if prefix is None else str(prefix)
    try:  # the longest name a task can make with it
        encode_producer_record(prefix + "x" * _SUFFIX_BYTES, 0)
    except ValueError as exc:
        limit = MAX_PRODUCER_NAME_BYTES - _SUFFIX_BYTES
        raise ToPulsarSparkError(
            f"to_pulsar: option producerNamePrefix must be 1 to {limit} bytes of printable "
            f"UTF-8, got {prefix[:40]!r} ({exc})"
        ) from None
    if not prefix:
        raise ToPulsarSparkError("to_pulsar: option producerNamePrefix must not be empty")
    return ExactlyOnce(prefix) if text == "true" else None


def for_batch_write(plan: TaskPlan) -> TaskPlan:
    """A batch write's plan, made once on the driver: its own write id for every task."""
    if plan.exactly_once is None:
        return plan
    naming = dataclasses.replace(plan.exactly_once, write_id=uuid.uuid4().hex, streaming=False)
    return dataclasses.replace(plan, exactly_once=naming)


def for_stream(plan: TaskPlan) -> TaskPlan:
    """The format's streaming plan: query and micro-batch ids come from each task."""
    if plan.exactly_once is None:
        return plan
    naming = dataclasses.replace(plan.exactly_once, write_id=None, streaming=True)
    return dataclasses.replace(plan, exactly_once=naming)


def for_write(plan: TaskPlan, spark: Any, batch_id: int | None) -> TaskPlan:
    """:func:`to_pulsar.spark.write`'s plan (``batch_id`` None) or a ``foreach_batch``
    micro-batch's."""
    if batch_id is None:
        return for_batch_write(plan)
    return for_micro_batch(plan, spark, batch_id)


def for_micro_batch(plan: TaskPlan, spark: Any, batch_id: int) -> TaskPlan:
    """A ``foreach_batch`` micro-batch's plan: the query id as the driver sees it inside
    ``foreachBatch`` (else the tasks read it), and ``batch_id``."""
    if plan.exactly_once is None:
        return plan
    query_id = None
    with contextlib.suppress(Exception):  # Spark Connect: no SparkContext; tasks have it
        query_id = spark.sparkContext.getLocalProperty(QUERY_ID_PROPERTY)
    _first_sequence_id(batch_id)  # in range, checked before any task
    naming = dataclasses.replace(
        plan.exactly_once, write_id=query_id, batch_id=batch_id, streaming=True
    )
    return dataclasses.replace(plan, exactly_once=naming)
