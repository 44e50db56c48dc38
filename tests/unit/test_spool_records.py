"""Spool records and segment files: order, bounds, restart, torn tails."""

from __future__ import annotations

from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st
from pulsar_bruce.spool import records
from pulsar_bruce.spool.store import SpoolStore


def datagram(i: int) -> bytes:
    return records.encode(records.DATAGRAM, b"datagram-%d" % i)


def bodies(got: list[tuple[int, bytes]] | list[tuple[int, bytes, str]]) -> list[bytes]:
    return [record[1] for record in got]


def test_records_round_trip_and_batches_keep_their_fields() -> None:
    data = datagram(1) + records.encode_batch("persistent://public/default/t", 3, 41, 2, b"ENTRIES")
    [(kind1, body1), (kind2, body2)] = list(records.iter_records(data))
    assert (kind1, body1) == (records.DATAGRAM, b"datagram-1")
    batch = records.decode_batch(body2)
    assert kind2 == records.BATCH
    assert (batch.topic, batch.partition, batch.sequence_id, batch.count, batch.entries) == (
        "persistent://public/default/t",
        3,
        41,
        2,
        b"ENTRIES",
    )


def test_a_torn_tail_is_counted_and_skipped() -> None:
    data = datagram(1) + datagram(2)
    result = records.scan(data[:-3], final=True)
    assert bodies(result.records) == [b"datagram-1"] and result.corrupt == 1
    assert records.scan(data[:-3], final=False).consumed == len(datagram(1))


def test_corruption_in_the_middle_resynchronises_on_the_next_record() -> None:
    data = bytearray(datagram(1) + datagram(2) + datagram(3))
    data[len(datagram(1)) + 14] ^= 0xFF  # a byte of the second record's body
    result = records.scan(bytes(data), final=True)
    assert bodies(result.records) == [b"datagram-1", b"datagram-3"] and result.corrupt == 1


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=300))
def test_arbitrary_bytes_never_raise_and_only_intact_records_come_out(junk: bytes) -> None:
    for kind, _ in records.scan(junk + datagram(9), final=True).records:
        assert kind in (records.DATAGRAM, records.BATCH)


def test_store_reads_back_in_order_across_segments_and_deletes_them(tmp_path: Path) -> None:
    store = SpoolStore(tmp_path, max_bytes=10**6, fsync="never", segment_bytes=100)
    store.open()
    for i in range(20):
        store.append(datagram(i))
    assert len(list(tmp_path.glob("seg-*"))) > 3
    got = []
    while not store.is_empty:
        got += bodies(store.read(64))
    assert got == [b"datagram-%d" % i for i in range(20)]
    assert list(tmp_path.glob("seg-*")) == []


def test_store_is_bounded(tmp_path: Path) -> None:
    store = SpoolStore(tmp_path, max_bytes=3 * len(datagram(0)), fsync="never")
    store.open()
    for i in range(3):
        assert store.has_room(len(datagram(i)))
        store.append(datagram(i))
    assert not store.has_room(len(datagram(3)))


def test_a_restart_resumes_at_the_cursor_with_the_front_segment_first(tmp_path: Path) -> None:
    store = SpoolStore(tmp_path, max_bytes=10**6, fsync="always")
    store.open()
    for i in range(6):
        store.append(datagram(i))
    assert bodies(store.read(2 * len(datagram(0)))) == [b"datagram-0", b"datagram-1"]
    store.write_front([records.encode(records.DATAGRAM, b"older")])
    store.close()

    again = SpoolStore(tmp_path, max_bytes=10**6, fsync="always")
    again.open()
    got = []
    while not again.is_empty:
        got += bodies(again.read(10**6))
    assert got == [b"older"] + [b"datagram-%d" % i for i in range(2, 6)]


def test_a_torn_file_on_restart_is_counted(tmp_path: Path) -> None:
    store = SpoolStore(tmp_path, max_bytes=10**6, fsync="always")
    store.open()
    store.append(datagram(1))
    store.append(datagram(2))
    store.close()
    [segment] = tmp_path.glob("seg-*")
    segment.write_bytes(segment.read_bytes()[:-4])  # the crash cut the last record short
    again = SpoolStore(tmp_path, max_bytes=10**6, fsync="always")
    again.open()
    assert bodies(again.read(10**6)) == [b"datagram-1"]
    assert again.corrupt_records == 1 and again.is_empty


def test_a_record_larger_than_the_read_budget_still_comes_out(tmp_path: Path) -> None:
    store = SpoolStore(tmp_path, max_bytes=10**7, fsync="never")
    store.open()
    big = records.encode(records.DATAGRAM, b"x" * 100_000)
    store.append(big)
    store.append(datagram(1))
    got = store.read(1000)  # far less than the first record
    assert [len(body) for _, body, _ in got][:1] == [100_000]
    while not store.is_empty:
        got += store.read(1000)
    assert bodies(got)[-1] == b"datagram-1"


def test_records_name_their_segment_so_a_restart_tells_old_from_new(tmp_path: Path) -> None:
    store = SpoolStore(tmp_path, max_bytes=10**6, fsync="always")
    store.open()
    store.append(datagram(1))
    store.close()
    again = SpoolStore(tmp_path, max_bytes=10**6, fsync="always")
    again.open()
    old = set(again.segment_names())
    again.append(datagram(2))
    got = again.read(10**6)
    assert [(body, segment in old) for _, body, segment in got] == [
        (b"datagram-1", True),
        (b"datagram-2", False),
    ]
