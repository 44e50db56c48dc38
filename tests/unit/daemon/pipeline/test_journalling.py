"""The pipeline's calls to the journal (``pipeline/journalling.py``): what the topic manager
and the outcomes wrote down reaches the journal at a sync, and before anything is framed
(a driver frames on timers, outside any drain)."""

from __future__ import annotations

from pathlib import Path

from pulsar_bruce.model.ledger import Ledger
from pulsar_bruce.pipeline.journalling import JournalCalls
from pulsar_bruce.producer.partition_producer import Outgoing
from pulsar_bruce.route.outcomes import Outcomes
from pulsar_bruce.route.topic import Topic
from pulsar_bruce.topics.manager import TopicChanges

from tests.unit.daemon.spool.test_journal import add, crash_and_recover, producer, start, values_of


def calls_at(directory: Path) -> tuple[JournalCalls, TopicChanges, Outcomes]:
    journal, _ = start(directory)
    changes, outcomes = TopicChanges(), Outcomes(Ledger())
    return JournalCalls(journal, changes, outcomes), changes, outcomes


def placed_and_sent(calls: JournalCalls, changes: TopicChanges, value: bytes) -> Outgoing:
    """A producer placed by a lookup, one message routed to it, sealed and framed (a linger
    timer's flush, outside any drain) through the drivers' hook."""
    p = producer(0)
    changes.placed.append((p, "t", 0))
    add(p, value)
    p.seal()
    calls.sync_producer(p)
    p.on_registered("P-host-abc123", -1)
    out = p.frames_to_send(1)
    calls.sent(p, out)
    return out


def test_a_sync_journals_what_the_manager_wrote_down(tmp_path: Path) -> None:
    calls, changes, _ = calls_at(tmp_path)
    p = producer(2)
    changes.placed.append((p, "t", 2))
    changes.touched.add(p)
    add(p, b"one", b"two")
    calls.sync()
    assert not changes  # taken
    back = crash_and_recover(tmp_path)
    assert [(b.topic, b.partition, b.count) for b in back.batches] == [("t", 2, 2)]


def test_a_producer_placed_outside_a_drain_is_journalled_before_it_frames(tmp_path: Path) -> None:
    """A lookup's answer places a producer and routes what waited; its driver may frame on a
    timer before the pipeline's next sync: the hook brings the journal up to date first."""
    calls, changes, _ = calls_at(tmp_path)
    placed_and_sent(calls, changes, b"waited")
    back = crash_and_recover(tmp_path)
    assert [(b.topic, b.count, b.sequence_id) for b in back.batches] == [("t", 1, 0)]
    assert values_of(back.batches[0].entries) == [b"waited"]


def test_what_settled_is_taken_from_the_outcomes_at_a_sync(tmp_path: Path) -> None:
    calls, changes, outcomes = calls_at(tmp_path)
    out = placed_and_sent(calls, changes, b"acked")
    outcomes.acked(Topic("t"), out.batches[0])
    assert crash_and_recover(tmp_path).messages == 1  # not told yet
    calls.sync()
    assert not outcomes.settled
    assert crash_and_recover(tmp_path).messages == 0
