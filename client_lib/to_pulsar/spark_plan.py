"""Planning a to_pulsar Spark write on the driver: check the schema and options, once.

The result, a :class:`~to_pulsar.spark_task.TaskPlan`, is what every task gets.
Column types are recognised by their Spark type names (``DataType.typeName()``),
so this module, like the task side, imports nothing outside the standard library.
"""

from __future__ import annotations

from typing import Any

from .errors import InvalidMessageError
from .spark_exactly_once import parse as parse_exactly_once
from .spark_task import TaskPlan, ToPulsarSparkError
from .topics import check_topic

__all__ = ["DEFAULT_FLUSH_TIMEOUT_MS", "OPTIONS", "plan_write", "write_options"]

#: The options, as the format and :func:`to_pulsar.spark.write` spell them (case-insensitive).
OPTIONS = (
    "socket",
    "topic",
    "flushTimeoutMs",
    "tolerateDiscards",
    "exactlyOnce",
    "producerNamePrefix",
)
DEFAULT_FLUSH_TIMEOUT_MS = 60_000

_TEXT = ("string", "binary")
_INTEGERS = ("byte", "short", "integer", "long")
_TIMESTAMPS = ("timestamp", "timestamp_ntz")


def plan_write(options: Any, schema: Any) -> TaskPlan:
    """Check the schema (a pyspark StructType) and options before any task starts, and say
    where each column is."""
    columns: dict[str, tuple[int, Any]] = {}
    for index, struct_field in enumerate(schema.fields):
        columns.setdefault(struct_field.name.lower(), (index, struct_field.dataType))

    def column(name: str, allowed: tuple[str, ...], expected: str) -> int | None:
        if name not in columns:
            return None
        index, data_type = columns[name]
        if data_type.typeName() not in allowed:
            raise ToPulsarSparkError(
                f"to_pulsar: column '{name}' must be {expected}, not {data_type.simpleString()}"
            )
        return index

    if "value" not in columns:
        raise ToPulsarSparkError(
            "to_pulsar: the DataFrame needs a 'value' column (string or binary)"
        )
    value = column("value", _TEXT, "string or binary")
    assert value is not None
    key = column("key", _TEXT, "string or binary")
    partition_key = column(
        "partition_key", _INTEGERS, "an integer type (tinyint, smallint, int or bigint)"
    )
    topic_column = column("topic", ("string",), "string")
    properties = column("properties", ("map",), "map<string,string>")
    if properties is not None:
        map_type = columns["properties"][1]
        if (map_type.keyType.typeName(), map_type.valueType.typeName()) != ("string", "string"):
            raise ToPulsarSparkError(
                "to_pulsar: column 'properties' must be map<string,string>, "
                f"not {map_type.simpleString()}"
            )
    timestamp = column(
        "timestamp",
        _TIMESTAMPS + _INTEGERS,
        "timestamp, timestamp_ntz or bigint (milliseconds since the epoch)",
    )
    deliver_at = column(
        "deliver_at",
        _TIMESTAMPS + _INTEGERS,
        "timestamp, timestamp_ntz or bigint (milliseconds since the epoch)",
    )

    def kind_of(name: str) -> str:  # "ntz" for timestamp_ntz, "ts" for timestamp, else "ms"
        if name not in columns:
            return "ms"
        return {"timestamp_ntz": "ntz", "timestamp": "ts"}.get(columns[name][1].typeName(), "ms")

    kind = kind_of("timestamp")

    topic = options.get("topic") or None
    if topic is None and topic_column is None:
        raise ToPulsarSparkError(
            "to_pulsar: no topic: set .option('topic', ...) or add a 'topic' column"
        )
    if topic is not None:
        try:
            check_topic(str(topic).encode("utf-8", "surrogateescape"))
        except InvalidMessageError as exc:  # before any task, not as N invalid rows
            raise ToPulsarSparkError(f"to_pulsar: option 'topic': {exc}") from None
    return TaskPlan(
        socket=options.get("socket") or None,
        topic=topic,
        flush_timeout_s=_positive_ms(options, "flushTimeoutMs", DEFAULT_FLUSH_TIMEOUT_MS) / 1000,
        tolerate_discards=_boolean(options, "tolerateDiscards", False),
        value=value,
        key=key,
        partition_key=partition_key,
        topic_column=topic_column,
        properties=properties,
        timestamp=timestamp,
        timestamp_kind=kind,
        deliver_at=deliver_at,
        deliver_at_kind=kind_of("deliver_at"),
        exactly_once=parse_exactly_once(options),
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
    """Keyword options as the format's strings (``exactly_once`` is ``exactlyOnce``); an
    unknown name is an error, not ignored."""
    known = {name.lower(): name for name in OPTIONS}
    result: dict[str, str] = {}
    for name, value in options.items():
        canonical = known.get(name.lower().replace("_", ""))
        if canonical is None:
            raise ToPulsarSparkError(
                f"to_pulsar: unknown option {name!r} (options: {', '.join(OPTIONS)})"
            )
        if value is not None:
            result[canonical] = str(value).lower() if isinstance(value, bool) else str(value)
    return result
