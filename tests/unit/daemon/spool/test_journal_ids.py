"""The write-ahead journal's record of ids: a batch without ids that may be stored already,
old journals' way of saying so, the producers it leaves alone, and the parts that replace a
batch (the journal's own state for them is let go with it)."""

from __future__ import annotations

from pathlib import Path

import pytest
from pulsar_bruce.batch.batch_builder import BatchBuilder
from pulsar_bruce.producer.topic_size import halves_for_topic_limit
from pulsar_bruce.spool import journal_records as jr

from tests.unit.daemon.spool.test_journal import (
    add,
    crash_and_recover,
    keep_busy,
    one_producer,
    producer,
    start,
    stuck_and_busy,
)


def test_a_refused_batch_an_earlier_write_of_which_may_be_stored_keeps_that_mark(
    tmp_path: Path,
) -> None:
    """Refused, it goes under new ids; its replay after a crash is a possible duplicate, also
    once its records were copied forward (the mark went with them; it did not before)."""
    journal, stuck, busy = stuck_and_busy(tmp_path)
    (batch,) = stuck.pending
    batch.stored_before = True  # (an earlier run's write, say)
    batch.refused_writes += 1
    stuck.refuse(batch, [batch])
    journal.refused(stuck, batch)
    back = crash_and_recover(tmp_path)
    assert [(b.sequence_id, b.producer_name, b.stored_before) for b in back.batches] == [
        (-1, "", True)
    ]
    keep_busy(journal, busy)
    assert len(list(tmp_path.glob("journal-*.log"))) <= 4  # copied forward
    back = crash_and_recover(tmp_path)
    assert [(b.sequence_id, b.producer_name, b.stored_before) for b in back.batches] == [
        (-1, "", True)
    ]


@pytest.mark.parametrize("name", ["?", "P-host-abc123"])
def test_a_journal_from_before_the_flag_marks_it_with_a_name_without_ids(name: str) -> None:
    one = BatchBuilder()
    one.append(b"", 0, b"m", 0, 41)
    old = [
        jr.piece(7, 0, 1, b"t", 0, one.take()),
        jr.number(7, 12, 0, "P-host-abc123"),
        jr.number(7, -1, 0, name),  # refused, an earlier write of it may be stored
    ]
    (back,) = jr.recover([b"".join(old)]).batches
    assert (back.sequence_id, back.producer_name, back.stored_before) == (-1, "", True)
    flagged = [old[0], jr.number(7, -1, 0, "", stored_before=True)]
    assert jr.recover([b"".join(flagged)]).batches == [back]
    unmarked = [old[0], jr.number(7, -1, 0, "")]
    assert not jr.recover([b"".join(unmarked)]).batches[0].stored_before


def test_a_producer_it_was_not_told_of_is_not_journalled(tmp_path: Path) -> None:
    """A sender's producer (its ids are the sender's: ``exactly_once.py``) gets the same
    journal as the others, which leaves it alone."""
    journal, _ = start(tmp_path)
    sender = producer(5)
    add(sender, b"s")
    sender.seal()
    sender.on_registered("sender", -1)
    journal.sync_producer(sender)
    out = sender.frames_to_send(1)
    journal.sent(sender, out)
    sender.refuse(out.batches[0], [out.batches[0]])
    journal.refused(sender, out.batches[0])
    journal.sync()
    assert crash_and_recover(tmp_path).batches == []


def test_halves_that_never_go_are_forgotten_with_the_batch_they_replace(tmp_path: Path) -> None:
    """The topic's size limit refuses a batch; before its halves go, it is given up (its send
    timed out): the journal settles it and holds nothing for the halves."""
    journal, p = one_producer(tmp_path)
    add(p, b"1", b"2", b"3", b"4")
    p.seal()
    p.on_registered("P-host-abc123", -1)
    journal.sync_producer(p)
    out = p.frames_to_send(1)
    journal.sent(p, out)
    (batch,) = out.batches
    batch.created_at = 1.0
    _, halves = halves_for_topic_limit(batch)
    p.refuse(batch, halves)
    journal.refused(p, batch)
    assert p.expire(deadline=2.0) == [batch]
    journal.settled(batch)
    journal.tick()
    assert crash_and_recover(tmp_path).batches == []
    assert not journal._replaces  # (white-box: a part held here would never be let go)
