"""How the producer layer reports what became of batches, without knowing who listens.

The route layer implements :class:`DeliveryListener` (one per topic) to keep
the ledger, confirmations and discard evidence; the producer layer only calls
it, so it never imports anything above itself.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from pulsar_bruce.model.batch import SealedBatch


class DeliveryListener(Protocol):
    """Outcomes of one topic's batches, reported once per batch."""

    def batches_sent(self, batches: list[SealedBatch], resent_messages: int) -> None:
        """``batches`` were written to a broker; ``resent_messages`` had been written before."""

    def batches_possibly_stored(self, batches: list[SealedBatch]) -> None:
        """``batches`` may be stored already under ids they no longer have (renumbered after
        another process used the producer name): their next write may store them twice."""

    def batch_acked(self, batch: SealedBatch, latency_s: float) -> None:
        """The broker confirmed ``batch``, ``latency_s`` after it was last written."""

    def batch_discarded(self, batch: SealedBatch, reason: str) -> None:
        """``batch`` is given up for ``reason``."""

    def batch_already_stored(self, batch: SealedBatch) -> None:
        """The broker had ``batch`` already, under its sender's producer name and ids."""

    def producer_name_conflict(self, broker_topic: str, name: str) -> None:
        """The broker refused our own producer ``name`` on ``broker_topic`` (``ProducerBusy``):
        another producer, most likely another daemon with the same prefix, holds it."""


class SendJournal(Protocol):
    """The drivers' one declared hook into the write-ahead journal, installed by the pipeline
    (``pipeline/journalling.py``'s ``JournalCalls``; ``NO_JOURNAL`` without a journal).  A
    hook, not something returned: a driver frames on timers and receipts, outside any drain,
    and a batch's ids must be journalled before its frame is written.  Only the producers the
    pipeline placed are journalled (not a sender's: ``exactly_once.py``)."""

    def sync_producer(self, producer: Any) -> None:
        """Journal what ``producer`` queued (before it is framed)."""

    def sent(self, producer: Any, out: Any) -> None:
        """Journal the sequence ids ``out``'s batches go under (before they are written);
        parts of a batch split (``Outgoing.split_from``) replace it."""

    def refused(self, producer: Any, batch: SealedBatch) -> None:
        """Journal, at once, that the broker refused ``batch``: a replay must not go under
        its ids, which a later batch's may cover (``refusals.py``)."""

    def settle_now(self) -> None:
        """Journal, at once, what has settled: the broker refused a write of a batch already
        given up (a send timeout), and if that was one chunk of a message whose last chunk
        is stored, which records its id, a replay after a crash (were the give-up not yet
        journalled) would go under that id: the last chunk dropped as a duplicate, the
        message counted acked, and no consumer able to put it together."""


@dataclass(frozen=True, slots=True)
class DeliveryPolicy:
    """How long and how often a batch is tried before it is given up."""

    #: A batch unconfirmed this long makes us drop the connection and resend.
    receipt_timeout_s: float = 30.0
    #: A batch not acked this long after it was sealed is given up (0: never, the default:
    #: a forwarder rides out a cluster that is slow to come back).
    send_timeout_s: float = 0.0
    #: A batch the broker failed this many times is not written again (0: no limit); see
    #: ``SealedBatch.failed_sends``.
    max_send_attempts: int = 10
    #: How long a partition may be away (an unload, a topic being loaded) before PartitionKey
    #: messages fail over from it; a failure to reach any broker fails them over at once.
    failover_grace_s: float = 10.0
