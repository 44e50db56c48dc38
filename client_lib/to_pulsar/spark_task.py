"""What one Spark task does: rows (or Arrow batches) -> stream records -> flush -> counts.

This is the executor side of :mod:`to_pulsar.spark`. It imports neither pyspark
nor pyarrow (Arrow batches arrive already built), so it runs in whatever Python
Spark starts on an executor, once :func:`to_pulsar.spark.register` has shipped
the package there.
"""

from __future__ import annotations

import datetime
import socket as _socket
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from .errors import (
    DaemonUnavailableError,
    InvalidMessageError,
    SendTimeoutError,
    ToPulsarError,
)
from .paths import resolve_stream_socket_path
from .protocol import FlushResult
from .stream import StreamSender

__all__ = [
    "INVALID",
    "TaskPlan",
    "TaskResult",
    "ToPulsarSparkError",
    "connect_stream_or_beside",
    "stream_socket_beside",
]

#: Client-side discard reason: a row that cannot be encoded (no topic, bad partition key, ...).
INVALID = "invalid"

_EPOCH_UTC = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)
_EPOCH_NAIVE = datetime.datetime(1970, 1, 1)
_MS = datetime.timedelta(milliseconds=1)

Message = tuple[Any, Any, Any, Any, Any, Any]


class ToPulsarSparkError(ToPulsarError):
    """A write cannot start (bad schema or options) or a task could not deliver its rows."""


# -- the daemon's stream socket ------------------------------------------------------------------


def stream_socket_beside(path: str) -> str:
    """The daemon's ``--stream-socket auto`` rule: ``bruce.sock`` -> ``bruce.stream.sock``."""
    return f"{path.removesuffix('.sock')}.stream.sock"


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

    def messages(self, items: Iterable[Any]) -> Iterator[Message]:
        """``(value, key, partition_key, topic, timestamp_ms, properties)`` per row, from
        Arrow record batches (the data source writers) or Rows (``write()``, some streams)."""
        for item in items:
            if isinstance(item, tuple):  # a pyspark Row
                yield self._from_row(item)
            else:
                yield from self._from_batch(item)

    def _from_batch(self, batch: Any) -> Iterator[Message]:
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
                timestamps = [
                    None if us is None else us // 1000 for us in raw.cast("int64").to_pylist()
                ]
        return zip(
            column(self.value),
            column(self.key),
            column(self.partition_key),
            column(self.topic_column),
            timestamps,
            column(self.properties),  # Arrow gives a map as [(key, value), ...]
            strict=True,
        )

    def _from_row(self, row: Sequence[Any]) -> Message:
        timestamp = None if self.timestamp is None else row[self.timestamp]
        if isinstance(timestamp, datetime.datetime):
            if self.timestamp_kind == "ntz":
                timestamp = (timestamp - _EPOCH_NAIVE) // _MS
            else:  # pyspark hands TimestampType out as naive local time
                timestamp = (timestamp.astimezone() - _EPOCH_UTC) // _MS
        elif timestamp is not None and self.timestamp_kind == "us":
            timestamp //= 1000
        return (
            row[self.value],
            None if self.key is None else row[self.key],
            None if self.partition_key is None else row[self.partition_key],
            None if self.topic_column is None else row[self.topic_column],
            timestamp,
            None if self.properties is None else row[self.properties],
        )

    def write(self, items: Iterable[Any]) -> TaskResult:
        """Send a task's rows over one stream connection, flush, and check the counts."""
        host = _socket.gethostname()
        path = self.socket or resolve_stream_socket_path()
        where = f"on {host} ({path})"
        rows = invalid = 0
        first_invalid = ""
        sender: StreamSender | None = None
        try:
            for value, key, partition_key, topic, timestamp_ms, props in self.messages(items):
                rows += 1
                if sender is None:  # connect on the first row: empty tasks need no daemon
                    sender = self._connect(path)
                    where = f"on {host} ({sender.socket_path})"
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
                        properties=dict(props) if props else None,
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
        return TaskResult(rows, result.acked, dict(result.discarded), host)

    def write_partition(self, rows: Iterable[Any]) -> Iterator[TaskResult]:
        """``rdd.mapPartitions`` form of :meth:`write`: one result per partition."""
        yield self.write(rows)

    def _connect(self, path: str) -> StreamSender:
        try:
            return connect_stream_or_beside(path, self.flush_timeout_s)
        except DaemonUnavailableError as exc:
            raise ToPulsarSparkError(
                f"to_pulsar: task on {_socket.gethostname()}: {exc}. Each executor host needs "
                "a running pulsar-bruce daemon; set the option 'socket' (or "
                "TO_PULSAR_STREAM_SOCKET on the executors) if its socket is elsewhere."
            ) from exc

    def _flush(self, sender: StreamSender, rows: int, where: str) -> FlushResult:
        try:
            return sender.flush()
        except SendTimeoutError as exc:
            raise ToPulsarSparkError(
                f"to_pulsar: no confirmation from the daemon {where} within "
                f"{self.flush_timeout_s:g} s for {rows} rows (flushTimeoutMs)"
            ) from exc
