"""Spool records (``spool/records.py``): round trips, torn tails, corruption skipped."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from pulsar_bruce.spool import journal_records, records

from tests.unit.daemon.spool.helpers import bodies, datagram


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


def test_count_marks_count_a_hole_and_are_never_returned_as_records() -> None:
    first = datagram(1) + datagram(2) + records.count_mark(2)
    data = first + datagram(3) + datagram(4) + records.count_mark(4)
    result = records.scan(data.replace(datagram(3), b""), final=True)  # a record cut out
    assert bodies(result.records) == [b"datagram-1", b"datagram-2", b"datagram-4"]
    assert (result.corrupt, result.lost_messages) == (0, 1)


def test_a_read_that_starts_past_a_files_start_counts_from_its_first_mark() -> None:
    """Resumed at a read offset: the messages before it are not known, so the first mark
    only sets the count; damage before it is counted as far as the headers tell."""
    torn = bytearray(datagram(3))
    torn[-1] ^= 0xFF  # its header is intact: one datagram
    data = bytes(torn) + records.count_mark(3) + datagram(4) + records.count_mark(4)
    result = records.scan(data, final=True, tally=records.Tally(mark=None))
    assert (bodies(result.records), result.corrupt, result.lost_messages) == (
        [b"datagram-4"],
        1,
        1,
    )


def test_a_journal_piece_is_the_spool_framing_of_its_kind_head_topic_and_entries() -> None:
    """``journal_records.piece`` builds the record without concatenating its body (it runs
    after every slab): the same bytes as ``records.encode``, and these bytes (golden)."""
    head = bytes.fromhex("0000000000000007" "00000010" "00000002" "00000003" "0001")
    built = journal_records.piece(7, 16, 2, b"t", 3, bytearray(b"entries"))
    assert built == records.encode(journal_records.PIECE, head + b"t" + b"entries")
    assert built.hex() == (
        "42525350" "0000001f" "23f1cd0f" "10" + head.hex() + b"t".hex() + b"entries".hex()
    )
