"""The journal stage of the pipeline: the write-ahead journal, or :data:`NO_JOURNAL`.

A message read is journalled (``spool/journal.py``) before it leaves the socket
and before its batch is framed; with ``--spool-dir`` unset or ``--no-spool-journal``
the stage is :class:`NoJournal`, whose every call returns at once.  Only the pipeline
calls it (``pipeline/journalling.py``): after a slab, before framing (the drivers'
hook) and on settle, with what the topic manager and the outcomes wrote down; it never
asks whether there is one.
"""

from __future__ import annotations

from typing import Protocol

from pulsar_bruce.model.batch import SealedBatch
from pulsar_bruce.producer.partition_producer import Outgoing, PartitionProducer
from pulsar_bruce.spool.journal_items import WaitingTopic
from pulsar_bruce.spool.journal_records import Recovered


class JournalStage(Protocol):
    """What the pipeline tells the journal (:class:`~.journal.Journal` has all of it)."""

    #: Whether a slab must stay on its socket until the stage has written it (the readers
    #: peek, and read on the event loop): True for the write-ahead journal only.
    @property
    def write_ahead(self) -> bool: ...

    def open(self) -> Recovered:
        """What an earlier run left unsettled, to be received again before anything new."""

    def drop_previous(self) -> None:
        """The earlier run's segments, once what they held is journalled again."""

    def close(self) -> None:
        """Clean shutdown: everything is acked, spooled or discarded."""

    def producer_added(self, producer: PartitionProducer, topic: str, partition: int) -> None:
        """A producer for ``topic``'s ``partition`` was created."""

    def topic_added(self, topic: WaitingTopic) -> None:
        """A topic was seen for the first time (its messages may wait for its partitions)."""

    def touched(self, producer: PartitionProducer) -> None:
        """``producer``'s open batch got its first message, or a batch was sealed."""

    def sync(self, consume: tuple[int, int] | None = None) -> None:
        """After a drain or a slab: write what it added (then take the slab off the socket)."""

    def sync_producer(self, producer: PartitionProducer) -> None:
        """Write what ``producer`` queued, before it is framed."""

    def sent(self, producer: PartitionProducer, out: Outgoing) -> None:
        """Write the sequence ids ``out``'s batches go under, before they are written (parts
        of a batch split replace it)."""

    def refused(self, producer: PartitionProducer, batch: SealedBatch) -> None:
        """Write that ``batch`` no longer holds its ids (the broker refused it)."""

    def settled(self, batch: SealedBatch) -> None:
        """``batch`` was acked or discarded."""

    def tick(self) -> None:
        """About once a second: record what settled meanwhile."""


class NoJournal:
    """The journal stage without a journal: a crash loses what memory holds (docs/delivery.md).
    The one null journal: the drivers get it too (``producer/delivery.py``'s ``SendJournal``)."""

    write_ahead = False

    def open(self) -> Recovered:
        return Recovered()

    def drop_previous(self) -> None:
        pass

    def close(self) -> None:
        pass

    def producer_added(self, producer: PartitionProducer, topic: str, partition: int) -> None:
        pass

    def topic_added(self, topic: WaitingTopic) -> None:
        pass

    def touched(self, producer: PartitionProducer) -> None:
        pass

    def sync(self, consume: tuple[int, int] | None = None) -> None:
        pass

    def sync_producer(self, producer: PartitionProducer) -> None:
        pass

    def sent(self, producer: PartitionProducer, out: Outgoing) -> None:
        pass

    def refused(self, producer: PartitionProducer, batch: SealedBatch) -> None:
        pass

    def settle_now(self) -> None:
        pass

    def settled(self, batch: SealedBatch) -> None:
        pass

    def tick(self) -> None:
        pass


#: The one :class:`NoJournal` (it holds nothing).
NO_JOURNAL = NoJournal()
