"""The paths a broker over BookKeeper opens (issue 36), each the shortest run of the lifecycle
model (``test_id_machine.py``) that ends in a message lost, stored twice or counted untrue
on the code before the fix.  The broker pushes and persists apart, refuses one Send while
it stores the next, and holds writes in a stalled bookie (``broker_model.py``)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from pulsar_bruce import reasons
from pulsar_bruce.frame.codec import DEFAULT_MAX_MESSAGE_SIZE

from tests.unit.daemon.producer.test_id_machine import FRAME_LIMITS, SettledMachine

UNLIMITED = 1 << 30


@pytest.fixture
def machine() -> Iterator[SettledMachine]:
    machine = SettledMachine()
    try:
        yield machine
        machine.check_settled()  # everything stored once, or discarded
    finally:
        machine.process.kill()


def start(
    machine: SettledMachine,
    *,
    exactly_once: bool = False,
    persistent: bool = True,
    topic_limit: int = UNLIMITED,
    max_attempts: int = 0,
) -> None:
    machine.mode(exactly_once, DEFAULT_MAX_MESSAGE_SIZE, topic_limit, persistent, max_attempts)
    machine.reconnect()


def test_a_senders_written_batch_straddling_what_another_attempt_stored_is_cut(
    machine: SettledMachine,
) -> None:
    """Point 1: a sender's batch of ids 0..14 is written and lost with the connection; the
    task's other attempt stores 0..9; the resend must not go whole (the broker would drop
    it as a duplicate of 0..9, and 10..14 with it)."""
    start(machine, exactly_once=True)
    machine.add(count=15, seal=True)
    machine.connection_lost(processed=0)
    machine.other_attempt_stores(count=10)
    machine.reconnect()
    machine.answer(answers=5)
    machine.nothing_stored_twice_or_counted_untrue()
    assert machine.broker.stored_ids == [(0, 9), (10, 14)]


def test_a_checksum_error_before_later_batches_are_stored_renumbers_the_batch(
    machine: SettledMachine,
) -> None:
    """Point 2: A fails its checksum on the way, B and C behind it are stored; A resent
    under its ids would be answered -1:-1 (B's push covers it) and counted stored."""
    start(machine)
    for _ in range(3):
        machine.add(count=1, seal=True)
    machine.corrupted_on_the_way()
    machine.answer(answers=2)
    machine.answer(answers=1)
    machine.nothing_stored_twice_or_counted_untrue()
    first = machine.sent[0]
    assert machine.broker.stored[first] == 1 and machine.broker.id_of[first] == 3
    assert not machine.outcomes.possibly_twice  # its one write was refused: not stored


def test_a_senders_batch_refused_before_a_stored_one_goes_back_to_the_sender(
    machine: SettledMachine,
) -> None:
    """Point 2, exactly once: the sender's ids are its own, so the batch is failed back."""
    start(machine, exactly_once=True)
    for _ in range(2):
        machine.add(count=1, seal=True)
    machine.corrupted_on_the_way()
    machine.answer(answers=1)
    machine.nothing_stored_twice_or_counted_untrue()
    assert machine.outcomes.reason == {machine.sent[0]: reasons.BROKER_REJECTED}


def test_a_receipt_for_a_message_dropped_on_a_non_persistent_topic_is_no_success(
    machine: SettledMachine,
) -> None:
    """Point 3: exactly once on a non-persistent topic: -1:-1 is a message dropped under
    load (``ServerCnx.handleSend``), not an earlier attempt's copy."""
    start(machine, exactly_once=True, persistent=False)
    machine.add(count=3, seal=True)
    machine.dropped_under_load()
    machine.daemon_reads(answers=1)
    assert set(machine.outcomes.reason.values()) == {reasons.BROKER_DROPPED}


def test_topic_size_halves_of_a_stored_batch_are_counted_stored(
    machine: SettledMachine,
) -> None:
    """Point 4: A is stored, its receipt lost with the connection; the topic's size limit
    is lowered; the resend is refused and goes in halves under A's ids, which the broker
    drops as duplicates of A: stored once, so acked (they were "deduplicated")."""
    start(machine)
    machine.add(count=10, seal=True)
    machine.broker_judges(sends=1)
    machine.bookie_persists(writes=1)
    machine.connection_lost(processed=0)
    machine.lower_topic_limit(limit=1400)
    machine.reconnect()
    while machine.broker.queue:
        machine.answer(answers=1)
    machine.nothing_stored_twice_or_counted_untrue()
    assert sorted(machine.outcomes.acked) == sorted(machine.sent)


def test_a_bookie_stalled_past_the_receipt_timeout_spends_no_attempts(
    machine: SettledMachine,
) -> None:
    """Point 5: the write is pushed and held by a stalled bookie; the receipt is overdue, the
    close goes unanswered, and every resend is answered ``MessageDupUnknown``: not an
    attempt spent, so the batch is not given up while the write lands later."""
    start(machine, max_attempts=3)
    machine.add(count=5, seal=True)
    machine.broker_judges(sends=1)
    machine.receipt_overdue()
    for _ in range(6):
        machine.reconnect()
        machine.broker_judges(sends=1)
        machine.daemon_reads(answers=1)
    assert not machine.outcomes.discarded
    machine.bookie_persists(writes=1)
    machine.reconnect()
    machine.broker_judges(sends=1)
    machine.daemon_reads(answers=1)
    assert sorted(machine.outcomes.acked) == sorted(machine.sent)


def test_a_batch_every_write_of_which_was_refused_is_not_unconfirmed(
    machine: SettledMachine,
) -> None:
    """Point 6: written once, failed (the topic fenced), then given up by the send timeout:
    nothing of it is stored, so it is ``send_timeout``, not ``unconfirmed``."""
    start(machine)
    machine.add(count=2, seal=True)
    machine.failed_write()
    machine.send_timeout()
    assert set(machine.outcomes.reason.values()) == {reasons.SEND_TIMEOUT}


def test_a_replayed_batch_that_may_be_stored_is_unconfirmed_when_given_up(
    machine: SettledMachine,
) -> None:
    """Point 6: stored, its receipt lost, the process killed; the replay (kept ids, no write
    in this run) given up by the send timeout may be stored: ``unconfirmed``."""
    start(machine)
    machine.add(count=2, seal=True)
    machine.broker_judges(sends=1)
    machine.bookie_persists(writes=1)
    machine.crash_and_replay(settles_recorded=True)
    machine.send_timeout()
    assert set(machine.outcomes.reason.values()) == {reasons.UNCONFIRMED}


def test_a_sender_into_a_small_topic_limit_sends_every_batch_in_halves(
    machine: SettledMachine,
) -> None:
    """Point 9: exactly once, two batches written, both over the topic's limit: no later id
    is stored, so both go again in halves, in id order, each message under its id."""
    start(machine, exactly_once=True, topic_limit=1400)
    machine.add(count=10, seal=True)
    machine.add(count=10, seal=True)
    while machine.broker.queue:
        machine.answer(answers=1)
    machine.nothing_stored_twice_or_counted_untrue()
    assert not machine.outcomes.discarded
    assert machine.broker.stored_ids == [(0, 4), (5, 9), (10, 14), (15, 19)]


def test_a_message_in_chunks_refused_on_one_chunk_waits_for_the_others(
    machine: SettledMachine,
) -> None:
    """Found by the model once it took chunked values: chunk 0 of a message fails its
    checksum, chunk 1 (the last, which deduplication records) is stored.  Resent at once
    under its id, the last chunk is a duplicate and the message is never whole, while the
    old chunk's receipt counted for the new copy: acked, never stored."""
    machine.mode(False, FRAME_LIMITS[0], UNLIMITED, True, 0)
    machine.reconnect()
    machine.add_large(seal=True)
    machine.corrupted_on_the_way()
    while machine.broker.queue:
        machine.answer(answers=1)
    machine.nothing_stored_twice_or_counted_untrue()
    (value,) = machine.sent
    assert machine.broker.stored[value] == 1 and machine.broker.id_of[value] == 1
