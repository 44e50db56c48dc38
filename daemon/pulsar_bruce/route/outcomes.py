"""Where every message's end is recorded: the ledger, stream confirmations, evidence.

:class:`TopicDelivery` is the producer layer's :class:`DeliveryListener` for one
topic.  Evidence (the optional discard log) and batch observations (metrics
histograms) come in through small protocols, so this layer names neither.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Iterable
from typing import Protocol

from pulsar_bruce import reasons
from pulsar_bruce.model.batch import SealedBatch
from pulsar_bruce.model.confirmation import settle_tags
from pulsar_bruce.model.ledger import Ledger
from pulsar_bruce.route.topic import Topic

log = logging.getLogger(__name__)

REJECT_SAMPLES = 10
REJECT_SAMPLE_BYTES = 64


class Evidence(Protocol):
    """A record of each message given up or possibly duplicated (``--discard-log``)."""

    def datagram(self, reason: str, data: bytes, size: int | None = None) -> None: ...

    def batch(self, reason: str, topic: str, batch: SealedBatch) -> None: ...


class BatchObserver(Protocol):
    """Per-batch observations for metrics."""

    def batch_sent(self, messages: int) -> None: ...

    def receipt_latency(self, seconds: float) -> None: ...


class Outcomes:
    """Records acks and discards of buffered messages, and refusals at the door."""

    def __init__(
        self,
        ledger: Ledger,
        evidence: Evidence | None = None,
        observer: BatchObserver | None = None,
    ):
        self.ledger = ledger
        self.evidence = evidence
        self.observer = observer
        #: The last few rejected datagrams (reason, first bytes), for ``/status``.
        self.recent_rejects: deque[tuple[str, bytes]] = deque(maxlen=REJECT_SAMPLES)
        #: Broker topics whose producer name conflict has been logged (once each).
        self.name_conflicts_logged: set[str] = set()
        #: Batches acked or discarded since the pipeline last took them (:meth:`take_settled`):
        #: what the write-ahead journal records as settled.
        self.settled: list[SealedBatch] = []

    def for_topic(self, topic: Topic) -> TopicDelivery:
        return TopicDelivery(self, topic)

    def take_settled(self) -> list[SealedBatch]:
        """The batches settled since the last call (the pipeline hands them to the journal)."""
        settled = self.settled
        if not settled:
            return settled
        self.settled = []
        return settled

    def refused(self, reason: str, data: bytes, *, sample: bool, size: int | None = None) -> None:
        """Evidence of a message refused at the door (the ledger has counted it);
        ``size``: the whole record's, when ``data`` is only its first bytes."""
        if sample:
            self.recent_rejects.append((reason, data[:REJECT_SAMPLE_BYTES]))
        if self.evidence is not None:
            try:
                if size is None:
                    self.evidence.datagram(reason, data)
                else:
                    self.evidence.datagram(reason, data, size)
            except Exception:  # evidence is best effort; the accounting is not
                log.exception("discard log: cannot write a %s datagram", reason)

    def acked(self, topic: Topic, batch: SealedBatch) -> None:
        if batch.tags:
            settle_tags(batch.tags, None)
        self.ledger.ack(topic.stats, batch.count, batch.buffer_bytes)
        self.settled.append(batch)

    def already_stored(self, topic: Topic, batch: SealedBatch) -> None:
        """Sender-numbered messages the broker had before (an earlier attempt stored them)."""
        if batch.tags:
            settle_tags(batch.tags, None)
        self.ledger.stored_before(topic.stats, batch.count, batch.buffer_bytes)

    def discarded(self, topic: Topic, batch: SealedBatch, reason: str) -> None:
        self.ledger.discard(reason, batch.count, batch.buffer_bytes, topic.stats)
        self.settled.append(batch)
        if batch.tags:
            settle_tags(batch.tags, reason)
        self.batch_evidence(reason, topic, batch)

    def batch_evidence(self, reason: str, topic: Topic, batch: SealedBatch) -> None:
        if self.evidence is not None:
            try:
                self.evidence.batch(reason, topic.name, batch)
            except Exception:  # evidence is best effort; the accounting above is not
                log.exception("discard log: cannot write the batch of %s", topic.name)

    # -- giving up what waits ---------------------------------------------------------------

    def discard_waiting(self, topic: Topic, reason: str) -> int:
        """Give up the messages waiting for ``topic``'s partition count; returns how many."""
        total = 0
        batches, messages = topic.take_waiting()
        for _partition, batch in batches:
            self.discarded(topic, batch, reason)
            total += batch.count
        for message in messages:
            self.ledger.discard(reason, 1, message.charge, topic.stats)
            if message.confirmation is not None:
                message.confirmation.settle(1, reason)
            self.refused(reason, message.data, sample=False)
            total += 1
        return total

    def discard_everything(self, topics: Iterable[Topic], reason: str) -> int:
        """Shutdown: give up every buffered message (as ``unconfirmed`` what had been written
        to a broker: it may be stored); returns how many."""
        total = 0
        for topic in topics:
            for producer in [*topic.owned_producers(), *topic.sequenced]:
                for batch in producer.take_all():
                    self.discarded(topic, batch, reasons.given_up(reason, batch))
                    total += batch.count
            total += self.discard_waiting(topic, reason)
        return total


class TopicDelivery:
    """The :class:`~pulsar_bruce.producer.delivery.DeliveryListener` of one topic."""

    __slots__ = ("outcomes", "topic")

    def __init__(self, outcomes: Outcomes, topic: Topic):
        self.outcomes = outcomes
        self.topic = topic

    def batches_sent(self, batches: list[SealedBatch], resent_messages: int) -> None:
        outcomes = self.outcomes
        outcomes.ledger.sent(len(batches), resent_messages)
        observer = outcomes.observer
        for batch in batches:
            if batch.send_attempts == 1:
                if observer is not None:
                    observer.batch_sent(batch.count)
            elif outcomes.evidence is not None:
                outcomes.batch_evidence("possible_duplicate", self.topic, batch)

    def batches_possibly_stored(self, batches: list[SealedBatch]) -> None:
        outcomes = self.outcomes
        outcomes.ledger.possible_duplicate(sum(batch.count for batch in batches))
        if outcomes.evidence is not None:
            for batch in batches:
                outcomes.batch_evidence("possible_duplicate", self.topic, batch)

    def batch_acked(self, batch: SealedBatch, latency_s: float) -> None:
        self.outcomes.acked(self.topic, batch)
        if self.outcomes.observer is not None:
            self.outcomes.observer.receipt_latency(latency_s)

    def batch_discarded(self, batch: SealedBatch, reason: str) -> None:
        self.outcomes.discarded(self.topic, batch, reason)

    def batch_already_stored(self, batch: SealedBatch) -> None:
        self.outcomes.already_stored(self.topic, batch)

    def producer_name_conflict(self, broker_topic: str, name: str) -> None:
        """Counted every time; logged once per broker topic, with the remedy."""
        self.topic.count_name_conflict()
        logged = self.outcomes.name_conflicts_logged
        if broker_topic not in logged:
            logged.add(broker_topic)
            log.error(
                "%s refuses our producer name %r (ProducerBusy): another producer already "
                "uses it there, most likely another pulsar-bruce with the same "
                "--producer-name-prefix, host name and --socket; give each daemon its own "
                "--producer-name-prefix. "
                "Retrying with backoff (pulsar_bruce_producer_name_conflicts_total counts these)",
                broker_topic,
                name,
            )
