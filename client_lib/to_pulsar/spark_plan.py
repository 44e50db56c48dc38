"""Planning a to_pulsar Spark write on the driver: check the schema and options, once.

The result, a :class:`~to_pulsar.spark_task.TaskPlan`, is what every task gets.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from pyspark.sql.types import (
    BinaryType,
    ByteType,
    DataType,
    IntegerType,
    LongType,
    ShortType,
    StringType,
    StructType,
    TimestampNTZType,
    TimestampType,
)

from .spark_task import TaskPlan, ToPulsarSparkError

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

__all__ = ["DEFAULT_FLUSH_TIMEOUT_MS", "OPTIONS", "narrow", "plan_write", "write_options"]

#: The options, as the format and :func:`to_pulsar.spark.write` spell them (case-insensitive).
OPTIONS = ("socket", "topic", "flushTimeoutMs", "tolerateDiscards")
DEFAULT_FLUSH_TIMEOUT_MS = 60_000

_INTEGER_TYPES = (ByteType, ShortType, IntegerType, LongType)


def _type_name(data_type: DataType) -> str:
    return str(data_type.simpleString())


def plan_write(options: Any, schema: StructType) -> TaskPlan:
    """Check the schema and options (before any task starts) and say where each column is."""
    columns: dict[str, tuple[int, DataType]] = {}
    for index, struct_field in enumerate(schema.fields):
        columns.setdefault(struct_field.name.lower(), (index, struct_field.dataType))

    def column(name: str, allowed: tuple[type, ...], expected: str) -> int | None:
        if name not in columns:
            return None
        index, data_type = columns[name]
        if not isinstance(data_type, allowed):
            raise ToPulsarSparkError(
                f"to_pulsar: column '{name}' must be {expected}, not {_type_name(data_type)}"
            )
        return index

    if "value" not in columns:
        raise ToPulsarSparkError(
            "to_pulsar: the DataFrame needs a 'value' column (string or binary)"
        )
    value = column("value", (StringType, BinaryType), "string or binary")
    assert value is not None
    key = column("key", (StringType, BinaryType), "string or binary")
    partition_key = column(
        "partition_key", _INTEGER_TYPES, "an integer type (tinyint, smallint, int or bigint)"
    )
    topic_column = column("topic", (StringType,), "string")
    timestamp = column(
        "timestamp",
        (TimestampType, TimestampNTZType, *_INTEGER_TYPES),
        "timestamp, timestamp_ntz or bigint (milliseconds since the epoch)",
    )
    kind = "ms"
    if timestamp is not None:
        data_type = columns["timestamp"][1]
        if isinstance(data_type, TimestampNTZType):
            kind = "ntz"
        elif isinstance(data_type, TimestampType):
            kind = "ts"

    topic = options.get("topic") or None
    if topic is None and topic_column is None:
        raise ToPulsarSparkError(
            "to_pulsar: no topic: set .option('topic', ...) or add a 'topic' column"
        )
    return TaskPlan(
        socket=options.get("socket") or None,
        topic=topic,
        flush_timeout_s=_positive_ms(options, "flushTimeoutMs", DEFAULT_FLUSH_TIMEOUT_MS) / 1000,
        tolerate_discards=_boolean(options, "tolerateDiscards", False),
        value=value,
        key=key,
        partition_key=partition_key,
        topic_column=topic_column,
        timestamp=timestamp,
        timestamp_kind=kind,
    )


def _positive_ms(options: Any, name: str, default: int) -> int:
    raw = options.get(name)
    if raw is None:
        return default
    try:
        value = int(str(raw).strip())
    except ValueError:
        value = 0
    if value <= 0:
        raise ToPulsarSparkError(
            f"to_pulsar: option {name} must be a positive number of milliseconds, got {raw!r}"
        )
    return value


def _boolean(options: Any, name: str, default: bool) -> bool:
    raw = options.get(name)
    if raw is None:
        return default
    text = str(raw).strip().lower()
    if text not in ("true", "false"):
        raise ToPulsarSparkError(f"to_pulsar: option {name} must be true or false, got {raw!r}")
    return text == "true"


def write_options(options: dict[str, object]) -> dict[str, str]:
    """Keyword options as the format's strings; an unknown name is an error, not ignored."""
    known = {name.lower(): name for name in OPTIONS}
    result: dict[str, str] = {}
    for name, value in options.items():
        canonical = known.get(name.lower())
        if canonical is None:
            raise ToPulsarSparkError(
                f"to_pulsar: unknown option {name!r} (options: {', '.join(OPTIONS)})"
            )
        if value is not None:
            result[canonical] = str(value).lower() if isinstance(value, bool) else str(value)
    return result


def narrow(df: DataFrame, plan: TaskPlan) -> tuple[DataFrame, TaskPlan]:
    """Only the columns the tasks read, timestamps as exact microseconds from the JVM
    (pyspark would hand them out as naive local datetimes)."""
    from pyspark.sql import functions

    names = ("value", "key", "partition_key", "topic_column", "timestamp")
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
