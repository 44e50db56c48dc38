"""Stream records straight from a Spark task's Arrow batches: no Python object per row.

Arrow already holds string and binary columns as the bytes the records carry, so
turning each value into a Python str and back into bytes (``to_pylist()`` and
:mod:`to_pulsar.bulk`) is wasted work. Here numpy lays out every row's fixed
fields (sizes, ApiKey, partition key, topic, timestamp) side by side, and one
pyarrow kernel (``binary_join_element_wise``) joins them with the keys,
properties and values, copying those from Arrow's own buffers.

The bytes are those of the row path, ``encode_columns(TaskPlan._from_batch(batch))``
(tests compare the two); a batch the row path would treat as unusual (a row it
refuses, a null or repeated property name or value, a type Spark does not send)
is left to it: :func:`encode_batch` returns None. Needs pyarrow and numpy, which
only the format's executors (and ``mapInArrow``) have, so nothing imports this
module before a batch has come.
"""

from __future__ import annotations

import struct
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .bulk import Encoded
from .encoding import (
    API_KEY_ANY_PARTITION,
    API_KEY_MESSAGE,
    API_KEY_PARTITION_KEY,
    MAX_PARTITION_KEY,
    MIN_PARTITION_KEY,
)
from .errors import InvalidMessageError
from .topics import check_topic

if TYPE_CHECKING:
    from .spark_task import TaskPlan

__all__ = ["encode_batch"]

_INT32_MAX = 0x7FFF_FFFF
_INT16_MAX = 0x7FFF
#: Past this many bytes a batch's records need 64-bit offsets (large_binary).
LARGE_BATCH = _INT32_MAX
# Size ApiKey ApiVersion Flags | Timestamp KeySize | ValueSize: in every record.
_FIXED = 10 + 12 + 4
_BYTES = {
    pa.string(): pa.binary(),
    pa.binary(): pa.binary(),
    pa.large_string(): pa.large_binary(),
    pa.large_binary(): pa.large_binary(),
}


class _Unusual(Exception):
    """The row path encodes this batch (it refuses a row, or the batch is not Spark's)."""


def encode_batch(batch: Any, plan: TaskPlan, now_ms: int) -> Encoded | None:
    """Every row's record, in order, as the row path encodes them; None if it must."""
    if not batch.num_rows:
        return Encoded(b"", 0)
    try:
        return _Batch(batch, plan, now_ms).encode()
    except (_Unusual, InvalidMessageError, struct.error, pa.ArrowException):
        return None


class _Batch:
    """One record batch's columns as numpy sizes and Arrow bytes, checked as the row path
    checks them."""

    def __init__(self, batch: Any, plan: TaskPlan, now_ms: int) -> None:
        self.rows = rows = batch.num_rows
        if plan.deliver_at is not None and batch.column(plan.deliver_at).null_count < rows:
            raise _Unusual  # delayed rows are Message records: the row path (rare, unbatched)
        self.value = _bytes(batch.column(plan.value))
        self.key = None if plan.key is None else _bytes(batch.column(plan.key))
        self.routed = np.zeros(rows, np.bool_)  # PartitionKey set
        self.partition_keys: Any = 0
        if plan.partition_key is not None:
            self._routing(batch.column(plan.partition_key))
        self.topic_sizes: Any = 0
        self.topic_bytes = b""  # one topic: TopicSize Topic
        self.topics: Any = None  # or TopicSize Topic per row
        self._topics(None if plan.topic_column is None else batch.column(plan.topic_column),
                     plan.topic)  # fmt: skip
        self.stamps: Any = now_ms
        if plan.timestamp is not None:
            self._stamps(batch.column(plan.timestamp), plan.timestamp_kind, now_ms)
        self.message = np.zeros(rows, np.bool_)  # with properties: the Message record
        self.property_sizes: Any = 0
        self.properties: Any = None
        if plan.properties is not None:
            self._properties(batch.column(plan.properties))

    # -- the columns ---------------------------------------------------------------------------

    def _routing(self, column: Any) -> None:
        if not pa.types.is_integer(column.type):
            raise _Unusual
        if column.null_count == len(column):
            return
        extremes = pc.min_max(column)
        if (
            extremes["min"].as_py() < MIN_PARTITION_KEY
            or extremes["max"].as_py() > MAX_PARTITION_KEY
        ):
            raise _Unusual  # the row path names the rows
        self.routed = _valid(column)
        keys = _int64s(column.cast(pa.int64()))
        self.partition_keys = (keys & 0xFFFF_FFFF).astype(">u4")

    def _topics(self, column: Any, default: str | None) -> None:
        if column is not None and column.null_count < len(column):
            if column.type not in (pa.string(), pa.large_string()):
                raise _Unusual
            if column.null_count:
                if default is None:
                    raise _Unusual  # rows without a topic: the row path names them
                column = column.fill_null(_binary_array([default.encode()], column.type)[0])
            encoded = column.dictionary_encode()
            names = encoded.dictionary.to_pylist()
            if len(names) > 1:
                heads = [_topic_head(name) for name in names]
                indices = _numpy(encoded.indices)
                self.topic_sizes = np.array(list(map(len, heads)), np.int64)[indices]
                self.topics = _binary_array(heads, pa.binary()).take(encoded.indices)
                return
            default = names[0]
        if default is None:
            raise _Unusual
        self.topic_bytes = _topic_head(default)
        self.topic_sizes = len(self.topic_bytes)

    def _stamps(self, column: Any, kind: str, now_ms: int) -> None:
        if not (pa.types.is_integer(column.type) or pa.types.is_timestamp(column.type)):
            raise _Unusual
        if kind == "ms" and not pa.types.is_integer(column.type):
            raise _Unusual
        if column.null_count == len(column):
            return
        stamps = _int64s(column.cast(pa.int64()))
        if kind != "ms":  # microseconds since the epoch, floored as Python's // floors
            stamps = stamps // 1000
        if column.null_count:
            stamps = np.where(_valid(column), stamps, now_ms)
        self.stamps = stamps

    def _properties(self, column: Any) -> None:
        """A map<string,string> column: rows with pairs become Message records, whose
        PropertyCount and pairs are joined here from the map's own key and item buffers."""
        if not pa.types.is_map(column.type):
            raise _Unusual
        offsets = _numpy(column.offsets).astype(np.int64)
        counts = np.diff(offsets)
        if column.null_count:
            counts = np.where(_valid(column), counts, 0)
            if int(counts.sum()) != int(offsets[-1] - offsets[0]):
                raise _Unusual  # a null map that spans pairs: not what Spark sends
        self.message = counts > 0
        if not self.message.any():
            return
        start, pairs = int(offsets[0]), int(offsets[-1] - offsets[0])
        names = _bytes(column.keys.slice(start, pairs))
        texts = column.items.slice(start, pairs)
        if texts.null_count or int(counts.max()) > _INT16_MAX:
            raise _Unusual  # a null value, or too many: the row path says which row
        texts = _bytes(texts)
        name_sizes, text_sizes = _sizes(names), _sizes(texts)
        if int(name_sizes.max()) > _INT16_MAX:
            raise _Unusual
        bounds = offsets - start  # each row's pairs, as indices into the flat pairs
        if int(counts.max()) > 1:
            _no_repeated_names(names, counts[self.message], bounds[:-1][self.message])
        pair_sizes = 6 + name_sizes + text_sizes
        ends = np.concatenate(([0], np.cumsum(pair_sizes)))
        self.property_sizes = ends[bounds[1:]] - ends[bounds[:-1]] + 2 * self.message
        first = np.zeros(pairs, np.bool_)  # PropertyCount goes before a row's first pair
        first[bounds[:-1][self.message]] = True
        count = np.zeros(pairs, ">i2")
        count[first] = counts[self.message]
        self.properties = (names, texts, name_sizes, text_sizes, first, count, bounds)

    # -- the records ---------------------------------------------------------------------------

    def encode(self) -> Encoded:
        rows = self.rows
        value_sizes = _sizes(self.value)
        key_sizes = 0 if self.key is None else _sizes(self.key)
        with_pk = self.routed | self.message  # the PartitionKey field is there
        sizes = _FIXED + 4 * with_pk + self.topic_sizes + key_sizes + self.property_sizes
        sizes = sizes + value_sizes
        if int(sizes.max()) > _INT32_MAX:
            raise _Unusual  # the row path says which row is too large
        total = int(sizes.sum())
        parts = _Parts(rows, total > LARGE_BATCH)
        parts.fixed(">i4", sizes)
        api_key = np.where(self.routed, API_KEY_PARTITION_KEY, API_KEY_ANY_PARTITION)
        if self.message.any():
            parts.fixed(">i2", np.where(self.message, API_KEY_MESSAGE, api_key))
            parts.fixed(">i2", 0)  # ApiVersion
            parts.fixed(">i2", self.message & self.routed)  # Flags: the PartitionKey is set
        else:
            parts.fixed(">i2", api_key)
            parts.fixed(">i4", 0)  # ApiVersion, Flags
        if with_pk.all():
            parts.fixed(">u4", self.partition_keys)
        elif with_pk.any():
            keys = np.broadcast_to(np.asarray(self.partition_keys, ">u4"), (rows,))
            parts.column(parts.fixed_width(np.ascontiguousarray(keys), 4, with_pk))
        if self.topics is None:
            parts.fixed(f"V{len(self.topic_bytes)}", np.void(self.topic_bytes))
        else:
            parts.column(self.topics)
        parts.fixed(">i8", self.stamps)
        parts.fixed(">i4", key_sizes)
        if self.key is not None:
            parts.column(self.key)
        if self.properties is not None:
            parts.column(self._property_blocks(parts))
        parts.fixed(">i4", value_sizes)
        parts.column(self.value)
        joined = parts.join()
        offsets = parts.offsets(joined)
        if len(offsets) != rows + 1 or offsets[0] != 0 or offsets[-1] != total:  # a bug here
            raise _Unusual
        return Encoded(joined.buffers()[2][:total].to_pybytes(), rows)

    def _property_blocks(self, parts: _Parts) -> Any:
        """Each row's PropertyCount and (NameSize Name ValueSize Value) pairs, empty for a
        row without: one join over all pairs, cut at the rows' bounds."""
        names, texts, name_sizes, text_sizes, first, count, bounds = self.properties
        pairs = _Parts(len(names), parts.large)
        pairs.column(pairs.fixed_width(count, 2, first))
        pairs.fixed(">i2", name_sizes)
        pairs.column(names)
        pairs.fixed(">i4", text_sizes)
        pairs.column(texts)
        joined = pairs.join()
        offsets = pairs.offsets(joined)[bounds]
        return pa.Array.from_buffers(
            parts.binary, self.rows, [None, pa.py_buffer(offsets), joined.buffers()[2]]
        )


class _Parts:
    """A record's parts, in order, for one ``binary_join_element_wise``: runs of fixed-width
    fields go into one numpy structured array (one column), the rest are Arrow columns."""

    def __init__(self, rows: int, large: bool) -> None:
        self.rows = rows
        self.large = large
        self.binary = pa.large_binary() if large else pa.binary()
        self.offset_type = np.int64 if large else np.int32
        self.width = 8 if large else 4
        self.columns: list[Any] = []
        self._fields: list[tuple[str, Any]] = []

    def fixed(self, dtype: str, values: Any) -> None:
        self._fields.append((dtype, values))

    def column(self, array: Any) -> None:
        self._end_run()
        self.columns.append(array if array.type == self.binary else array.cast(self.binary))

    def fixed_width(self, data: Any, width: int, present: Any = None) -> Any:
        """``width`` bytes a row from ``data``, empty where ``present`` is False."""
        rows = len(data)
        offsets = np.arange(0, (rows + 1) * width, width, dtype=self.offset_type)
        valid = None if present is None else pa.py_buffer(np.packbits(present, bitorder="little"))
        buffers = [valid, pa.py_buffer(offsets), pa.py_buffer(data.view(np.uint8))]
        return pa.Array.from_buffers(self.binary, rows, buffers)

    def offsets(self, array: Any) -> Any:
        """The offsets of a column of ours (``binary`` or ``large_binary``), as numpy."""
        return np.frombuffer(
            array.buffers()[1], self.offset_type, len(array) + 1, array.offset * self.width
        )

    def join(self) -> Any:
        self._end_run()
        empty = _binary_array([b""], self.binary)[0]
        return pc.binary_join_element_wise(
            *self.columns, empty, null_handling="replace", null_replacement=""
        )

    def _end_run(self) -> None:
        if not self._fields:
            return
        layout = np.dtype([(f"f{i}", dtype) for i, (dtype, _) in enumerate(self._fields)])
        table = np.empty(self.rows, layout)
        for i, (_, values) in enumerate(self._fields):
            table[f"f{i}"] = values
        self._fields = []
        self.columns.append(self.fixed_width(table, layout.itemsize))


def _bytes(column: Any) -> Any:
    """A string or binary column as binary, zero-copy (Arrow's strings are UTF-8 already)."""
    binary = _BYTES.get(column.type)
    if binary is None:
        raise _Unusual
    return column if column.type == binary else column.view(binary)


def _sizes(column: Any) -> Any:
    """Byte lengths as int64, a null's 0 (the row path sends it empty)."""
    return _int64s(pc.binary_length(column).cast(pa.int64()))


# pyarrow imports pandas (0.5 s in a fresh Spark worker) at its first conversion from Python
# values (pa.array, pa.scalar, fill_null(0)) or to numpy (to_numpy, even zero-copy), and
# nothing else a task does needs pandas: so none of those here; numpy reads the buffers.


def _int64s(array: Any) -> Any:
    """An int64 column's values as numpy, a null's 0, read from its data buffer."""
    if array.null_count == len(array):
        return np.zeros(len(array), np.int64)
    values = np.frombuffer(array.buffers()[1], np.int64, len(array), array.offset * 8)
    if array.null_count:
        values = np.where(_valid(array), values, 0)
    return values


def _binary_array(items: list[bytes], binary: Any) -> Any:
    """``pa.array(items, binary)`` for a binary or string type, built from its buffers."""
    large = binary in (pa.large_binary(), pa.large_string())
    sizes = [0, *map(len, items)]
    offsets = np.cumsum(sizes, dtype=np.int64 if large else np.int32)
    buffers = [None, pa.py_buffer(offsets), pa.py_buffer(b"".join(items))]
    return pa.Array.from_buffers(binary, len(items), buffers)


def _valid(column: Any) -> Any:
    """Which rows are not null, as numpy booleans, from the column's validity bitmap."""
    rows, offset = len(column), column.offset
    if not column.null_count:
        return np.ones(rows, np.bool_)
    bits = np.frombuffer(column.buffers()[0], np.uint8)
    return np.unpackbits(bits, count=offset + rows, bitorder="little")[offset:].astype(np.bool_)


def _numpy(array: Any) -> Any:
    """An integer column without nulls as numpy, over its data buffer."""
    kind = array.type
    if not pa.types.is_integer(kind) or array.null_count:
        raise _Unusual
    signed = "i" if pa.types.is_signed_integer(kind) else "u"
    dtype = np.dtype(f"{signed}{kind.bit_width // 8}")
    return np.frombuffer(array.buffers()[1], dtype, len(array), array.offset * dtype.itemsize)


def _topic_head(topic: str) -> bytes:
    """TopicSize and Topic, checked by the daemon's rule as the row path checks them."""
    raw = topic.encode()
    check_topic(raw)
    return struct.pack(">h", len(raw)) + raw


def _no_repeated_names(names: Any, counts: Any, starts: Any) -> None:
    """The row path sends ``dict(pairs)``: a name twice in one map is left to it. With at
    most 64 distinct names in the batch, a row's names as bits must number its pairs."""
    encoded = names.dictionary_encode()
    distinct = len(encoded.dictionary)
    if distinct == len(names):
        return
    codes = _numpy(encoded.indices).astype(np.uint64)
    if distinct <= 64:
        seen = np.bitwise_or.reduceat(np.left_shift(np.uint64(1), codes), starts)
        held = np.unpackbits(seen.view(np.uint8)).reshape(-1, 64).sum(axis=1)
        if (held != counts).any():
            raise _Unusual
        return
    rows = np.repeat(np.arange(len(counts), dtype=np.uint64), counts)
    if len(np.unique(rows * np.uint64(distinct) + codes)) != len(names):
        raise _Unusual
