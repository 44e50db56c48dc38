"""Every call to the write-ahead journal, made by the pipeline: after a slab, before framing,
on settle.

The core writes down what happened and the pipeline hands it to the journal
(``spool/journal.py``, or ``NO_JOURNAL``): the topic manager's
:class:`~pulsar_bruce.topics.manager.TopicChanges` (topics and producers added,
producers whose batches changed) and the batches :class:`Outcomes` settled.

- after a slab, a drain or a spool replay: :meth:`JournalCalls.sync`, one write
  (before the slab leaves its socket, before a replay is committed);
- before framing: the drivers frame on timers and receipts as well as after a
  drain, so :class:`JournalCalls` is also their one declared hook
  (``producer/delivery.py``'s ``SendJournal``), installed through the topic
  manager: it brings the journal up to date, then journals what is framed and the
  ids it goes under, before its frame is written;
- on settle: :meth:`JournalCalls.tick`, about once a second.
"""

from __future__ import annotations

from pulsar_bruce.model.batch import SealedBatch
from pulsar_bruce.producer.partition_producer import Outgoing, PartitionProducer
from pulsar_bruce.route.outcomes import Outcomes
from pulsar_bruce.spool.journal_stage import JournalStage
from pulsar_bruce.topics.manager import TopicChanges, TopicManager


class JournalCalls:
    """The pipeline's calls to the journal, with what the core wrote down since the last."""

    def __init__(self, journal: JournalStage, changes: TopicChanges, outcomes: Outcomes):
        self.journal = journal
        #: What the topic manager did (it adds, this takes).
        self.changes = changes
        #: Where every batch ends; the batches it settled are taken from it.
        self.outcomes = outcomes

    def sync(self, consume: tuple[int, int] | None = None) -> None:
        """After a slab, a drain or a replay: what happened since, journalled in one write;
        then (``consume``: socket fd, datagrams peeked) the slab taken off its socket."""
        changes = self.changes  # (tested here: this runs after every slab)
        if changes.topics or changes.placed or changes.touched:
            self._tell()
        if self.outcomes.settled:
            self._tell_settled()
        self.journal.sync(consume)

    def tick(self) -> None:
        """About once a second: what happened meanwhile (timers, receipts, lookups), then
        what settled recorded and old segments freed."""
        self.sync()
        self.journal.tick()

    # -- the drivers' hook (``producer/delivery.py``'s ``SendJournal``) -------------------

    def sync_producer(self, producer: PartitionProducer) -> None:
        """Before ``producer`` frames: the journal brought up to date (a producer placed by a
        lookup, routed messages that waited), then what it queued journalled."""
        if self._tell():
            self.journal.sync()  # as a drain's sync would have, before anything is framed
        self.journal.sync_producer(producer)

    def sent(self, producer: PartitionProducer, out: Outgoing) -> None:
        """The ids ``out``'s batches go under, before their frames are written."""
        self.journal.sent(producer, out)

    def refused(self, producer: PartitionProducer, batch: SealedBatch) -> None:
        """``batch`` no longer holds its ids (the broker refused it): written at once."""
        self.journal.refused(producer, batch)

    def settle_now(self) -> None:
        """What has settled, written at once (``SendJournal.settle_now``)."""
        self.sync()

    # -- what happened ------------------------------------------------------------------------

    def _tell(self) -> bool:
        """The topic manager's changes to the journal; False when there were none."""
        changes = self.changes
        if not changes:
            return False
        journal = self.journal
        for topic in changes.topics:
            journal.topic_added(topic)
        for producer, topic_name, partition in changes.placed:
            journal.producer_added(producer, topic_name, partition)
        for producer in changes.touched:
            journal.touched(producer)
        changes.clear()
        return True

    def _tell_settled(self) -> None:
        journal = self.journal
        for batch in self.outcomes.take_settled():
            journal.settled(batch)


class JournalledWriter:
    """What a drain or a spool replay admitted: taken by the topic manager, journalled, then
    the batches that filled up written (the spooler's ``BatchWriter``)."""

    def __init__(self, manager: TopicManager, journal_calls: JournalCalls):
        self.manager = manager
        self.journal_calls = journal_calls

    def flush_dirty(self) -> None:
        self.manager.collect()
        self.journal_calls.sync()
        self.manager.flush_dirty()
