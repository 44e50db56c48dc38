"""to_pulsar.spark_arrow: records straight from Arrow buffers, byte for byte those of the row
path, ``encode_columns(TaskPlan._from_batch(batch))`` (``to_pylist()`` then to_pulsar.bulk).

Each column type Spark sends (and the large_* ones) is checked on its own, then hypothesis
compares the two paths on random batches: any mix of columns, types, nulls, slices and rows
the row path refuses. Batches without such rows must take the Arrow path (it returns None
only where the row path has something to say).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

pa = pytest.importorskip("pyarrow")
pytest.importorskip("numpy")

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from to_pulsar import spark_arrow  # noqa: E402
from to_pulsar.bulk import encode_columns  # noqa: E402
from to_pulsar.spark_arrow import encode_batch  # noqa: E402
from to_pulsar.spark_task import TaskPlan  # noqa: E402

NOW = 1_700_000_000_777
MS = 1_700_000_000_123
TEXT = [pa.string(), pa.large_string()]
BYTES = [pa.binary(), pa.large_binary()]
INTEGERS = [pa.int8(), pa.int16(), pa.int32(), pa.int64()]


def plan(topic: str | None = "t", **columns: Any) -> TaskPlan:
    return TaskPlan(None, topic, 10.0, False, **columns)


def reference(batch: Any, p: TaskPlan) -> Any:
    return encode_columns(p._from_batch(batch), p.topic, NOW)


def same(batch: Any, p: TaskPlan, fast: bool = True) -> None:
    """The Arrow path gives the row path's bytes (or, unless ``fast``, leaves it to it), and
    TaskPlan.encode, which the tasks call, gives them either way."""
    expected = reference(batch, p)
    encoded = encode_batch(batch, p, NOW)
    if fast or encoded is not None:
        assert encoded is not None, "left to the row path"
        assert (encoded.records, encoded.count, encoded.invalid) == (
            expected.records,
            expected.count,
            expected.invalid,
        )
    assert p.encode(batch, NOW) == expected


def batch(**columns: Any) -> Any:
    return pa.record_batch(list(columns.values()), names=list(columns))


VALUES = ["a", None, "", "é€ ünïcode", "x" * 300]


# -- each column type --------------------------------------------------------------------------


@pytest.mark.parametrize("value_type", TEXT + BYTES)
@pytest.mark.parametrize("key_type", [None, *TEXT, *BYTES])
def test_values_and_keys_of_every_string_and_binary_type(value_type: Any, key_type: Any) -> None:
    def column(kind: Any, texts: list[str | None]) -> Any:
        raw = [t if t is None or kind in TEXT else t.encode() for t in texts]
        return pa.array(raw, kind)

    columns = {"value": column(value_type, VALUES)}
    if key_type is not None:
        columns["key"] = column(key_type, ["k", "ключ", None, "", "k" * 70])
    same(batch(**columns), plan(value=0, key=None if key_type is None else 1))


def test_keys_that_are_all_null_or_not_utf8() -> None:
    values = pa.array(VALUES)
    same(batch(value=values, key=pa.array([None] * 5, pa.binary())), plan(value=0, key=1))
    keys = pa.array([b"\xff", b"\x00k", None, b"", b"\xc3"], pa.binary())
    same(batch(value=values, key=keys), plan(value=0, key=1))


@pytest.mark.parametrize("int_type", INTEGERS)
def test_integer_partition_keys_with_nulls(int_type: Any) -> None:
    bits = int_type.bit_width
    low, high = -(2 ** (bits - 1)), 2 ** (bits - 1) - 1
    if bits == 64:  # the range the daemon takes
        low, high = -(2**31), 2**32 - 1
    values = pa.array(VALUES)
    for keys in ([0, 1, -1, low, high], [None, 7, None, low, None], [None] * 5, [3] * 5):
        columns = batch(value=values, partition_key=pa.array(keys, int_type))
        same(columns, plan(value=0, partition_key=1))
        keyed = batch(value=values, key=pa.array(["k"] * 5), partition_key=pa.array(keys, int_type))
        same(keyed, plan(value=0, key=1, partition_key=2))


@pytest.mark.parametrize(
    ("column", "kind"),
    [
        (pa.array([MS, None, 0, -1, 2**62], pa.int64()), "ms"),
        (pa.array([7, None, 0, -1, 2**31 - 1], pa.int32()), "ms"),
        (pa.array([MS * 1000 + 999, None, 0, -1, -1001], pa.timestamp("us", tz="UTC")), "ts"),
        (pa.array([MS * 1000, None, 1, -999, 2**62], pa.timestamp("us")), "ntz"),
        (pa.array([MS * 1000 + 1, None, 0, -1, -(2**62)], pa.int64()), "us"),
        (pa.array([None] * 5, pa.timestamp("us", tz="UTC")), "ts"),
    ],
)
def test_timestamps_of_every_kind(column: Any, kind: str) -> None:
    columns = batch(value=pa.array(VALUES), timestamp=column)
    same(columns, plan(value=0, timestamp=1, timestamp_kind=kind))


def test_a_topic_column_one_topic_several_and_nulls() -> None:
    values = pa.array(VALUES)
    for topics, default in (
        (["a", "a", "a", "a", "a"], None),
        (["a", None, "a", None, "a"], "t"),
        ([None] * 5, "t"),
        (["a", "tenant/ns/b", None, "persistent://public/default/c", "a"], "t"),
    ):
        for kind in TEXT:
            columns = batch(value=values, topic=pa.array(topics, kind))
            same(columns, plan(default, value=0, topic_column=1))
            routed = batch(value=values, topic=pa.array(topics, kind),
                           partition_key=pa.array([1, None, 2, None, 3]))  # fmt: skip
            same(routed, plan(default, value=0, topic_column=1, partition_key=2))


@pytest.mark.parametrize("text", TEXT)
def test_properties_become_message_records(text: Any) -> None:
    maps = pa.array(
        [
            [("source", "web"), ("é", "ü")],
            None,
            [],
            [("n", "")],
            [(f"k{i}", "v") for i in range(70)],
        ],
        pa.map_(text, text),
    )
    values = pa.array(VALUES)
    same(batch(value=values, properties=maps), plan(value=0, properties=1))
    full = batch(value=values, key=pa.array([b"k", None, b"", b"\xff", b"kk"]),
                 partition_key=pa.array([None, 5, -1, None, 2**32 - 1], pa.int64()),
                 properties=maps)  # fmt: skip
    same(full, plan(value=0, key=1, partition_key=2, properties=3))
    for start in range(5):  # offsets that do not start at 0
        same(full.slice(start), plan(value=0, key=1, partition_key=2, properties=3))
    no_pairs = pa.array([None, [], None, [], []], pa.map_(text, text))
    same(batch(value=values, properties=no_pairs), plan(value=0, properties=1))


def test_sliced_batches_and_an_empty_one() -> None:
    full = batch(value=pa.array(VALUES * 3), key=pa.array(["k", None, "kk"] * 5),
                 partition_key=pa.array([None, 1, 2, 3, None] * 3),
                 timestamp=pa.array([MS, None, 1] * 5, pa.int64()))  # fmt: skip
    p = plan(value=0, key=1, partition_key=2, timestamp=3)
    for start, length in ((0, 15), (1, 3), (4, 11), (14, 1), (7, 0)):
        same(full.slice(start, length), p)


def test_a_large_value_and_a_batch_past_32_bit_offsets(monkeypatch: pytest.MonkeyPatch) -> None:
    big = pa.array([b"x" * 3_000_000, b"y"], pa.large_binary())
    same(batch(value=big), plan(value=0))
    monkeypatch.setattr(spark_arrow, "LARGE_BATCH", 100)  # as a batch of over 2 GiB would
    maps = pa.array(
        [[("a", "1")], None, [("b", "2"), ("c", "3")]], pa.map_(pa.string(), pa.string())
    )
    full = batch(value=pa.array(["v" * 60, None, "w"]), key=pa.array([b"k", None, b"kk"]),
                 partition_key=pa.array([1, None, 2]), properties=maps)  # fmt: skip
    same(full, plan(value=0, key=1, partition_key=2, properties=3))


# -- what the Arrow path leaves to the row path ---------------------------------------------------


@pytest.mark.parametrize(
    ("columns", "p", "invalid"),
    [
        (batch(value=pa.array(["a", "b"]), partition_key=pa.array([1, 2**32])),
         plan(value=0, partition_key=1), [1]),
        (batch(value=pa.array(["a", "b"]), partition_key=pa.array([-(2**31) - 1, None])),
         plan(value=0, partition_key=1), [0]),
        (batch(value=pa.array(["a", "b"]), topic=pa.array(["t", None])),
         plan(None, value=0, topic_column=1), [1]),
        (batch(value=pa.array(["a", "b"]), topic=pa.array(["t", "a/b/c/d"])),
         plan(value=0, topic_column=1), [1]),
        (batch(value=pa.array(["a"])), plan("x" * 40_000, value=0), [0]),
        (batch(value=pa.array(["a", "b"]),
               properties=pa.array([[("k", None)], [("k", "v")]],
                                   pa.map_(pa.string(), pa.string()))),
         plan(value=0, properties=1), [0]),
        (batch(value=pa.array(["a", "b"]),
               properties=pa.array([[("k", "1"), ("k", "2")], [("n" * 40_000, "v")]],
                                   pa.map_(pa.string(), pa.string()))),
         plan(value=0, properties=1), [1]),
        (batch(value=pa.array([1.5, 2.5])), plan(value=0), None),  # not a Spark value type
    ],
)  # fmt: skip
def test_batches_the_row_path_has_something_to_say_about(
    columns: Any, p: TaskPlan, invalid: list[int] | None
) -> None:
    assert encode_batch(columns, p, NOW) is None
    if invalid is None:
        return
    same(columns, p, fast=False)
    assert [index for index, _ in p.encode(columns, NOW).invalid] == invalid


def test_repeated_property_names_go_as_the_row_path_sends_them() -> None:
    """``dict(pairs)``: the last value, at the first name's place; more than 64 names too."""
    many = [(f"n{i}", str(i)) for i in range(70)]
    for maps in ([[("a", "1"), ("b", "2"), ("a", "3")]], [[*many, ("n3", "again")]]):
        columns = batch(
            value=pa.array(["v"]), properties=pa.array(maps, pa.map_(pa.string(), pa.string()))
        )
        assert encode_batch(columns, plan(value=0, properties=1), NOW) is None
        same(columns, plan(value=0, properties=1), fast=False)


def test_without_numpy_the_row_path_encodes(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "to_pulsar.spark_arrow", None)  # import fails
    columns = batch(value=pa.array(VALUES), key=pa.array(["k"] * 5))
    assert plan(value=0, key=1).encode(columns, NOW) == reference(columns, plan(value=0, key=1))


# -- random batches: the two paths side by side -------------------------------------------------

TOPICS = ["t", "tenant/ns/b", "persistent://public/default/c"]
NAMES = ["a", "b", "é", "k" * 3]


@st.composite
def batches(draw: st.DrawFn, valid: bool) -> tuple[Any, TaskPlan]:
    """A batch and its plan; with ``valid``, none of its rows is one the row path refuses."""
    rows = draw(st.integers(0, 12))
    extra = draw(st.integers(0, 3))  # sliced off below
    size = rows + extra

    def nullable(values: st.SearchStrategy[Any]) -> list[Any]:
        return draw(st.lists(st.none() | values, min_size=size, max_size=size))

    def text_column(kind: Any) -> Any:
        texts = nullable(st.text(max_size=8))
        return pa.array([t if t is None or kind in TEXT else t.encode() for t in texts], kind)

    columns: dict[str, Any] = {"value": text_column(draw(st.sampled_from(TEXT + BYTES)))}
    if draw(st.booleans()):
        columns["key"] = text_column(draw(st.sampled_from(TEXT + BYTES)))
    if draw(st.booleans()):
        kind = draw(st.sampled_from(INTEGERS))
        bits = min(kind.bit_width, 32)
        low, high = -(2 ** (bits - 1)), 2 ** (bits - 1) - 1
        if kind.bit_width == 64:
            low, high = (-(2**31), 2**32 - 1) if valid else (-(2**33), 2**33)
        columns["partition_key"] = pa.array(nullable(st.integers(low, high)), kind)
    default = draw(st.sampled_from(["t", "other"] if valid else ["t", None]))
    if draw(st.booleans()):
        choices = TOPICS if valid else [*TOPICS, "a/b/c/d"]
        columns["topic"] = pa.array(nullable(st.sampled_from(choices)), draw(st.sampled_from(TEXT)))
    kind = "ms"
    if draw(st.booleans()):
        kind = draw(st.sampled_from(["ms", "ts", "ntz", "us"]))
        arrow = {"ms": pa.int64(), "ts": pa.timestamp("us", tz="UTC"),
                 "ntz": pa.timestamp("us"), "us": pa.int64()}[kind]  # fmt: skip
        columns["timestamp"] = pa.array(nullable(st.integers(-(2**62), 2**62)), arrow)
    if draw(st.booleans()):
        text = draw(st.sampled_from(TEXT))
        value = st.text(max_size=6) if valid else st.none() | st.text(max_size=6)
        pairs = st.lists(st.tuples(st.sampled_from(NAMES), value), max_size=4)
        if valid:
            pairs = pairs.map(lambda items: list(dict(items).items()))
        columns["properties"] = pa.array(nullable(pairs), pa.map_(text, text))
    names = list(columns)
    start = draw(st.integers(0, extra))
    positions = {("topic_column" if n == "topic" else n): i for i, n in enumerate(names)}
    p = dataclasses.replace(plan(default, value=0), timestamp_kind=kind, **positions)
    return batch(**columns).slice(start, rows), p


@settings(max_examples=600, deadline=None, derandomize=True)
@given(batches(valid=True))
def test_random_valid_batches_take_the_arrow_path_byte_for_byte(
    drawn: tuple[Any, TaskPlan],
) -> None:
    same(*drawn)


@settings(max_examples=600, deadline=None, derandomize=True)
@given(batches(valid=False))
def test_random_batches_encode_as_the_row_path_does(drawn: tuple[Any, TaskPlan]) -> None:
    same(*drawn, fast=False)
