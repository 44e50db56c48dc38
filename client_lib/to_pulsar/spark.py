"""Spark data source ``"to_pulsar"``: DataFrames and streams into Pulsar through the local daemon.

::

    import to_pulsar.spark
    to_pulsar.spark.register(spark)

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
(unless ``tolerateDiscards``). Delivery is at-least-once: a retried task sends
its rows again.

Options: ``socket`` (the daemon's stream socket; default
``$TO_PULSAR_STREAM_SOCKET`` on the executor, else
``/run/pulsar-bruce/bruce.stream.sock``), ``topic`` (required unless the
DataFrame has a ``topic`` column), ``flushTimeoutMs`` (default 60000),
``tolerateDiscards`` (default false).

Columns: ``value`` (string or binary, required; null sends an empty value),
``key`` (string or binary; null: no key), ``partition_key`` (tinyint, smallint,
int or bigint in -2^31..2^32-1; null: the daemon picks the partition), ``topic``
(string; overrides the option per row), ``timestamp`` (timestamp, timestamp_ntz
as UTC, or bigint milliseconds since the epoch; null: now). Other columns are
ignored.

Needs pyspark >= 4.0 (the ``[spark]`` extra); ``import to_pulsar`` itself never
imports pyspark.
"""

from __future__ import annotations

import datetime
import logging
import socket as _socket
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceStreamWriter,
    DataSourceWriter,
    WriterCommitMessage,
)
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

from .errors import (
    DaemonUnavailableError,
    InvalidMessageError,
    SendTimeoutError,
    ToPulsarError,
)
from .paths import resolve_stream_socket_path
from .protocol import FlushResult
from .stream import StreamSender

try:  # pyspark >= 4.1: the stream writer gets Arrow batches too
    from pyspark.sql.datasource import DataSourceStreamArrowWriter as _StreamWriterBase
except ImportError:  # pyspark 4.0: rows
    from pyspark.sql.datasource import (  # type: ignore[assignment]
        DataSourceStreamWriter as _StreamWriterBase,
    )

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = [
    "FORMAT",
    "ToPulsarCommitMessage",
    "ToPulsarDataSource",
    "ToPulsarSparkError",
    "register",
]

FORMAT = "to_pulsar"
DEFAULT_FLUSH_TIMEOUT_MS = 60_000
#: Client-side discard reason: a row that cannot be encoded (no topic, bad partition key, ...).
INVALID = "invalid"

log = logging.getLogger(__name__)

_INTEGER_TYPES = (ByteType, ShortType, IntegerType, LongType)
_EPOCH_UTC = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)
_EPOCH_NAIVE = datetime.datetime(1970, 1, 1)
_MS = datetime.timedelta(milliseconds=1)


class ToPulsarSparkError(ToPulsarError):
    """A write cannot start (bad schema or options) or a task could not deliver its rows."""


def register(spark: SparkSession) -> None:
    """Register the ``"to_pulsar"`` format with this Spark session."""
    spark.dataSource.register(ToPulsarDataSource)


# -- planning (driver) --------------------------------------------------------------------------


def _type_name(data_type: DataType) -> str:
    return str(data_type.simpleString())


@dataclass(frozen=True)
class _Plan:
    """What every task needs: options and where each column is. Pickled to the executors."""

    socket: str | None
    topic: str | None
    flush_timeout_s: float
    tolerate_discards: bool
    # Positions in the input schema (the rows' and Arrow batches' column order).
    value: int
    key: int | None = None
    partition_key: int | None = None
    topic_column: int | None = None
    timestamp: int | None = None
    timestamp_kind: str = "ms"  # "ms" (integer), "ts" (timestamp), "ntz" (timestamp_ntz)

    @classmethod
    def from_options(cls, options: Any, schema: StructType) -> _Plan:
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
        return cls(
            socket=options.get("socket") or None,
            topic=topic,
            flush_timeout_s=_positive_ms(options, "flushTimeoutMs", DEFAULT_FLUSH_TIMEOUT_MS)
            / 1000,
            tolerate_discards=_boolean(options, "tolerateDiscards", False),
            value=value,
            key=key,
            partition_key=partition_key,
            topic_column=topic_column,
            timestamp=timestamp,
            timestamp_kind=kind,
        )

    # -- rows to messages (executors) --------------------------------------------------------

    def messages(self, items: Iterable[Any]) -> Iterator[tuple[Any, Any, Any, Any, Any]]:
        """``(value, key, partition_key, topic, timestamp_ms)`` per row, from Arrow record
        batches (pyspark >= 4.1 stream writer, every batch writer) or Rows (4.0 streams)."""
        for item in items:
            if isinstance(item, tuple):  # a pyspark Row
                yield self._from_row(item)
            else:
                yield from self._from_batch(item)

    def _from_batch(self, batch: Any) -> Iterator[tuple[Any, Any, Any, Any, Any]]:
        rows = batch.num_rows
        nothing = [None] * rows

        def column(index: int | None) -> list[Any]:
            return nothing if index is None else batch.column(index).to_pylist()

        timestamps = nothing
        if self.timestamp is not None:
            raw = batch.column(self.timestamp)
            if self.timestamp_kind == "ms":
                timestamps = raw.to_pylist()
            else:  # microseconds since the epoch (UTC; wall clock for timestamp_ntz)
                import pyarrow

                timestamps = [
                    None if us is None else us // 1000
                    for us in raw.cast(pyarrow.int64()).to_pylist()
                ]
        return zip(
            column(self.value),
            column(self.key),
            column(self.partition_key),
            column(self.topic_column),
            timestamps,
            strict=True,
        )

    def _from_row(self, row: Sequence[Any]) -> tuple[Any, Any, Any, Any, Any]:
        timestamp = None if self.timestamp is None else row[self.timestamp]
        if isinstance(timestamp, datetime.datetime):
            if self.timestamp_kind == "ntz":
                timestamp = (timestamp - _EPOCH_NAIVE) // _MS
            else:  # pyspark hands TimestampType out as naive local time
                timestamp = (timestamp.astimezone() - _EPOCH_UTC) // _MS
        return (
            row[self.value],
            None if self.key is None else row[self.key],
            None if self.partition_key is None else row[self.partition_key],
            None if self.topic_column is None else row[self.topic_column],
            timestamp,
        )

    # -- one task ----------------------------------------------------------------------------

    def write(self, items: Iterable[Any]) -> ToPulsarCommitMessage:
        """Send a task's rows over one stream connection, flush, and check the counts."""
        host = _socket.gethostname()
        path = self.socket or resolve_stream_socket_path()
        where = f"on {host} ({path})"
        rows = invalid = 0
        first_invalid = ""
        sender: StreamSender | None = None
        try:
            for value, key, partition_key, topic, timestamp_ms in self.messages(items):
                rows += 1
                if sender is None:  # connect on the first row: empty tasks need no daemon
                    sender = self._connect(path)
                try:
                    if topic is None:
                        topic = self.topic
                        if topic is None:
                            raise InvalidMessageError("no topic (null 'topic' and no option)")
                    sender.send(
                        topic,
                        b"" if value is None else value,
                        key=key,
                        partition_key=partition_key,
                        timestamp_ms=timestamp_ms,
                    )
                except InvalidMessageError as exc:
                    invalid += 1
                    first_invalid = first_invalid or f"row {rows}: {exc}"
            result = FlushResult() if sender is None else self._flush(sender, rows, where)
        except SendTimeoutError as exc:
            raise ToPulsarSparkError(
                f"to_pulsar: the daemon {where} took no data for {self.flush_timeout_s:g} s "
                f"after {rows} rows (is it stuck?): {exc}"
            ) from exc
        except ToPulsarSparkError:
            raise
        except ToPulsarError as exc:
            raise ToPulsarSparkError(
                f"to_pulsar: task failed after {rows} rows {where}: {exc}"
            ) from exc
        finally:
            if sender is not None:
                sender.abort()
        if invalid:
            result = result + FlushResult(0, {INVALID: invalid})
        if not result.ok and not self.tolerate_discards:
            message = (
                f"to_pulsar: {result.discarded_total} of {rows} rows were not delivered "
                f"({result.describe_discards()}), {result.acked} acked, {where}"
            )
            if first_invalid:
                message += f"; first invalid {first_invalid}"
            raise ToPulsarSparkError(
                message + ". Set the option tolerateDiscards=true to commit anyway."
            )
        return ToPulsarCommitMessage(rows, result.acked, dict(result.discarded), host)

    def _connect(self, path: str) -> StreamSender:
        try:
            return StreamSender(path, timeout=self.flush_timeout_s)
        except DaemonUnavailableError as exc:
            raise ToPulsarSparkError(
                f"to_pulsar: task on {_socket.gethostname()}: {exc}. Each executor host needs "
                "a running pulsar-bruce daemon; set the option 'socket' (or "
                "TO_PULSAR_STREAM_SOCKET on the executors) if its stream socket is elsewhere."
            ) from exc

    def _flush(self, sender: StreamSender, rows: int, where: str) -> FlushResult:
        try:
            return sender.flush()
        except SendTimeoutError as exc:
            raise ToPulsarSparkError(
                f"to_pulsar: no confirmation from the daemon {where} within "
                f"{self.flush_timeout_s:g} s for {rows} rows (flushTimeoutMs)"
            ) from exc


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


# -- Spark's classes ------------------------------------------------------------------------------


@dataclass
class ToPulsarCommitMessage(WriterCommitMessage):
    """One task's outcome, sent to the driver: rows sent, acked, discarded (tolerated)."""

    rows: int
    acked: int
    discarded: dict[str, int] = field(default_factory=dict)
    host: str = ""


def _totals(messages: Iterable[WriterCommitMessage | None]) -> tuple[int, int, FlushResult]:
    """(tasks, rows, counts) over the tasks that committed."""
    tasks = rows = 0
    total = FlushResult()
    for message in messages:
        if isinstance(message, ToPulsarCommitMessage):
            tasks += 1
            rows += message.rows
            total = total + FlushResult(message.acked, message.discarded)
    return tasks, rows, total


def _log_commit(messages: Iterable[WriterCommitMessage | None], what: str) -> None:
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


def _log_abort(messages: Iterable[WriterCommitMessage | None], what: str) -> None:
    tasks, _, total = _totals(messages)
    log.warning(
        "to_pulsar: %s aborted; %d rows from %d tasks that succeeded are already in Pulsar",
        what,
        total.acked,
        tasks,
    )


class _BatchWriter(DataSourceArrowWriter):
    def __init__(self, plan: _Plan) -> None:
        self.plan = plan

    def write(self, iterator: Iterator[Any]) -> WriterCommitMessage:
        return self.plan.write(iterator)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        _log_commit(messages, "write")

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        _log_abort(messages, "write")


class _StreamWriter(_StreamWriterBase):
    def __init__(self, plan: _Plan) -> None:
        self.plan = plan

    def write(self, iterator: Iterator[Any]) -> WriterCommitMessage:
        return self.plan.write(iterator)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        _log_commit(messages, f"micro-batch {batchId}")

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        _log_abort(messages, f"micro-batch {batchId}")


class ToPulsarDataSource(DataSource):
    """The ``"to_pulsar"`` format (write only: batch and streaming)."""

    @classmethod
    def name(cls) -> str:
        return FORMAT

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        if overwrite:
            raise ToPulsarSparkError(
                "to_pulsar: a Pulsar topic can only be appended to: use .mode('append')"
            )
        return _BatchWriter(_Plan.from_options(self.options, schema))

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        return _StreamWriter(_Plan.from_options(self.options, schema))
