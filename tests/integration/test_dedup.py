"""Broker deduplication end to end: a batch stored before a restart is not stored twice.

The fake broker models the Java broker's deduplication (``tests/support/fake_dedup.py``,
modelled on pulsar-broker ``MessageDeduplication.isDuplicate``: per registered producer
name, a batch whose ``sequence_id`` is at most the highest id persisted is a duplicate,
acknowledged with a receipt for message id -1:-1 and not stored;
``getLastPublishedSequenceId`` is the ``last_sequence_id`` of ProducerSuccess).
pulsar-lite has no deduplication, hence the fake.

The scenario: the broker stores (persists) every batch but its receipts never arrive,
the daemon shuts down and keeps the unconfirmed batches in its spool, and a new
daemon with the same producer name prefix replays them.  The broker answers every
replay with a -1:-1 receipt: a duplicate of the daemon's own earlier copy (same
name, same ids), stored once by the first run, so the daemon counts it as acked.
The second daemon runs on the first one's paths: the producer name's socket hash
is that of the same socket, as for a restarted service.
"""

from __future__ import annotations

import uuid
from collections import Counter
from pathlib import Path

import pytest

from tests.support.fakebroker import FakeBroker
from tests.support.processes import wait_for

pytestmark = pytest.mark.timeout(90)

VALUES = [b"m-%03d" % i for i in range(60)]


def nonzero(discarded: dict[str, int]) -> dict[str, int]:
    return {reason: count for reason, count in discarded.items() if count}


def run_restart(
    tmp_path: Path, start_daemon, prefix_after: str, deduplicated: bool
) -> tuple[FakeBroker, str]:
    """``deduplicated``: the broker takes every replay for a duplicate (same producer name)
    and answers message id -1:-1: our earlier copy is stored, so each counts as acked."""
    broker = FakeBroker(deduplication=True).start()
    topic = f"dedup-{uuid.uuid4().hex[:8]}"
    spool = str(tmp_path / "spool")
    common = ("--spool-dir", spool, "--batch-max-messages", "10", "--batch-max-delay-ms", "5")
    first = start_daemon(
        broker.url, *common, "--producer-name-prefix", "edge", "--shutdown-timeout-s", "1"
    )
    broker.swallow_receipts()  # stored, never confirmed
    with first.sender() as sender:
        for value in VALUES:
            sender.send(topic, value)
    wait_for(lambda: len(broker.messages()) == len(VALUES), 30, "every message stored")
    assert first.terminate() == 0
    assert "kept in the spool" in first.log()
    broker.release_receipts()

    second = start_daemon(
        broker.url, *common, "--producer-name-prefix", prefix_after, restart_of=first
    )
    counters = second.wait_settled(len(VALUES))
    assert counters.identity_holds()
    # Either way every message is stored once: by the first run (the replay's receipts are
    # for message id -1:-1, a duplicate of our own copy) or by the replay.
    assert (counters.acked, nonzero(counters.discarded)) == (len(VALUES), {})
    assert counters.possible_duplicates == len(VALUES)  # the daemon cannot know; the broker does
    return broker, topic


def test_replayed_batches_keep_their_producer_name_and_sequence_ids(
    tmp_path: Path, start_daemon
) -> None:
    broker, _topic = run_restart(tmp_path, start_daemon, "edge", deduplicated=True)
    try:
        assert broker.values() == VALUES  # each stored once, in order
        replays = [s for s in broker.sends() if s.receipt == "duplicate"]
        first_run = [s for s in broker.sends() if s.receipt == "swallowed"]
        assert [(s.producer_name, s.sequence_id, s.values) for s in replays] == [
            (s.producer_name, s.sequence_id, s.values) for s in first_run
        ]
    finally:
        broker.stop()


def test_new_messages_after_the_replay_are_not_taken_for_duplicates(
    tmp_path: Path, start_daemon
) -> None:
    broker, topic = run_restart(tmp_path, start_daemon, "edge", deduplicated=True)
    try:
        sends_before = len(broker.sends())
        # a third daemon, same name: its sequence ids continue after the broker's last one
        third = start_daemon(broker.url, "--producer-name-prefix", "edge")
        with third.sender() as sender:
            sender.send(topic, b"fresh")
        assert third.wait_settled(1).acked == 1
        assert broker.values() == [*VALUES, b"fresh"]
        assert all(s.receipt == "sent" for s in broker.sends()[sends_before:])
    finally:
        broker.stop()


def test_under_another_producer_name_the_replay_is_stored_again(
    tmp_path: Path, start_daemon
) -> None:
    """The dedup state belongs to a producer name: change the prefix and the guarantee is gone
    (the daemon numbers the replayed batches afresh; nothing is lost)."""
    broker, _topic = run_restart(tmp_path, start_daemon, "other", deduplicated=False)
    try:
        assert Counter(broker.values()) == Counter({value: 2 for value in VALUES})
    finally:
        broker.stop()
