"""The intake's replay side: spooled datagrams and batches back into memory, and the
shutdown hand-over to the spool for the next start."""

from __future__ import annotations

from pathlib import Path

import pytest
from pulsar_bruce import reasons
from pulsar_bruce.producer.partition_producer import BatchPolicy
from pulsar_bruce.service.shutdown import forget_buffered, spool_records_of
from pulsar_bruce.spool import records
from pulsar_bruce.spool.records import SpooledBatch

from tests.unit.daemon.route.intake_harness import (
    TEN,
    FlakyStore,
    Harness,
    T,
    any_msg,
    bad_topic_datagram,
    batch_entries,
    charge_of,
    discarded,
    split_values,
)

# -- the spool -----------------------------------------------------------------------------------


def test_overflow_spills_in_order_and_replays_with_the_identity_intact(tmp_path: Path) -> None:
    h = Harness(buffer_max_bytes=300, spool_dir=tmp_path)
    assert h.store is not None
    h.send(any_msg(value=b"a" * 200))
    (producer,) = h.attach()
    h.send(any_msg(value=b"b" * 100))  # no room: to the spool, and the spool stays in charge
    h.send(any_msg(value=b"c"))  # would fit, but must queue behind "b"
    assert h.ledger.spooled_messages == 2 and h.policy.spilling
    assert h.store.is_empty  # held: written once per drain, not per message
    h.write_held()
    h.check()
    assert not h.store.is_empty
    h.ack_everything()
    h.tick()  # replays "b" (this run's: already received), up to half the memory cap
    assert h.ledger.spooled_messages == 1
    h.tick()  # and then "c"
    assert h.ledger.spooled_messages == 0 and h.ledger.received == 3
    assert producer.batch.count == 2
    sealed = producer.seal()
    assert sealed is not None
    assert split_values(sealed.payload) == [b"b" * 100, b"c"]
    h.tick()
    assert not h.policy.spilling  # drained: memory again
    h.send(any_msg(value=b"d"))
    assert h.ledger.spooled_messages == 0 and producer.batch.count == 1


def test_a_full_spool_means_buffer_full(tmp_path: Path) -> None:
    h = Harness(buffer_max_bytes=150, spool_dir=tmp_path, spool_max_bytes=10)
    h.send(any_msg(value=b"a" * 100))
    h.send(any_msg(value=b"b" * 100))
    assert discarded(h, reasons.BUFFER_FULL) == 1
    assert h.topic().stats.discarded == {reasons.BUFFER_FULL: 1}
    assert not h.policy.spilling


def test_a_failed_spool_write_discards_the_held_messages(tmp_path: Path) -> None:
    h = Harness(buffer_max_bytes=31, spool_dir=tmp_path)
    assert isinstance(h.store, FlakyStore)
    for _ in range(4):
        h.send(any_msg(value=TEN))
    h.store.fail_next = 1
    h.write_held()
    h.check()
    assert discarded(h, reasons.BUFFER_FULL) == 3
    assert (h.ledger.received, h.ledger.buffered_messages, h.ledger.spooled_messages) == (4, 1, 0)


def test_previous_run_datagrams_count_as_received_when_replayed() -> None:
    h = Harness()
    h.intake.replay_datagram(any_msg(), previous_run=True)
    h.check()
    assert h.ledger.received == 1 and h.ledger.buffered_messages == 1


def test_replayed_messages_are_not_rate_limited_again(tmp_path: Path) -> None:
    h = Harness(buffer_max_bytes=31, rate_budget=2, spool_dir=tmp_path)
    h.send(any_msg(value=TEN))
    h.send(any_msg(value=TEN))  # spilled, spending the rest of the budget
    assert h.topic().rate_budget == 0
    h.attach()
    h.ack_everything()
    h.tick()  # this run's datagram comes back
    h.intake.replay_datagram(any_msg(value=TEN), previous_run=True)
    h.check()
    assert discarded(h, reasons.RATE_LIMITED) == 0
    assert (h.ledger.received, h.ledger.buffered_messages, h.ledger.spooled_messages) == (3, 2, 0)


def test_a_replayed_datagram_over_its_topics_new_limit_is_too_large(tmp_path: Path) -> None:
    h = Harness(buffer_max_bytes=31, spool_dir=tmp_path)
    h.send(any_msg(value=TEN))
    h.send(any_msg(value=b"x" * 30))  # spilled
    h.topic().max_message_bytes = 40  # lowered by a reload meanwhile
    h.tick()  # writes it
    h.attach()
    h.ack_everything()
    h.tick()  # replays it
    assert discarded(h, reasons.TOO_LARGE) == 1
    assert h.topic().stats.discarded == {reasons.TOO_LARGE: 1}
    assert (h.ledger.received, h.ledger.buffered_messages, h.ledger.spooled_messages) == (2, 0, 0)


@pytest.mark.parametrize(
    ("datagram", "reason"),
    [(b"junk", reasons.MALFORMED), (bad_topic_datagram(), reasons.BAD_TOPIC)],
    ids=["malformed", "bad_topic"],
)
def test_a_bad_previous_run_datagram_is_discarded_when_replayed(
    datagram: bytes, reason: str
) -> None:
    h = Harness()
    h.intake.replay_datagram(datagram, previous_run=True)
    h.check()
    assert (h.ledger.received, discarded(h, reason)) == (1, 1)


def test_replayed_batches_wait_for_producers_then_go_to_their_partition() -> None:
    h = Harness()
    h.intake.replay_batch(SpooledBatch(T, 1, -1, 2, batch_entries(any_msg(), any_msg())))
    h.check()
    assert h.ledger.received == 2 and h.ledger.possible_duplicates == 0
    assert len(h.topic().unrouted_batches) == 1
    assert h.events.named("batch_opened") == h.events.named("batch_sealed") == []
    producers = h.attach(partitions=2)
    assert [len(p.pending) for p in producers] == [0, 1]
    assert h.events.named("batch_sealed") == [producers[1]]
    assert h.ack_everything() == 2
    assert h.ledger.buffered_bytes == 0


def test_a_replayed_batch_for_a_partition_gone_goes_to_any_partition() -> None:
    h = Harness()
    h.send(any_msg())
    (producer,) = h.attach(partitions=1)
    h.intake.replay_batch(SpooledBatch(T, 5, 10, 1, batch_entries(any_msg())))
    h.check()
    assert len(producer.pending) == 1
    assert h.ledger.possible_duplicates == 1  # it had been sent: the broker may have it


def test_a_replayed_batch_with_a_bad_topic_is_discarded() -> None:
    h = Harness()
    h.intake.replay_batch(SpooledBatch("bad topic", 0, -1, 3, b"entries"))
    h.check()
    assert (h.ledger.received, discarded(h, reasons.BAD_TOPIC)) == (3, 3)
    assert h.ledger.buffered_bytes == 0


# -- shutdown with a spool, and the next start ------------------------------------------------


def test_shutdown_keeps_everything_in_the_spool_for_the_next_start(tmp_path: Path) -> None:
    h = Harness(buffer_max_bytes=4 * 31, spool_dir=tmp_path, policy=BatchPolicy(max_messages=2))
    h.send(any_msg(value=b"first"))
    (producer,) = h.attach()
    for value in (b"second", b"third"):
        h.send(any_msg(value=value))
    producer.on_registered("p", -1)
    producer.frames_to_send(0)  # the first batch is framed and in flight
    h.send(any_msg("w", value=b"waiting"))  # its topic has no producers yet
    h.send(any_msg(value=b"spilled"))  # no room: to the spool
    assert h.ledger.spooled_messages == 1
    assert h.shutdown_to_spool()
    assert h.ledger.buffered_messages == h.ledger.spooled_messages == 5
    assert h.ledger.buffered_bytes == 0
    assert discarded(h, reasons.SHUTDOWN) == 0

    again = Harness(buffer_max_bytes=4 * 31, spool_dir=tmp_path)
    assert again.policy.spilling
    again.replay_all()
    assert again.ledger.received == again.ledger.acked == 5
    assert again.ledger.possible_duplicates == 2  # the batch that had been sent
    assert again.ledger.buffered_bytes == 0
    assert again.store is not None and again.store.is_empty


@pytest.mark.parametrize("stored_before", [True, False], ids=["may-be-stored", "never-sent"])
def test_a_batch_without_ids_that_may_be_stored_says_so_in_the_spool(
    tmp_path: Path, stored_before: bool
) -> None:
    """A batch renumbered after a refusal has no ids but may be stored under its old ones
    (``stored_before``, as ``BatchQueue.release`` leaves it): its spool record at shutdown
    keeps that, so its replay at the next start is a possible duplicate, as the journal's
    record makes it; a batch never sent is not."""
    h = Harness(buffer_max_bytes=4 * 31, spool_dir=tmp_path, policy=BatchPolicy(max_messages=2))
    h.send(any_msg(value=b"a"))
    (producer,) = h.attach()
    h.send(any_msg(value=b"b"))  # sealed: pending, no ids yet
    (batch,) = producer.pending
    assert batch.sequence_id < 0
    batch.stored_before = stored_before
    assert h.shutdown_to_spool()

    again = Harness(buffer_max_bytes=4 * 31, spool_dir=tmp_path)
    again.replay_all()
    assert again.ledger.received == again.ledger.acked == 2
    assert again.ledger.possible_duplicates == (2 if stored_before else 0)


def test_spool_records_of_describes_what_memory_holds() -> None:
    h = Harness(policy=BatchPolicy(max_messages=2))
    h.send(any_msg(value=b"a"))
    (producer,) = h.attach()
    h.send(any_msg(value=b"b"))
    h.send(any_msg(value=b"c"))
    h.send(any_msg("w", value=b"w"))
    front, count, charge = spool_records_of(list(h.registry))
    assert (count, charge) == (h.ledger.buffered_messages, h.ledger.buffered_bytes)
    assert (count, charge) == (4, 4 * charge_of(b"a"))
    found = list(records.iter_records(b"".join(front)))
    kinds = [kind for kind, _ in found]
    assert kinds == [records.BATCH, records.BATCH, records.DATAGRAM]
    batches = [records.decode_batch(body) for kind, body in found if kind == records.BATCH]
    assert [(b.topic, b.count) for b in batches] == [(T, 2), (T, 1)]
    assert split_values(batches[0].entries) == [b"a", b"b"]
    assert found[2][1] == any_msg("w", value=b"w")
    assert producer.batch.count == 0  # sealed, still in memory until forget_buffered
    forget_buffered(list(h.registry))
    assert h.in_memory() == (0, 0)
