"""Stream records for a whole batch of rows at once, encoded column by column.

Row by row, every message costs Python a call, a tuple and a trip through the
sender. When a batch's rows are alike (one topic, one kind of routing, no
properties) the loops here run in C instead: ``map`` over one ``struct.pack``
and a single ``b"".join`` for the batch. Any other batch goes row by row through
:func:`~to_pulsar.core.encode_message`, the reference: both ways give the same
bytes, and the same reasons for the rows that cannot be encoded. Standard
library only (Spark executors import it with nothing installed).
"""

from __future__ import annotations

import functools
import itertools
import operator
import struct
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from .core import encode_message
from .encoding import _PK_HEAD_A, MAX_PARTITION_KEY, MIN_PARTITION_KEY, plain_heads
from .errors import InvalidMessageError

__all__ = ["NO_TOPIC", "Columns", "Encoded", "encode_columns"]

#: Why a row with a null ``topic`` and no default topic cannot be sent.
NO_TOPIC = "no topic (null 'topic' and no option)"

_repeat = itertools.repeat
_add = operator.add
_join = b"".join
_pack_value_size = struct.Struct(">i").pack
# str payloads as the per-message encoders send them: UTF-8, escaped surrogates kept.
_utf8 = operator.methodcaller("encode", "utf-8", "surrogateescape")
_NONE = type(None)


@dataclass(frozen=True)
class Columns:
    """A batch of rows, column by column; an absent column is None (every row null)."""

    values: Sequence[Any]
    keys: Sequence[Any] | None = None
    partition_keys: Sequence[Any] | None = None
    topics: Sequence[Any] | None = None
    #: Milliseconds since the epoch; a null one means now.
    timestamps: Sequence[Any] | None = None
    #: A mapping or ``(name, value)`` pairs per row; null or empty: no properties.
    properties: Sequence[Any] | None = None
    #: Delayed delivery, milliseconds since the epoch; null: not delayed.
    deliver_at: Sequence[Any] | None = None

    def __len__(self) -> int:
        return len(self.values)


@dataclass(frozen=True)
class Encoded:
    """A batch's records back to back, how many, and the rows left out as (index, why)."""

    records: bytes
    count: int
    invalid: list[tuple[int, str]] = field(default_factory=list)


def encode_columns(columns: Columns, topic: str | None, now_ms: int) -> Encoded:
    """The records of every row, in order. ``topic`` is for rows whose own is null,
    ``now_ms`` for rows with no timestamp; a null value is sent empty."""
    try:
        return _alike(columns, topic, now_ms)
    except (_Unlike, InvalidMessageError, struct.error, UnicodeEncodeError, TypeError):
        # Not alike, or something unusual in them (a bad topic or timestamp, an
        # unhashable topic, unencodable text): row by row says which rows and why.
        return _row_by_row(columns, topic, now_ms)


class _Unlike(Exception):
    """The rows of a batch differ in topic, routing or payload types: one by one."""


def _row_by_row(columns: Columns, topic: str | None, now_ms: int) -> Encoded:
    nothing = [None] * len(columns)
    records: list[bytes] = []
    invalid: list[tuple[int, str]] = []
    rows = zip(
        columns.values,
        nothing if columns.keys is None else columns.keys,
        nothing if columns.partition_keys is None else columns.partition_keys,
        nothing if columns.topics is None else columns.topics,
        nothing if columns.timestamps is None else columns.timestamps,
        nothing if columns.properties is None else columns.properties,
        nothing if columns.deliver_at is None else columns.deliver_at,
        strict=True,
    )
    for index, (value, key, partition_key, row_topic, timestamp, props, at) in enumerate(rows):
        try:
            if row_topic is None:
                row_topic = topic
                if row_topic is None:
                    raise InvalidMessageError(NO_TOPIC)
            record = encode_message(
                row_topic,
                b"" if value is None else value,
                key,
                partition_key,
                now_ms if timestamp is None else timestamp,
                dict(props) if props else None,
                at,
            )
        except InvalidMessageError as exc:
            invalid.append((index, str(exc)))
        else:
            records.append(record)
    return Encoded(_join(records), len(records), invalid)


def _alike(columns: Columns, topic: str | None, now_ms: int) -> Encoded:
    """Every row in C loops: one topic, all routed or none, no properties (else _Unlike)."""
    rows = len(columns)
    if not rows:
        return Encoded(b"", 0)
    if columns.properties is not None and any(columns.properties):
        raise _Unlike
    if columns.deliver_at is not None and any(at is not None for at in columns.deliver_at):
        raise _Unlike  # delayed rows: Message records, row by row
    any_pack, any_size, any_head, pk_pack, pk_size, pk_tail = plain_heads[
        _one_topic(columns.topics, topic)
    ]
    topic_size = len(pk_tail) - 2
    values = _payloads(columns.values)
    keys = _present(columns.keys)
    keys = None if keys is None else _payloads(keys)
    routing = _present(columns.partition_keys)
    routing = None if routing is None else _routing(routing)
    stamps: Iterable[Any] = _repeat(now_ms)
    if (given := _present(columns.timestamps)) is not None:
        stamps = [now_ms if ms is None else ms for ms in given] if None in given else given
    value_sizes = list(map(len, values))
    heads_from: list[Iterable[Any]] = [_repeat(any_head)]
    if routing is not None:  # PartitionKey, or the daemon picks (AnyPartition)
        heads_from = [_repeat(_PK_HEAD_A), routing, _repeat(pk_tail)]
    if keys is None:  # Size, head, Timestamp, KeySize 0, ValueSize; the value
        pack, fixed = (any_pack, any_size) if routing is None else (pk_pack, pk_size)
        sizes = map(_add, value_sizes, _repeat(fixed))
        heads = map(pack, sizes, *heads_from, stamps, _repeat(0), value_sizes)
        return Encoded(_join(_interleave(rows, heads, values)), rows)
    # Size, head, Timestamp, KeySize; the key; ValueSize; the value
    layout = _keyed_layout(topic_size, routing is not None)
    key_sizes = list(map(len, keys))
    sizes = map(_add, map(_add, value_sizes, key_sizes), _repeat(layout.size + 4))
    heads = map(layout.pack, sizes, *heads_from, stamps, key_sizes)
    parts = _interleave(rows, heads, keys, map(_pack_value_size, value_sizes), values)
    return Encoded(_join(parts), rows)


def _present(column: Sequence[Any] | None) -> Sequence[Any] | None:
    """The column, or None if it is absent or every row's is null."""
    return None if column is None or column.count(None) == len(column) else column


def _one_topic(topics: Sequence[Any] | None, topic: str | None) -> str | bytes:
    """The topic of every row (a null one: ``topic``); _Unlike if they differ or lack one."""
    distinct = {topic} if topics is None else set(topics)
    if None in distinct and topics is not None:
        distinct.discard(None)
        distinct.add(topic)
    only = distinct.pop() if len(distinct) == 1 else None
    if not isinstance(only, str | bytes):
        raise _Unlike
    return only


def _payloads(column: Sequence[Any]) -> list[bytes]:
    """The column as bytes (str as UTF-8, null as empty); _Unlike unless all str or all bytes."""
    kinds = set(map(type, column))
    if _NONE in kinds:
        kinds.discard(_NONE)
        empty = "" if kinds == {str} else b""
        column = [empty if item is None else item for item in column]
    if kinds <= {bytes}:
        return list(column)
    if kinds == {str}:
        return list(map(_utf8, column))
    raise _Unlike


def _routing(partition_keys: Sequence[Any]) -> list[int]:
    """Partition keys as their unsigned 32 bits; _Unlike if one is null or out of range."""
    if set(map(type, partition_keys)) != {int}:
        raise _Unlike
    if min(partition_keys) < MIN_PARTITION_KEY or max(partition_keys) > MAX_PARTITION_KEY:
        raise _Unlike
    return list(map(operator.and_, partition_keys, _repeat(0xFFFF_FFFF)))


def _interleave(rows: int, *columns: Iterable[bytes]) -> list[bytes]:
    """Row 0 of every column, then row 1 of every column, ...: the parts to join."""
    parts: list[bytes] = [b""] * (rows * len(columns))
    for offset, column in enumerate(columns):
        parts[offset :: len(columns)] = column
    return parts


@functools.lru_cache(maxsize=64)
def _keyed_layout(topic_size: int, routed: bool) -> struct.Struct:
    """Size, head, Timestamp and KeySize of a record with a key (Key and ValueSize follow)."""
    if routed:  # Size ApiKey ApiVersion Flags PartitionKey TopicSize Topic
        return struct.Struct(f">i6sI{2 + topic_size}sqi")
    return struct.Struct(f">i{8 + topic_size}sqi")  # Size ApiKey ApiVersion Flags TopicSize Topic
