"""Spool segment files (``spool/store.py``): order, bounds, restart, torn tails, cursors."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pulsar_bruce.spool import records
from pulsar_bruce.spool.store import SpoolStore

from tests.unit.daemon.spool.helpers import bodies, datagram


def take(store: SpoolStore, max_bytes: int) -> list[tuple[int, bytes, str]]:
    """What the spooler does: read, admit, commit (only then are read segments deleted)."""
    got = store.read(max_bytes)
    store.commit()
    return got


def test_store_reads_back_in_order_across_segments_and_deletes_them(tmp_path: Path) -> None:
    store = SpoolStore(tmp_path, max_bytes=10**6, fsync="never", segment_bytes=100)
    store.open()
    for i in range(20):
        store.append(datagram(i))
    assert len(list(tmp_path.glob("seg-*"))) > 3
    got = []
    while not store.is_empty:
        got += bodies(take(store, 64))
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
    assert bodies(take(store, 2 * len(datagram(0)))) == [b"datagram-0", b"datagram-1"]
    store.write_front([records.encode(records.DATAGRAM, b"older")])
    store.close()

    again = SpoolStore(tmp_path, max_bytes=10**6, fsync="always")
    again.open()
    got = []
    while not again.is_empty:
        got += bodies(take(again, 10**6))
    assert got == [b"older"] + [b"datagram-%d" % i for i in range(2, 6)]


def test_a_torn_file_on_restart_is_counted(tmp_path: Path) -> None:
    store = SpoolStore(tmp_path, max_bytes=10**6, fsync="always")
    store.open()
    store.append(datagram(1))
    store.append(datagram(2))
    store.close()
    [segment] = tmp_path.glob("seg-*")
    # The crash cut the last record short (and the count mark written at close).
    segment.write_bytes(segment.read_bytes()[: -records.MARK_SIZE - 4])
    again = SpoolStore(tmp_path, max_bytes=10**6, fsync="always")
    again.open()
    assert bodies(take(again, 10**6)) == [b"datagram-1"]
    assert again.corrupt_records == 1 and again.is_empty


def test_a_record_larger_than_the_read_budget_still_comes_out(tmp_path: Path) -> None:
    store = SpoolStore(tmp_path, max_bytes=10**7, fsync="never")
    store.open()
    big = records.encode(records.DATAGRAM, b"x" * 100_000)
    store.append(big)
    store.append(datagram(1))
    got = take(store, 1000)  # far less than the first record
    assert [len(body) for _, body, _ in got][:1] == [100_000]
    while not store.is_empty:
        got += take(store, 1000)
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
    got = take(again, 10**6)
    assert [(body, segment in old) for _, body, segment in got] == [
        (b"datagram-1", True),
        (b"datagram-2", False),
    ]


# -- cursors: a partly read head, a shutdown front, restarts ----------------------------------


def tagged(tag: str, i: int) -> bytes:
    """A record of about 60 bytes, so a 20-byte read budget takes exactly one."""
    return records.encode(records.DATAGRAM, b"%s-%02d-" % (tag.encode(), i) + b"." * 40)


def reopen(directory: Path, fsync: str = "never", segment_bytes: int = 200) -> SpoolStore:
    """A store without count marks: the tests below count bytes record by record."""
    store = SpoolStore(
        directory, max_bytes=10**6, fsync=fsync, segment_bytes=segment_bytes, mark_bytes=0
    )
    store.open()
    return store


def body_of(record: bytes) -> bytes:
    [(_, body)] = records.iter_records(record)
    return body


def replay_after_a_crash(directory: Path, scratch: Path) -> tuple[int, list[bytes]]:
    """What a start on a copy of ``directory`` (its state if the process died now) holds
    and replays."""
    shutil.copytree(directory, scratch)
    store = reopen(scratch)
    size, got = store.size_bytes, []
    while not store.is_empty:
        got += bodies(take(store, 10**6))
    shutil.rmtree(scratch)
    return size, got


def drain_checking_every_step(
    store: SpoolStore, expected: list[bytes], budget: int, scratch: Path
) -> None:
    """Read ``store`` dry in ``budget`` chunks: each record once, in order; ``size_bytes``
    exactly what is left (0 only at the end); a crash at any step loses and repeats nothing."""
    left = list(expected)
    assert store.size_bytes == sum(map(len, left))
    while left:
        got = bodies(take(store, budget))
        assert got and got == [body_of(record) for record in left[: len(got)]]
        del left[: len(got)]
        assert store.size_bytes == sum(map(len, left))
        assert store.is_empty == (not left)
        size, replayed = replay_after_a_crash(store.directory, scratch)
        assert (size, replayed) == (sum(map(len, left)), [body_of(record) for record in left])
    assert take(store, budget) == [] and store.is_empty
    assert list(store.directory.glob("seg-*")) == []


@pytest.mark.parametrize("fsync", ["never", "always"])
@pytest.mark.parametrize("budget", [20, 100, 10**6])  # one record a read; across segments; all
def test_a_partly_read_head_behind_a_front_gives_every_record_once(
    tmp_path: Path, fsync: str, budget: int
) -> None:
    spool, scratch = tmp_path / "spool", tmp_path / "scratch"
    head = [tagged("head", i) for i in range(8)]  # over several 200-byte segments
    front = [tagged("front", i) for i in range(4)]
    store = reopen(spool, fsync)
    for record in head:
        store.append(record)
    assert bodies(take(store, 20)) == [body_of(head[0])]  # replayed before the shutdown
    store.write_front(front)
    assert store.size_bytes == sum(map(len, front + head[1:]))
    store.close()

    drain_checking_every_step(reopen(spool, fsync), front + head[1:], budget, scratch)


def test_a_restart_while_the_front_is_half_read_keeps_both_places(tmp_path: Path) -> None:
    spool, scratch = tmp_path / "spool", tmp_path / "scratch"
    head = [tagged("head", i) for i in range(6)]
    front = [tagged("front", i) for i in range(4)]
    store = reopen(spool, "always")
    for record in head:
        store.append(record)
    assert bodies(take(store, 2 * len(head[0]))) == list(map(body_of, head[:2]))
    store.write_front(front)
    store.close()

    again = reopen(spool, "always")
    assert bodies(take(again, 20)) + bodies(take(again, 20)) == list(map(body_of, front[:2]))
    later = [tagged("later", i) for i in range(2)]  # memory at the second shutdown
    again.write_front(later)
    again.close()
    assert len((spool / "cursor").read_text().splitlines()) == 2  # the front's and the head's

    drain_checking_every_step(reopen(spool), later + front[2:] + head[2:], 20, scratch)


def test_a_cursor_file_of_an_earlier_version_is_resumed(tmp_path: Path) -> None:
    segment = tmp_path / "seg-000000000001.spool"
    segment.write_bytes(datagram(0) + datagram(1) + datagram(2))
    (tmp_path / "cursor").write_text(f"seg-000000000001.spool {len(datagram(0))}")
    store = reopen(tmp_path)
    assert store.size_bytes == len(datagram(1) + datagram(2))
    assert bodies(take(store, 10**6)) == [b"datagram-1", b"datagram-2"]

    segment.write_bytes(datagram(3))
    (tmp_path / "cursor").write_text(" 0")  # what an earlier version wrote with nothing read
    assert bodies(take(reopen(tmp_path), 10**6)) == [b"datagram-3"]


def test_a_cursor_line_left_by_a_crash_is_dropped_and_its_name_never_reused(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # The crash came between deleting a read segment and saving the cursor; another
    # segment lost its end (fsync never) while its offset was saved.  That one's start
    # is unknown now: it is replayed from its start, its records marked suspect (possible
    # duplicates), rather than skipped whole.
    (tmp_path / "seg-000000000002.spool").write_bytes(datagram(1))
    (tmp_path / "cursor").write_text("seg-000000000002.spool 999\nseg-000000000005.spool 40")
    store = reopen(tmp_path)
    assert store.size_bytes == len(datagram(1)) and (tmp_path / "cursor").read_text() == ""
    assert store.suspect == {"seg-000000000002.spool"}
    assert "shorter (23 bytes) than its read offset 999" in caplog.text
    store.append(datagram(7))
    assert store.segment_names()[-1] == "seg-000000000006.spool"
    assert bodies(take(store, 10**6)) == [b"datagram-1", b"datagram-7"] and store.is_empty


@settings(max_examples=150, deadline=None)
@given(
    st.lists(
        st.one_of(
            st.tuples(st.just("append"), st.integers(1, 6)),
            st.tuples(st.just("read"), st.sampled_from([1, 70, 150, 10**6])),
            st.tuples(st.just("restart"), st.integers(0, 4)),  # with a front of that many
        ),
        max_size=25,
    )
)
def test_any_mix_of_appends_reads_fronts_and_restarts_replays_each_record_once(
    steps: list[tuple[str, int]],
) -> None:
    with tempfile.TemporaryDirectory() as directory:
        spool = Path(directory)
        store, made = reopen(spool, segment_bytes=150), 0
        model: list[bytes] = []
        for action, n in steps:
            if action == "read":
                got = bodies(take(store, n))
                assert got == [body_of(record) for record in model[: len(got)]]
                assert got or not model
                del model[: len(got)]
            else:
                fresh = [tagged(action, made + i) for i in range(n)]
                made += n
                if action == "append":
                    for record in fresh:
                        store.append(record)
                    model += fresh
                else:
                    store.write_front(fresh)
                    store.close()
                    store, model = reopen(spool, segment_bytes=150), fresh + model
            assert store.size_bytes == sum(map(len, model))
        got = []
        while not store.is_empty:
            got += bodies(take(store, 100))
        assert got == [body_of(record) for record in model]
        assert list(spool.glob("seg-*")) == []


# -- a damaged stretch is counted by the marks (issue 29) -----------------------------------------


def earlier_run(directory: Path, sizes: list[int], per_write: int = 7) -> int:
    """A run that spooled datagrams of ``sizes`` bytes, ``per_write`` a write, and stopped."""
    store = SpoolStore(directory, max_bytes=10**8, fsync="never", mark_bytes=300)
    store.open()
    for start in range(0, len(sizes), per_write):
        chunk = sizes[start : start + per_write]
        store.append(b"".join(datagram_of(start + i, n) for i, n in enumerate(chunk)), len(chunk))
    store.close()
    return len(sizes)


def datagram_of(i: int, size: int) -> bytes:
    return records.encode(records.DATAGRAM, b"%06d" % i + b"x" * size)


def flip(path: Path, start: int, length: int) -> None:
    data = bytearray(path.read_bytes())
    for at in range(start, min(start + length, len(data))):
        data[at] ^= 0xFF
    path.write_bytes(bytes(data))


def replay_all(directory: Path, budget: int = 500) -> tuple[list[bytes], int, SpoolStore]:
    """A later start: everything it replays, and the messages it counts as lost."""
    store = SpoolStore(directory, max_bytes=10**8, fsync="never")
    store.open()
    got: list[bytes] = []
    while not store.is_empty:
        got += bodies(take(store, budget))
    return got, store.take_losses()[1], store


def test_a_flipped_region_over_a_records_header_counts_every_message_it_hid(
    tmp_path: Path,
) -> None:
    """The issue's case: 64 bytes flipped from the end of one record into the next one's
    header. The second record's magic is gone, so nothing says it was a record; the count
    marks do: missing = counted."""
    sent = earlier_run(tmp_path, [1000] * 200)
    [segment] = tmp_path.glob("seg-*")
    data = segment.read_bytes()
    header = data.index(records.MAGIC, len(data) // 2)
    flip(segment, header - 30, 64)
    got, lost, store = replay_all(tmp_path)
    assert len(got) < sent and len(set(got)) == len(got)
    assert len(got) + lost == sent  # 1 counted of 2 missing before the marks
    assert store.corrupt_records >= 1


@settings(max_examples=300, deadline=None)
@given(
    sizes=st.lists(st.integers(0, 120), min_size=1, max_size=60),
    per_write=st.integers(1, 9),
    where=st.floats(0, 1),
    length=st.integers(1, 200),
    budget=st.sampled_from([1, 100, 10**6]),
)
def test_any_flipped_region_is_counted_exactly(
    sizes: list[int], per_write: int, where: float, length: int, budget: int
) -> None:
    """Flips anywhere before a segment's last count mark (the one written at close): every
    message is replayed intact or counted lost, never both, never neither."""
    with tempfile.TemporaryDirectory() as directory:
        spool = Path(directory)
        sent = earlier_run(spool, sizes, per_write)
        [segment] = spool.glob("seg-*")
        flippable = segment.stat().st_size - records.MARK_SIZE
        start = int(where * (flippable - 1))
        flip(segment, start, min(length, flippable - start))
        got, lost, _ = replay_all(spool, budget)
        assert len(set(got)) == len(got) and len(got) + lost == sent
