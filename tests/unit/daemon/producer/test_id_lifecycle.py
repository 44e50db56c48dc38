"""Sequence ids across splits, crashes and replays (issue 29): every message stored once.

Each test drives one producer, its journal and a broker with the Java broker's
deduplication (``lifecycle_rig.py``), then compares what the broker stored with
what the daemon counted, message by message.
"""

from __future__ import annotations

from pathlib import Path

from tests.support.fake_dedup import Publish
from tests.unit.daemon.producer.lifecycle_rig import NAME, TOPIC, Broker, Outcomes, Process

VALUE = 200  # bytes per message value


def value(n: int) -> bytes:
    return b"m%05d" % n + b"." * (VALUE - 6)


def stored_once(outcomes: Outcomes, broker: Broker, count: int) -> None:
    """Messages 0..count-1: each stored exactly once, and acked only if stored."""
    wanted = [value(n) for n in range(count)]
    assert {v: broker.stored[v] for v in wanted if broker.stored[v] != 1} == {}
    assert not [v for v in outcomes.acked if not broker.stored[v]]
    assert sum(outcomes.discarded.values()) == 0


def test_a_split_batch_replayed_after_a_crash_goes_in_id_order(tmp_path: Path) -> None:
    """Halves of a batch split at its first send are journalled after a batch numbered
    after them; the replay must still send the lower ids first (bug 1)."""
    outcomes, broker = Outcomes(), Broker()
    first = Process(tmp_path, outcomes, broker)
    first.add(*(value(n) for n in range(40)))
    first.seal()
    first.add(*(value(n) for n in range(40, 45)))
    first.seal()
    first.max_frame = 1024 + 5000  # 40 messages do not fit a frame: halves of 20
    first.connect()
    sends = [w.frame.command.send for w in broker.queue]
    assert [(send.sequence_id, send.num_messages) for send in sends] == [
        (0, 20), (20, 20), (40, 5)]  # fmt: skip
    first.crash().settle_all()
    stored_once(outcomes, broker, 45)


def test_a_batch_split_twice_is_settled_when_its_quarters_are_acked(tmp_path: Path) -> None:
    """A half split again before it is sent still replaces the journalled batch (bug 2)."""
    outcomes, broker = Outcomes(), Broker()
    first = Process(tmp_path, outcomes, broker)
    first.add(*(value(n) for n in range(100)))
    first.seal()
    first.max_frame = 1024 + 6000  # 100 messages: quarters of 25
    first.settle_all()
    assert broker.stored_ids == [(0, 24), (25, 49), (50, 74), (75, 99)]
    first.tick()  # the pipeline tells the journal what settled
    journal = first.journal
    assert journal is not None
    assert not journal._entries and not journal._replaces  # nothing held for what settled
    assert first.crash().recovered.messages == 0
    stored_once(outcomes, broker, 100)


def test_a_batch_cut_for_the_topic_size_limit_is_settled_by_its_halves(tmp_path: Path) -> None:
    """The topic's own size limit refuses a journalled batch; its halves replace it in the
    journal, so a crash after they are acked replays nothing (bug 2)."""
    outcomes, broker = Outcomes(), Broker()
    first = Process(tmp_path, outcomes, broker)
    first.add(*(value(n) for n in range(10)))
    first.seal()
    first.connect()
    broker.topic_limit = 1500  # 10 x 200 bytes refused, 5 fit
    first.settle_all()
    assert first.crash().recovered.messages == 0
    stored_once(outcomes, broker, 10)


def test_topic_size_halves_keep_each_messages_id(tmp_path: Path) -> None:
    """A batch cut for the topic's size limit goes again in halves under the ids its
    messages had (bug 4): the n-th message keeps id first + n."""
    outcomes, broker = Outcomes(), Broker()
    process = Process(tmp_path, outcomes, broker)
    process.add(*(value(n) for n in range(10)))
    process.seal()
    process.connect()
    broker.topic_limit = 1500
    process.settle_all()
    assert broker.stored_ids == [(0, 4), (5, 9)]
    stored_once(outcomes, broker, 10)


def test_topic_size_halves_behind_a_stored_batch_are_renumbered_or_discarded(
    tmp_path: Path,
) -> None:
    """A batch written after the refused one may be stored before the halves come back, and
    the broker would take their lower ids for duplicates: our own name's halves take new
    ids; a sender's (exactly once), whose ids are its own, are discarded as too_large."""
    for exactly_once in (False, True):
        outcomes, broker = Outcomes(), Broker()
        process = Process(tmp_path / str(exactly_once), outcomes, broker)
        if exactly_once:
            process.producer.publish_as(NAME, 0)
        process.add(*(value(n) for n in range(10)))
        process.seal()
        process.add(*(value(n) for n in range(10, 12)))
        process.seal()
        process.connect()
        broker.topic_limit = 1500
        process.settle_all()
        assert not [v for v in outcomes.acked if not broker.stored[v]]
        if exactly_once:
            assert broker.stored_ids == [(10, 11)]
            assert sorted(outcomes.discarded) == [value(n) for n in range(10)]
        else:
            assert broker.stored_ids == [(10, 11), (12, 16), (17, 21)]
            stored_once(outcomes, broker, 12)


def test_a_retry_sends_what_the_broker_has_pushed_and_lets_it_answer(tmp_path: Path) -> None:
    """A sender's retry registers while the first attempt's write of ids 0..9 is pushed but
    not persisted (``last_sequence_id`` 9), and that write then fails
    (``resetHighestSequenceIdPushed``): the retry sends 0..9 anyway and they are stored,
    never reported stored unsent (issue 29, point 5)."""
    outcomes, broker = Outcomes(), Broker()
    broker.dedup.written(Publish(TOPIC, NAME, 0, 9), slow=True)
    process = Process(tmp_path, outcomes, broker)
    process.producer.publish_as(NAME, 0)
    process.add(*(value(n) for n in range(10)))
    process.seal()
    process.connect()
    assert broker.last_sequence_id() == 9
    broker.dedup.reset_pushed()  # the first attempt's write failed
    process.settle_all()
    stored_once(outcomes, broker, 10)
