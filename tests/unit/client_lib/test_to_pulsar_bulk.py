"""to_pulsar.bulk: a batch's records column by column, byte for byte what ``send()`` encodes
one row at a time; StreamSender.send_encoded, which takes such a batch at once; and a
Spark task (TaskPlan.write) handing over one chunk per batch before its one flush.

The reference is what a Spark task did before: each row through ``SyncSend.send``
(a null topic: the option's, else invalid), records captured instead of sent.
"""

from __future__ import annotations

import dataclasses
import random
import string
import struct
from collections.abc import Iterator
from typing import Any

import pytest
from to_pulsar import FlushResult, InvalidMessageError, StreamProtocolError, StreamSender, bulk
from to_pulsar.bulk import NO_TOPIC, Columns, encode_columns
from to_pulsar.encoding import encode_any_partition, encode_partition_key
from to_pulsar.sending import SyncSend
from to_pulsar.spark_task import TaskPlan, ToPulsarSparkError

from tests.support.fakestream import FakeStreamDaemon

NOW = 1_700_000_000_777


class Capture(SyncSend):
    """``send()`` without a socket: the encoded records, in order."""

    def __init__(self) -> None:
        self.records: list[bytes] = []

    def _submit(self, message: bytes, /) -> None:
        self.records.append(message)


def one_by_one(columns: Columns, topic: str | None) -> tuple[bytes, list[tuple[int, str]]]:
    """The records and invalid rows as row-by-row sends give them."""
    capture = Capture()
    invalid: list[tuple[int, str]] = []
    nothing = [None] * len(columns)
    for index in range(len(columns)):
        value, key, partition_key, row_topic, timestamp, props = (
            (nothing if column is None else column)[index]
            for column in (columns.values, columns.keys, columns.partition_keys,
                           columns.topics, columns.timestamps, columns.properties)
        )  # fmt: skip
        try:
            row_topic = topic if row_topic is None else row_topic
            if row_topic is None:
                raise InvalidMessageError(NO_TOPIC)
            capture.send(
                row_topic,
                b"" if value is None else value,
                key=key,
                partition_key=partition_key,
                timestamp_ms=NOW if timestamp is None else timestamp,
                properties=dict(props) if props else None,
            )
        except InvalidMessageError as exc:
            invalid.append((index, str(exc)))
    return b"".join(capture.records), invalid


@pytest.fixture
def no_row_by_row(monkeypatch: pytest.MonkeyPatch) -> None:
    """Batches whose rows are alike must be encoded without the row-by-row fallback."""

    def refuse(*args: Any) -> bulk.Encoded:
        raise AssertionError("encoded row by row")

    monkeypatch.setattr(bulk, "_row_by_row", refuse)


def check(columns: Columns, topic: str | None = "t") -> bulk.Encoded:
    encoded = encode_columns(columns, topic, NOW)
    records, invalid = one_by_one(columns, topic)
    assert encoded.records == records
    assert encoded.invalid == invalid
    assert encoded.count == len(columns) - len(invalid)
    return encoded


ROWS = 5
VALUES = [b"v0", "v\u00e91".encode(), None, b"", b"\x00\xff" * 40]


@pytest.mark.parametrize(
    "columns",
    [
        Columns([b"a", b"bb", b"ccc"]),
        Columns(["a", "é", None, "", "\udcff"]),  # an escaped byte goes out as that byte
        Columns(VALUES, keys=["k0", None, "ké", "", "k4"]),
        Columns(["a", "b", "c", "d", "e"], keys=[b"k0", None, b"\xff", b"", b"k4"]),
        Columns(VALUES, keys=[None] * ROWS, partition_keys=[None] * ROWS),
        Columns(VALUES, partition_keys=[0, 1, -1, -(2**31), 2**32 - 1]),
        Columns(VALUES, keys=["k"] * ROWS, partition_keys=[7, 8, 9, -5, 3]),
        Columns(VALUES, timestamps=[0, None, 1, 2**63 - 1, -(2**63)]),
        Columns(VALUES, keys=[b"k"] * ROWS, timestamps=[None] * ROWS),
        Columns(VALUES, topics=["t", None, "t", "t", None]),
        Columns(VALUES, topics=["other"] * ROWS, partition_keys=list(range(ROWS))),
        Columns(VALUES, properties=[None, [], {}, None, []]),
        Columns([]),
    ],
    ids=lambda columns: ",".join(
        name for name, column in vars(columns).items() if column is not None
    ),
)
def test_rows_alike_are_encoded_in_c_loops_byte_for_byte(
    columns: Columns, no_row_by_row: None
) -> None:
    check(columns)


@pytest.mark.parametrize(
    ("columns", "topic", "invalid"),
    [
        (Columns(VALUES, topics=["a", "b", None, "a", "c"]), "t", []),  # topics differ
        (Columns(VALUES, topics=["a", None, "a", None, "a"]), None, [1, 3]),
        (Columns(VALUES), None, [0, 1, 2, 3, 4]),
        (Columns(VALUES), "x" * 40_000, [0, 1, 2, 3, 4]),  # a topic too long
        (Columns(VALUES, partition_keys=[1, None, 2, None, 3]), "t", []),  # mixed routing
        (Columns(VALUES, partition_keys=[1, 2**32, 3, -(2**31) - 1, 0]), "t", [1, 3]),
        (Columns(VALUES, keys=[b"k", "\ud800", None, "k", b"k"]), "t", [1]),  # no UTF-8
        (Columns(["\ud800", "v", None]), "t", [0]),
        (Columns([b"a", "b", b"c", None, "e"]), "t", []),  # str and bytes values
        (Columns(VALUES, keys=[b"a", "b", b"c", None, "e"]), "t", []),
        (Columns(VALUES, keys=[b"a", bytearray(b"b"), b"c", None, memoryview(b"e")]), "t", []),
        (Columns(VALUES, timestamps=[1, 2**63, 3, -(2**63) - 1, None]), "t", [1, 3]),
        (
            Columns(
                VALUES,
                keys=[b"k", None, "k", None, b""],
                partition_keys=[None, 5, None, -1, 2**40],
                properties=[[("a", "1")], {"b": "2", "c": ""}, None, [("x", None)], {"y": "z"}],
            ),
            "t",
            [3, 4],
        ),
        (
            Columns(VALUES, properties=[[("n" * 40_000, "v")], [], None, {}, [(1, "v")]]),
            "t",
            [0, 4],
        ),
    ],
)
def test_other_batches_row_by_row_with_the_same_reasons(
    columns: Columns, topic: str | None, invalid: list[int]
) -> None:
    encoded = check(columns, topic)
    assert [index for index, _ in encoded.invalid] == invalid


def test_invalid_reasons_are_those_of_send() -> None:
    encoded = encode_columns(
        Columns([b"a", b"b", b"c"], topics=["t", None, "t"], partition_keys=[1, 2, 2**33]),
        None,
        NOW,
    )
    assert encoded.invalid == [
        (1, "no topic (null 'topic' and no option)"),
        (2, "partition key must be in -2147483648..4294967295, got 8589934592"),
    ]
    assert (encoded.records, encoded.count) == (encode_partition_key(1, "t", b"a", b"", NOW), 1)


def random_batches(seed: int) -> Iterator[tuple[Columns, str | None]]:
    """Batches of every shape: columns present or not, nulls, alike or not, some invalid."""
    rng = random.Random(seed)
    topics = ["a", "bb", "persistent://public/default/c", "x" * 40_000]
    for _ in range(300):
        rows = rng.randint(0, 12)

        def column(
            make: Any, present: float = 0.5, nulls: float = 0.2, rows: int = rows
        ) -> list[Any] | None:
            if rng.random() >= present:
                return None
            return [None if rng.random() < nulls else make() for _ in range(rows)]

        def text(kind: type | None) -> str | bytes:
            raw = "".join(rng.choices(string.ascii_letters + "é€", k=rng.randint(0, 6)))
            return raw if (kind or rng.choice([str, bytes])) is str else raw.encode()

        value_kind, key_kind = rng.choice([str, bytes, None]), rng.choice([str, bytes, None])
        columns = Columns(
            values=column(lambda kind=value_kind: text(kind), present=1.0) or [],
            keys=column(lambda kind=key_kind: text(kind)),
            partition_keys=column(
                lambda: rng.choice([0, 1, -1, 2**32 - 1, 2**32, -(2**31) - 1, rng.randint(0, 99)]),
                nulls=rng.choice([0.0, 0.3]),
            ),
            topics=column(lambda: rng.choice(topics[: rng.choice([1, 1, 3, 4])])),
            timestamps=column(lambda: rng.choice([0, NOW, 2**63 - 1, 2**63])),
            properties=column(
                lambda: rng.choice([[], [("k", "v")], {"a": "b", "c": "é"}, [("k", None)]]),
                present=0.2,
            ),
        )
        yield columns, rng.choice(["t", None])


@pytest.mark.parametrize("seed", range(4))
def test_random_batches_match_row_by_row(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    row_by_row: list[Columns] = []
    real = bulk._row_by_row

    def spy(columns: Columns, topic: str | None, now_ms: int) -> bulk.Encoded:
        row_by_row.append(columns)
        return real(columns, topic, now_ms)

    monkeypatch.setattr(bulk, "_row_by_row", spy)
    batches = list(random_batches(seed))
    for columns, topic in batches:
        check(columns, topic)
    alike = [c for c, _ in batches if len(c) and not any(c is other for other in row_by_row)]
    assert len(alike) > 20 and len(row_by_row) > 20  # both ways are exercised


# -- StreamSender.send_encoded -----------------------------------------------------------------


def test_send_encoded_counts_every_record_of_the_chunk(fake: FakeStreamDaemon) -> None:
    batch = encode_columns(Columns([f"v{i}" for i in range(1000)], keys=["k"] * 1000), "t", NOW)
    with StreamSender(fake.path, chunk_bytes=4096) as sender:
        sender.send("t", b"first", timestamp_ms=NOW)
        sender.send_encoded(batch.records, batch.count)
        sender.send_encoded(b"", 0)
        sender.send_encoded(batch.records, batch.count)
        assert sender.unconfirmed == 2001
        result = sender.flush()
    assert result.acked == 2001 and sender.unconfirmed == 0
    records = fake.message_records()
    assert records[0] == encode_any_partition("t", b"first", b"", NOW)
    assert b"".join(records[1:1001]) == batch.records == b"".join(records[1001:])
    assert records[1000] == encode_any_partition("t", b"v999", b"k", NOW)


def test_send_encoded_refuses_a_count_that_cannot_be_and_a_wrong_one_fails_the_flush(
    fake: FakeStreamDaemon,
) -> None:
    two = encode_any_partition("t", b"a", b"", 1) + encode_any_partition("t", b"b", b"", 2)
    with StreamSender(fake.path) as sender:
        for records, count in ((two, 0), (b"", 1), (two, -1)):
            with pytest.raises(ValueError, match="records in"):
                sender.send_encoded(records, count)
        assert sender.unconfirmed == 0
        sender.send_encoded(two, 3)  # taken on trust: the daemon counts 2
        with pytest.raises(StreamProtocolError, match="accounts for 2 records, 3 were sent"):
            sender.flush()
        assert sender.closed


# -- a Spark task: one chunk per batch, the commit from the flush ------------------------------


def test_a_task_hands_each_batch_over_at_once_then_flushes(
    fake: FakeStreamDaemon, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[object] = []
    send_encoded, flush = StreamSender.send_encoded, StreamSender.flush

    def spy_send(sender: StreamSender, records: bytes, count: int) -> None:
        calls.append(count)
        send_encoded(sender, records, count)

    def spy_flush(sender: StreamSender, timeout: float | None = None) -> FlushResult:
        calls.append("flush")
        return flush(sender, timeout)

    monkeypatch.setattr(StreamSender, "send_encoded", spy_send)
    monkeypatch.setattr(StreamSender, "flush", spy_flush)
    plan = TaskPlan(str(fake.path), "t", 10.0, False, value=0, partition_key=1)
    rows = [(f"v{i}", i % 7) for i in range(25_000)]  # tuples, as pyspark Rows are
    rows[12_345] = ("bad", 2**40)
    with pytest.raises(ToPulsarSparkError) as info:
        plan.write(iter(rows))
    assert calls == [10_000, 9_999, 5_000, "flush"]
    assert "1 of 25000 rows were not delivered (invalid 1), 24999 acked" in str(info.value)
    assert "first invalid row 12346: partition key must be in" in str(info.value)
    records = fake.message_records()
    assert len(records) == 24_999
    expected = encode_partition_key(12_346 % 7, "t", b"v12346", b"", ts(records[12_345]))
    assert records[12_345] == expected


def test_rows_and_arrow_batches_keep_their_order_and_row_numbers(fake: FakeStreamDaemon) -> None:
    pa = pytest.importorskip("pyarrow")
    plan = TaskPlan(str(fake.path), None, 10.0, True, value=0, topic_column=1)

    def batch(*topics: str | None) -> object:
        values = [f"b{i}" for i in range(len(topics))]
        return pa.record_batch([pa.array(values), pa.array(topics, pa.string())], ["v", "t"])

    items = [("r0", "x"), batch("x", "y"), batch(), ("r1", None), batch("x", None, "x")]
    result = plan.write(iter(items))
    assert (result.rows, result.acked, result.discarded) == (7, 5, {"invalid": 2})
    records = fake.message_records()
    sent = (("r0", "x"), ("b0", "x"), ("b1", "y"), ("b0", "x"), ("b2", "x"))
    assert records == [
        encode_any_partition(topic, value, b"", ts(record))
        for (value, topic), record in zip(sent, records, strict=True)
    ]
    tolerant = dataclasses.replace(plan, tolerate_discards=False)
    with pytest.raises(ToPulsarSparkError, match=r"2 of 7 rows .* first invalid row 4: no topic"):
        tolerant.write(iter(items))


def ts(record: bytes) -> int:
    """The timestamp of an AnyPartition or PartitionKey record."""
    routed = struct.unpack_from(">h", record, 4)[0] == 257
    (topic_size,) = struct.unpack_from(">h", record, 14 if routed else 10)
    return int(struct.unpack_from(">q", record, (16 if routed else 12) + topic_size)[0])
