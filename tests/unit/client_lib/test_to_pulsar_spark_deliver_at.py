"""The Spark column ``deliver_at``: rows with a delivery time become Message records with
DeliverAt (the row path; the Arrow path hands such batches to it), the others stay Bruce
records; timestamp columns are converted to milliseconds as ``timestamp`` is."""

from __future__ import annotations

import datetime
from typing import Any

import pytest

pa = pytest.importorskip("pyarrow")
pytest.importorskip("numpy")

from pulsar_bruce.parse.datagram import parse_datagram_py  # noqa: E402
from pulsar_bruce.parse.deliver_at import take_deliver_at  # noqa: E402
from to_pulsar.bulk import Columns, encode_columns  # noqa: E402
from to_pulsar.spark_arrow import encode_batch  # noqa: E402
from to_pulsar.spark_task import TaskPlan  # noqa: E402

NOW = 1_700_000_000_777
AT = 1_800_000_000_000


def records(encoded: bytes) -> list[bytes]:
    out, offset = [], 0
    while offset < len(encoded):
        size = int.from_bytes(encoded[offset : offset + 4], "big")
        out.append(encoded[offset : offset + size])
        offset += size
    return out


def delivery_times(encoded: bytes) -> list[int]:
    """Each record's DeliverAt (0: none), as the daemon's parser reads it."""
    times = []
    for record in records(encoded):
        parsed = parse_datagram_py(record)
        assert not isinstance(parsed, str), parsed
        times.append(take_deliver_at(parsed[5])[0])
    return times


def test_rows_with_a_delivery_time_become_delayed_message_records() -> None:
    encoded = encode_columns(Columns([b"a", b"b", b"c"], deliver_at=[None, AT, None]), "t", NOW)
    assert encoded.count == 3 and not encoded.invalid
    assert delivery_times(encoded.records) == [0, AT, 0]
    assert [int.from_bytes(r[4:6], "big") for r in records(encoded.records)] == [256, 260, 256]


@pytest.mark.parametrize(
    ("array", "kind"),
    [
        (pa.array([None, AT], pa.int64()), "ms"),
        (pa.array([None, AT * 1000], pa.timestamp("us", tz="UTC")), "ts"),
        (pa.array([None, AT * 1000], pa.timestamp("us")), "ntz"),
    ],
)
def test_the_arrow_path_hands_delayed_batches_to_the_row_path(array: Any, kind: str) -> None:
    batch = pa.record_batch([pa.array([b"now", b"later"]), array], names=["value", "deliver_at"])
    plan = TaskPlan(None, "t", 10.0, False, value=0, deliver_at=1, deliver_at_kind=kind)
    assert encode_batch(batch, plan, NOW) is None  # not the Arrow path's to encode
    assert delivery_times(plan.encode(batch, NOW).records) == [0, AT]


def test_an_all_null_column_keeps_the_arrow_path() -> None:
    batch = pa.record_batch(
        [pa.array([b"x", b"y"]), pa.array([None, None], pa.int64())], names=["value", "deliver_at"]
    )
    plan = TaskPlan(None, "t", 10.0, False, value=0, deliver_at=1)
    encoded = encode_batch(batch, plan, NOW)
    assert encoded is not None and delivery_times(encoded.records) == [0, 0]


def test_rows_of_timestamps_are_milliseconds() -> None:
    plan = TaskPlan(None, "t", 10.0, False, value=0, deliver_at=1, deliver_at_kind="ntz")
    when = datetime.datetime(2027, 1, 15, 8, 0, 0)
    columns = plan._from_rows([(b"v", when)])
    expected = (when - datetime.datetime(1970, 1, 1)) // datetime.timedelta(milliseconds=1)
    assert columns.deliver_at == [expected]
