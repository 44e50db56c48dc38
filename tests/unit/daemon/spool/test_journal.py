"""The write-ahead journal with real producers and batches: what a crash leaves is what
``recover`` gives back (entries, ids, order), settled batches never come back, segments
are freed and copied forward, and damage is counted, never fatal."""

from __future__ import annotations

import errno
import os
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from pulsar_bruce.batch.batch_builder import entry_offsets
from pulsar_bruce.model.batch import SealedBatch
from pulsar_bruce.producer.partition_producer import BatchPolicy, PartitionProducer
from pulsar_bruce.spool import journal_files
from pulsar_bruce.spool import journal_records as jr
from pulsar_bruce.spool.journal import Journal
from pulsar_bruce.spool.layout import journal_name


def producer(partition: int = 0, *, key_based: bool = False) -> PartitionProducer:
    made = PartitionProducer(f"t-partition-{partition}", partition, partition + 1, BatchPolicy(
        key_based=key_based))  # fmt: skip
    made.name = "P-host-abc123"
    return made


def add(target: PartitionProducer, *values: bytes, key: bytes = b"") -> None:
    """Append messages as the intake does (one key batch per key with key-based batching)."""
    for value in values:
        batch = target.batch
        key_field = b"\x12" + bytes([len(key)]) + key if key else b""
        into = batch.key_batch(key_field, len(value)) if target.policy.key_based else batch
        into.append(key_field, 0, value, 0, len(value) + 40)


def values_of(entries: bytes) -> list[bytes]:
    """The message values of batch entries (metadata parsed the slow way)."""
    from pulsar_bruce.frame import pulsar_api_pb2 as pb

    out = []
    for offset in entry_offsets(entries):
        size = int.from_bytes(entries[offset : offset + 4], "big")
        meta = pb.SingleMessageMetadata.FromString(entries[offset + 4 : offset + 4 + size])
        start = offset + 4 + size
        out.append(entries[start : start + meta.payload_size])
    return out


def start(directory: Path, **options: Any) -> tuple[Journal, jr.Recovered]:
    journal = Journal(directory, "never", **options)
    recovered = journal.open()
    return journal, recovered


def one_producer(directory: Path) -> tuple[Journal, PartitionProducer]:
    """A journal with one producer (partition 0 of ``t``) whose open batch it watches."""
    journal, _ = start(directory)
    p = producer()
    journal.producer_added(p, "t", 0)
    journal.touched(p)
    return journal, p


def crash_and_recover(directory: Path) -> jr.Recovered:
    """Another process reads the journal while this one is 'killed' (nothing more written)."""
    return jr.recover([p.read_bytes() for p in sorted(directory.glob("journal-*.log"))])


def test_an_open_batch_is_journalled_at_each_sync_and_recovered_in_order(tmp_path: Path) -> None:
    journal, recovered = start(tmp_path)
    assert recovered.messages == 0
    p = producer(3)
    journal.producer_added(p, "t", 3)
    journal.touched(p)
    add(p, b"one", b"two")
    journal.sync()
    add(p, b"three")
    journal.sync()
    journal.sync()  # nothing new: nothing written
    back = crash_and_recover(tmp_path)
    assert [(b.topic, b.partition, b.count, b.sequence_id) for b in back.batches] == [
        ("t", 3, 3, -1)
    ]
    assert values_of(back.batches[0].entries) == [b"one", b"two", b"three"]
    assert back.lost_messages == back.damaged_records == 0


def test_a_sent_batch_comes_back_under_its_producer_name_and_ids(tmp_path: Path) -> None:
    journal, p = one_producer(tmp_path)
    add(p, b"a", b"b")
    journal.sync()
    p.seal()
    p.on_registered("P-host-abc123", 41)
    journal.sync_producer(p)
    out = p.frames_to_send(1)
    journal.sent(p, out)
    add(p, b"c")  # a second, unsent batch
    journal.touched(p)
    journal.sync()
    back = crash_and_recover(tmp_path)
    assert [(b.count, b.sequence_id, b.producer_name) for b in back.batches] == [
        (2, 42, "P-host-abc123"),
        (1, -1, ""),
    ]


def test_settled_batches_do_not_come_back_and_free_their_segments(tmp_path: Path) -> None:
    journal, _ = start(tmp_path, segment_bytes=200)
    p = producer()
    journal.producer_added(p, "t", 0)
    sealed: list[SealedBatch] = []
    for round_ in range(20):
        journal.touched(p)
        add(p, b"x" * 50, str(round_).encode())
        journal.sync()
        p.seal()
        journal.sync()
        sealed.append(p.pending.pop())
    for batch in sealed[:-1]:
        journal.settled(batch)
    journal.tick()
    back = crash_and_recover(tmp_path)
    assert [values_of(b.entries)[1] for b in back.batches] == [b"19"]
    assert len(list(tmp_path.glob("journal-*.log"))) <= 3  # batch 19's (two at most), the active


def stuck_and_busy(directory: Path) -> tuple[Journal, PartitionProducer, PartitionProducer]:
    """Small segments; partition 0 has one batch sent, never acknowledged; partition 1 none."""
    journal, _ = start(directory, segment_bytes=300, max_segments=3)
    stuck, busy = producer(0), producer(1)
    journal.producer_added(stuck, "t", 0)
    journal.producer_added(busy, "t", 1)
    journal.touched(stuck)
    add(stuck, b"stuck-1")
    journal.sync()
    stuck.seal()
    stuck.on_registered("P-host-abc123", -1)
    journal.sync_producer(stuck)
    journal.sent(stuck, stuck.frames_to_send(1))
    return journal, stuck, busy


def keep_busy(journal: Journal, busy: PartitionProducer) -> None:
    """Many batches journalled and settled: the journal rotates, copies the stuck batch forward
    and deletes old segments."""
    for round_ in range(60):
        journal.touched(busy)
        add(busy, b"y" * 80, str(round_).encode())
        busy.seal()
        journal.sync()
        journal.settled(busy.pending.pop())
        journal.tick()


def test_a_stuck_batch_is_copied_forward_and_the_journal_stays_bounded(tmp_path: Path) -> None:
    journal, _, busy = stuck_and_busy(tmp_path)
    keep_busy(journal, busy)
    assert len(list(tmp_path.glob("journal-*.log"))) <= 4
    back = crash_and_recover(tmp_path)
    assert [(b.partition, b.count, b.sequence_id, b.producer_name) for b in back.batches] == [
        (0, 1, 0, "P-host-abc123")
    ]
    assert values_of(back.batches[0].entries) == [b"stuck-1"]


def test_key_based_batches_are_journalled_per_key(tmp_path: Path) -> None:
    journal, _ = start(tmp_path)
    p = producer(key_based=True)
    journal.producer_added(p, "t", 0)
    journal.touched(p)
    add(p, b"a1", key=b"a")
    add(p, b"b1", key=b"b")
    journal.sync()
    add(p, b"a2", key=b"a")
    journal.sync()
    back = crash_and_recover(tmp_path)
    assert sorted(values_of(b.entries) for b in back.batches) == [[b"a1", b"a2"], [b"b1"]]


class WaitingTopic:
    """What the journal reads of a route-layer Topic (hashable by identity, like it)."""

    def __init__(self, name: str):
        self.name = name
        self.producers: list[PartitionProducer] = []
        self.unrouted: list[Any] = []
        self.unrouted_batches: list[tuple[int, SealedBatch]] = []


def waiting_topic(name: str = "w") -> Any:
    return WaitingTopic(name)


def test_waiting_messages_come_back_until_routed_then_as_batches(tmp_path: Path) -> None:
    journal, _ = start(tmp_path)
    topic = waiting_topic()
    journal.topic_added(topic)
    topic.unrouted.extend(SimpleNamespace(data=d) for d in (b"d1", b"d2"))
    journal.sync()
    assert crash_and_recover(tmp_path).datagrams == [b"d1", b"d2"]
    p = producer()
    journal.producer_added(p, "w", 0)
    topic.producers, topic.unrouted = [p], []  # routed: into the open batch
    journal.touched(p)
    add(p, b"d1", b"d2")
    journal.sync()
    back = crash_and_recover(tmp_path)
    assert back.datagrams == []
    assert [values_of(b.entries) for b in back.batches] == [[b"d1", b"d2"]]


def test_waiting_messages_discarded_and_new_ones_arriving_are_told_apart(tmp_path: Path) -> None:
    journal, _ = start(tmp_path)
    topic = waiting_topic()
    journal.topic_added(topic)
    topic.unrouted.extend(SimpleNamespace(data=d) for d in (b"old1", b"old2"))
    journal.sync()
    topic.unrouted.clear()  # discarded (the lookup failed for good) ...
    topic.unrouted.extend(SimpleNamespace(data=d) for d in (b"new1", b"new2", b"new3"))
    journal.sync()  # ... and as many new ones came before the next sync
    assert crash_and_recover(tmp_path).datagrams == [b"new1", b"new2", b"new3"]


def test_the_halves_of_a_split_batch_replace_it(tmp_path: Path) -> None:
    journal, p = one_producer(tmp_path)
    add(p, b"1", b"2", b"3", b"4")
    journal.sync()
    p.seal()
    journal.sync()
    whole = p.pending[0]
    p.queue.split(0)
    first, rest = p.pending
    p.on_registered("P-host-abc123", -1)
    out = p.frames_to_send(1)
    out.split_from.update({first: whole, rest: whole})  # as a frame too small would have it
    journal.sent(p, out)
    back = crash_and_recover(tmp_path)
    assert [(values_of(b.entries), b.sequence_id) for b in back.batches] == [
        ([b"1", b"2"], 0),
        ([b"3", b"4"], 2),
    ]


def test_a_restart_reads_what_was_left_numbers_after_it_and_drops_it_once_copied(
    tmp_path: Path,
) -> None:
    journal, p = one_producer(tmp_path)
    add(p, b"left")
    journal.sync()
    again, recovered = start(tmp_path)  # the first process was killed
    assert [values_of(b.entries) for b in recovered.batches] == [[b"left"]]
    q = producer()
    again.producer_added(q, "t", 0)
    q.replay(SealedBatch(count=1, payload=recovered.batches[0].entries, buffer_bytes=1))
    again.touched(q)
    again.drop_previous()
    assert len(list(tmp_path.glob("journal-*.log"))) == 1
    back = crash_and_recover(tmp_path)
    assert [values_of(b.entries) for b in back.batches] == [[b"left"]]
    assert q.queue.take_queued() == ()  # the journal took it
    items = {jr.recover([path.read_bytes()]).last_item for path in tmp_path.glob("journal-*")}
    assert items == {recovered.last_item + 1}


def test_clean_close_deletes_the_journal(tmp_path: Path) -> None:
    journal, p = one_producer(tmp_path)
    add(p, b"x")
    journal.sync()
    journal.close()
    assert list(tmp_path.glob("journal-*")) == []


@pytest.mark.parametrize(
    ("damage", "lost"),
    [
        ("torn_tail", 2),  # the last record cut short: its two messages are counted
        ("flipped_piece", 2),
        ("zero_length", 0),
    ],
)
def test_damage_is_skipped_and_counted(tmp_path: Path, damage: str, lost: int) -> None:
    journal, p = one_producer(tmp_path)
    add(p, b"kept1", b"kept2")
    journal.sync()
    add(p, b"gone1", b"gone2")
    journal.sync()
    path = tmp_path / journal_name(0)
    data = bytearray(path.read_bytes())
    if damage == "torn_tail":
        path.write_bytes(data[:-3])
    elif damage == "flipped_piece":
        data[-2] ^= 0xFF
        path.write_bytes(bytes(data))
    else:
        path.write_bytes(b"")
    _, recovered = start(tmp_path)
    assert recovered.lost_messages == lost
    expected = [] if damage == "zero_length" else [[b"kept1", b"kept2"]]
    assert [values_of(b.entries) for b in recovered.batches] == expected


def test_a_directory_named_like_a_segment_is_left_alone(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    (tmp_path / journal_name(7)).mkdir()
    journal, recovered = start(tmp_path)
    assert recovered.messages == 0
    assert "left alone" in caplog.text
    journal.drop_previous()
    assert (tmp_path / journal_name(7)).is_dir()


def test_a_failed_write_is_retried_with_the_next_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    journal, p = one_producer(tmp_path)
    real_write = os.write
    failures = iter([True])

    def full_disk(fd: int, data: Any) -> int:
        if next(failures, False):
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_write(fd, data)

    monkeypatch.setattr(journal_files.os, "write", full_disk)
    add(p, b"first")
    journal.sync()  # fails: kept
    add(p, b"second")
    journal.sync()
    back = crash_and_recover(tmp_path)
    assert [values_of(b.entries) for b in back.batches] == [[b"first", b"second"]]
    assert journal.stopped is None
