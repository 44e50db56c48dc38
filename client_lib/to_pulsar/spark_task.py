"""What one Spark task does: rows (or Arrow batches) -> stream records -> flush -> counts.

This is the executor side of :mod:`to_pulsar.spark`. It imports neither pyspark
nor pyarrow (Arrow batches arrive already built), so it runs in whatever Python
Spark starts on an executor, once :func:`to_pulsar.spark.register` has shipped
the package there. Each batch's records are encoded together and handed to the
sender as one chunk: an Arrow batch's straight from its buffers
(:mod:`to_pulsar.spark_arrow`, imported only once one comes), Rows' column by
column (:mod:`to_pulsar.bulk`); not one call, tuple and sender lock per row.
"""

from __future__ import annotations

import datetime
import gc
import importlib.util
import itertools
import operator
import os
import socket as _socket
import struct
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .bulk import Columns, Encoded, encode_columns
from .errors import DaemonUnavailableError, SendTimeoutError, ToPulsarError
from .paths import resolve_stream_socket_path, stream_socket_beside
from .protocol import FlushResult
from .stream import StreamSender

if TYPE_CHECKING:
    from .spark_exactly_once import ExactlyOnce

__all__ = [
    "INVALID",
    "RESULT_SCHEMA",
    "TaskPlan",
    "TaskResult",
    "ToPulsarSparkError",
    "check_socket",
    "connect_stream_or_beside",
    "freeze_worker_once",
    "python_has_arrow",
    "stream_socket_beside",
]

#: Client-side discard reason: a row that cannot be encoded (no topic, bad partition key, ...).
INVALID = "invalid"

_EPOCH_UTC = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)
_EPOCH_NAIVE = datetime.datetime(1970, 1, 1)
_MS = datetime.timedelta(milliseconds=1)
_time_ns = time.time_ns

#: Rows that do not come in Arrow batches are encoded this many at a time.
ROWS_PER_BATCH = 10_000


class ToPulsarSparkError(ToPulsarError):
    """A write cannot start (bad schema or options) or a task could not deliver its rows."""


_frozen = False


def freeze_worker_once() -> None:
    """In a reused Spark Python worker, at its first to_pulsar task: leave what is alive
    by then (pyspark, pyarrow, pandas: some 75,000 objects) out of the cyclic GC's passes
    (``gc.freeze``). Such a worker runs ``gc.collect()`` after every task, and traversing
    them cost about 20 ms a task, 0.06-0.09 µs a row at 250,000 rows a task: as much as
    Spark's Arrow transfer itself. Elsewhere (no ``SPARK_REUSE_WORKER``) nothing is done."""
    global _frozen
    if not _frozen and os.environ.get("SPARK_REUSE_WORKER"):
        _frozen = True
        gc.freeze()


def python_has_arrow() -> bool:
    """Run on an executor: can its Python take Arrow batches (``mapInArrow``, the format)?"""
    return importlib.util.find_spec("pyarrow") is not None


#: What :meth:`TaskPlan.write_arrow` returns, as Spark's DDL.
RESULT_SCHEMA = "rows BIGINT, acked BIGINT, discarded MAP<STRING, BIGINT>, host STRING"


def _result_schema(pa: Any) -> Any:
    return pa.schema(
        [
            ("rows", pa.int64()),
            ("acked", pa.int64()),
            ("discarded", pa.map_(pa.string(), pa.int64())),
            ("host", pa.string()),
        ]
    )


def _result_batch(pa: Any, result: TaskResult) -> Any:
    """``result`` as one row of ``RESULT_SCHEMA``, built from buffers: pyarrow imports pandas
    (0.5 s in a fresh Spark worker) at its first conversion from Python values, and nothing
    else a ``mapInArrow`` task of ours needs it."""

    def buffer(fmt: str, values: Sequence[int]) -> Any:
        return pa.py_buffer(struct.pack(f"={len(values)}{fmt}", *values))

    def int64s(values: Sequence[int]) -> Any:
        return pa.Array.from_buffers(pa.int64(), len(values), [None, buffer("q", values)])

    def strings(texts: Sequence[str]) -> Any:
        data = [text.encode("utf-8", "surrogateescape") for text in texts]
        offsets = list(itertools.accumulate(map(len, data), initial=0))
        buffers = [None, buffer("i", offsets), pa.py_buffer(b"".join(data))]
        return pa.Array.from_buffers(pa.string(), len(texts), buffers)

    reasons = list(result.discarded)
    offsets = pa.Array.from_buffers(pa.int32(), 2, [None, buffer("i", [0, len(reasons)])])
    counts = [result.discarded[reason] for reason in reasons]
    discarded = pa.MapArray.from_arrays(offsets, strings(reasons), int64s(counts))
    columns = [int64s([result.rows]), int64s([result.acked]), discarded, strings([result.host])]
    return pa.RecordBatch.from_arrays(columns, schema=_result_schema(pa))


# -- the daemon's stream socket ------------------------------------------------------------------


def _is_datagram_socket(path: str) -> bool:
    """True if a datagram socket is bound at ``path`` (connecting one sends nothing)."""
    with _socket.socket(_socket.AF_UNIX, _socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(path)
        except OSError:
            return False
    return True


def connect_stream_or_beside(path: str, timeout: float | None) -> StreamSender:
    """Connect to the stream socket at ``path``; if ``path`` is the daemon's *datagram*
    socket (the path users know), to the stream socket beside it instead."""
    try:
        return StreamSender(path, timeout=timeout)
    except DaemonUnavailableError:
        if not _is_datagram_socket(path):
            raise
    beside = stream_socket_beside(path)
    try:
        return StreamSender(beside, timeout=timeout)
    except DaemonUnavailableError as exc:
        raise DaemonUnavailableError(
            f"{path} is the daemon's datagram socket, and its stream socket is not beside it "
            f"({exc}); name the stream socket if the daemon's --stream-socket is not auto"
        ) from exc


def _connect_task(path: str, timeout: float | None, who: str) -> StreamSender:
    try:
        return connect_stream_or_beside(path, timeout)
    except DaemonUnavailableError as exc:
        raise ToPulsarSparkError(
            f"to_pulsar: {who} on {_socket.gethostname()}: {exc}. Each executor host needs "
            "a running pulsar-bruce daemon; set the option 'socket' (or "
            "TO_PULSAR_STREAM_SOCKET on the executors) if its socket is elsewhere."
        ) from exc


def check_socket(socket: str | None = None, timeout: float = 10.0) -> str:
    """Connect to the daemon as a task on this host would (``socket``, else
    ``$TO_PULSAR_STREAM_SOCKET``, else the default path), and hang up: where the tasks run
    on this host (a local master), a wrong socket fails here, in a second, not in the first
    task after Spark planned the job. Returns the stream socket's path; raises
    :class:`ToPulsarSparkError` with the task's message."""
    sender = _connect_task(socket or resolve_stream_socket_path(), timeout, "checking the daemon")
    sender.abort()
    return sender.socket_path


# -- one task ------------------------------------------------------------------------------------


@dataclass
class TaskResult:
    """One task's outcome, for the driver: rows sent, acked, discarded (tolerated), where."""

    rows: int
    acked: int
    discarded: dict[str, int] = field(default_factory=dict)
    host: str = ""


@dataclass(frozen=True)
class TaskPlan:
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
    #: A map<string,string> column: the message's Pulsar properties.
    properties: int | None = None
    timestamp: int | None = None
    # "ms" (integer milliseconds), "us" (integer microseconds), "ts" (timestamp), "ntz"
    timestamp_kind: str = "ms"
    #: Delayed delivery (``deliver_at``, in ``deliver_at_kind`` as ``timestamp``).
    deliver_at: int | None = None
    deliver_at_kind: str = "ms"
    #: exactlyOnce: how the task names its producer (:mod:`to_pulsar.spark_exactly_once`).
    exactly_once: ExactlyOnce | None = None

    def batches(self, items: Iterable[Any]) -> Iterator[Any]:
        """The task's rows in batches: each Arrow record batch as it comes (the data source
        writers, ``mapInArrow``), and runs of up to ``ROWS_PER_BATCH`` Rows as
        :class:`~to_pulsar.bulk.Columns` (``write()`` without pyarrow, some streams)."""
        rows: list[Sequence[Any]] = []
        for item in items:
            if isinstance(item, tuple):  # a pyspark Row
                rows.append(item)
                if len(rows) == ROWS_PER_BATCH:
                    yield self._from_rows(rows)
                    rows = []
                continue
            if rows:  # rows before a batch go first
                yield self._from_rows(rows)
                rows = []
            yield item
        if rows:
            yield self._from_rows(rows)

    def encode(self, batch: Any, now_ms: int) -> Encoded:
        """A batch's records. An Arrow batch's come straight from its buffers
        (:mod:`to_pulsar.spark_arrow`) unless it is unusual, or numpy is missing: then,
        as Rows', row by row from Python values (:mod:`to_pulsar.bulk`), the same bytes."""
        if isinstance(batch, Columns):
            return encode_columns(batch, self.topic, now_ms)
        try:
            from .spark_arrow import encode_batch
        except ImportError:
            encoded = None
        else:
            encoded = encode_batch(batch, self, now_ms)
        if encoded is None:
            encoded = encode_columns(self._from_batch(batch), self.topic, now_ms)
        return encoded

    def _from_batch(self, batch: Any) -> Columns:
        def column(index: int | None) -> list[Any] | None:
            return None if index is None else batch.column(index).to_pylist()

        def millis(index: int | None, kind: str) -> list[Any] | None:
            if index is None:
                return None
            raw = batch.column(index)
            if kind == "ms":
                return list(raw.to_pylist())
            # microseconds since the epoch (UTC; wall clock for timestamp_ntz)
            return [None if us is None else us // 1000 for us in raw.cast("int64").to_pylist()]

        return self._columns(
            column,
            millis(self.timestamp, self.timestamp_kind),
            millis(self.deliver_at, self.deliver_at_kind),
        )

    def _from_rows(self, rows: list[Sequence[Any]]) -> Columns:
        def column(index: int | None) -> list[Any] | None:
            return None if index is None else list(map(operator.itemgetter(index), rows))

        def millis(index: int | None, kind: str) -> list[Any] | None:
            values = column(index)
            if values is None or kind == "ms":
                return values
            return [_row_millis(value, kind) for value in values]

        return self._columns(
            column,
            millis(self.timestamp, self.timestamp_kind),
            millis(self.deliver_at, self.deliver_at_kind),
        )

    def _columns(
        self, column: Callable[[int | None], Any], timestamps: Any, deliver_at: Any
    ) -> Columns:
        return Columns(
            column(self.value),
            column(self.key),
            column(self.partition_key),
            column(self.topic_column),
            timestamps,
            column(self.properties),  # Arrow gives a map as [(key, value), ...]
            deliver_at,
        )

    def write(self, items: Iterable[Any]) -> TaskResult:
        """Send a task's rows over one stream connection, flush, and check the counts.

        Each batch goes to the sender as one chunk of records; what the task reports
        (and so whether Spark commits it) comes only from the flush's counts."""
        host = _socket.gethostname()
        path = self.socket or resolve_stream_socket_path()
        where = f"on {host} ({path})"
        rows = invalid = 0
        first_invalid = ""
        sender: StreamSender | None = None
        try:
            for batch in self.batches(items):
                count = len(batch) if isinstance(batch, Columns) else batch.num_rows
                if not count:
                    continue
                if sender is None:  # connect on the first row: empty tasks need no daemon
                    sender = self._connect(path)
                    where = f"on {host} ({sender.socket_path})"
                    if self.exactly_once is not None:  # first on the connection
                        sender.publish_as(*self.exactly_once.producer())
                encoded = self.encode(batch, _time_ns() // 1_000_000)
                if encoded.invalid and not first_invalid:
                    index, why = encoded.invalid[0]
                    first_invalid = f"row {rows + index + 1}: {why}"
                invalid += len(encoded.invalid)
                rows += count
                sender.send_encoded(encoded.records, encoded.count)
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
        return TaskResult(rows, result.acked, dict(result.discarded), host)

    def write_partition(self, rows: Iterable[Any]) -> Iterator[TaskResult]:
        """``rdd.mapPartitions`` form of :meth:`write`: one result per partition."""
        freeze_worker_once()
        yield self.write(rows)

    def write_arrow(self, batches: Iterable[Any]) -> Iterator[Any]:
        """``mapInArrow`` form of :meth:`write` (``RESULT_SCHEMA``): one row per partition."""
        import pyarrow as pa

        freeze_worker_once()
        yield _result_batch(pa, self.write(batches))

    def _connect(self, path: str) -> StreamSender:
        return _connect_task(path, self.flush_timeout_s, "task")

    def _flush(self, sender: StreamSender, rows: int, where: str) -> FlushResult:
        try:
            return sender.flush()
        except SendTimeoutError as exc:
            raise ToPulsarSparkError(
                f"to_pulsar: no confirmation from the daemon {where} within "
                f"{self.flush_timeout_s:g} s for {rows} rows (flushTimeoutMs)"
            ) from exc


def _row_millis(timestamp: Any, kind: str) -> Any:
    """A Row's timestamp (``kind`` "ts", "ntz" or "us") in milliseconds since the epoch."""
    if isinstance(timestamp, datetime.datetime):
        if kind == "ntz":
            return (timestamp - _EPOCH_NAIVE) // _MS
        # pyspark hands TimestampType out as naive local time
        return (timestamp.astimezone() - _EPOCH_UTC) // _MS
    if timestamp is not None and kind == "us":
        return timestamp // 1000
    return timestamp
