"""Outcomes: acks and discards reach the ledger, stream confirmations, evidence and metrics."""

from __future__ import annotations

import logging

import pytest
from pulsar_bruce import reasons
from pulsar_bruce.batch.batch_builder import BatchBuilder
from pulsar_bruce.model.batch import SealedBatch
from pulsar_bruce.model.confirmation import Confirmation
from pulsar_bruce.model.ledger import Ledger, memory_charge
from pulsar_bruce.producer.partition_producer import BatchPolicy, PartitionProducer
from pulsar_bruce.route.outcomes import REJECT_SAMPLE_BYTES, REJECT_SAMPLES, Outcomes
from pulsar_bruce.route.topic import Topic, WaitingMessage

T = "persistent://public/default/t"
VALUE = b"value"
CHARGE = memory_charge(b"", len(VALUE))


class RecordingEvidence:
    """A discard log that remembers what it was asked to write."""

    def __init__(self) -> None:
        self.datagrams: list[tuple[str, bytes]] = []
        self.batches: list[tuple[str, str, SealedBatch]] = []

    def datagram(self, reason: str, data: bytes) -> None:
        self.datagrams.append((reason, data))

    def batch(self, reason: str, topic: str, batch: SealedBatch) -> None:
        self.batches.append((reason, topic, batch))


class BrokenEvidence:
    """A discard log on a disk that fails."""

    def datagram(self, reason: str, data: bytes) -> None:
        raise OSError(5, "Input/output error")

    def batch(self, reason: str, topic: str, batch: SealedBatch) -> None:
        raise RuntimeError("cannot encode")


class RecordingObserver:
    def __init__(self) -> None:
        self.sent: list[int] = []
        self.latencies: list[float] = []

    def batch_sent(self, messages: int) -> None:
        self.sent.append(messages)

    def receipt_latency(self, seconds: float) -> None:
        self.latencies.append(seconds)


class Setup:
    """A ledger, one topic and its delivery listener."""

    def __init__(
        self,
        evidence: RecordingEvidence | BrokenEvidence | None = None,
        observer: RecordingObserver | None = None,
    ) -> None:
        self.ledger = Ledger()
        self.outcomes = Outcomes(self.ledger, evidence, observer)
        self.topic = Topic(T)
        self.delivery = self.outcomes.for_topic(self.topic)

    def batch(self, *tags: Confirmation | None) -> SealedBatch:
        """A sealed batch of ``len(tags)`` messages, accepted through the ledger."""
        builder = BatchBuilder()
        for tag in tags:
            builder.append(b"", 0, VALUE, 0, CHARGE)
            if tag is not None or builder.tags is not None:
                builder.tag_last(tag)
            if tag is not None:
                tag.outstanding += 1
            self.ledger.accept(CHARGE)
        return builder.seal()

    def waiting(self, tag: Confirmation | None = None) -> None:
        """A message accepted before the topic's partition count was known."""
        self.ledger.accept(CHARGE)
        if tag is not None:
            tag.outstanding += 1
        self.topic.wait(WaitingMessage(b"", 0, VALUE, 0, -1, CHARGE, tag))

    def check(self) -> None:
        assert self.ledger.identity_holds()
        assert self.ledger.buffered_bytes == CHARGE * self.ledger.buffered_messages


def flush(settled: list[int], request_id: int) -> Confirmation:
    """A stream connection's confirmation whose flush request has arrived."""
    tag = Confirmation(lambda: settled.append(request_id))
    tag.request_id = request_id
    return tag


# -- acks --------------------------------------------------------------------------------------


def test_an_ack_settles_confirmations_and_reaches_the_ledger() -> None:
    settled: list[int] = []
    observer = RecordingObserver()
    s = Setup(observer=observer)
    first, second = flush(settled, 1), flush(settled, 2)
    batch = s.batch(first, None, first, second)
    s.delivery.batch_acked(batch, 0.25)
    s.check()
    assert (first.acked, first.outstanding, second.acked, second.outstanding) == (2, 0, 1, 0)
    assert sorted(settled) == [1, 2]
    assert (s.ledger.acked, s.ledger.buffered_messages, s.ledger.buffered_bytes) == (4, 0, 0)
    assert s.topic.stats.acked == 4
    assert observer.latencies == [0.25]


def test_a_confirmation_waits_for_all_its_batches() -> None:
    settled: list[int] = []
    s = Setup()
    tag = flush(settled, 7)
    one, two = s.batch(tag), s.batch(tag, tag)
    s.delivery.batch_acked(two, 0.0)
    assert settled == [] and tag.outstanding == 1
    s.delivery.batch_discarded(one, reasons.SEND_TIMEOUT)
    assert settled == [7]
    assert (tag.acked, tag.discarded) == (2, {reasons.SEND_TIMEOUT: 1})
    s.check()


def test_an_ack_of_datagrams_only() -> None:
    s = Setup()
    batch = s.batch(None, None)
    assert batch.tags is None
    s.delivery.batch_acked(batch, 0.0)  # no observer: nothing else to tell
    s.check()
    assert s.ledger.acked == 2


# -- discards ----------------------------------------------------------------------------------


def test_a_discard_settles_confirmations_counts_and_leaves_evidence() -> None:
    settled: list[int] = []
    evidence = RecordingEvidence()
    s = Setup(evidence=evidence)
    tag = flush(settled, 3)
    batch = s.batch(None, tag, tag)
    s.delivery.batch_discarded(batch, reasons.BROKER_REJECTED)
    s.check()
    assert (tag.outstanding, tag.acked, tag.discarded) == (0, 0, {reasons.BROKER_REJECTED: 2})
    assert settled == [3]
    assert s.ledger.discarded[reasons.BROKER_REJECTED] == 3
    assert s.topic.stats.discarded == {reasons.BROKER_REJECTED: 3}
    assert s.ledger.buffered_bytes == 0
    assert evidence.batches == [(reasons.BROKER_REJECTED, T, batch)]


def test_discard_waiting_gives_up_messages_and_spooled_batches() -> None:
    settled: list[int] = []
    evidence = RecordingEvidence()
    s = Setup(evidence=evidence)
    tag = flush(settled, 1)
    s.waiting(tag)
    s.waiting()
    spooled = s.batch(None, None, None)
    s.topic.wait_sealed(0, spooled)
    assert s.outcomes.discard_waiting(s.topic, reasons.BROKER_REJECTED) == 5
    s.check()
    assert (s.topic.unrouted, s.topic.unrouted_batches) == ([], [])
    assert s.ledger.buffered_messages == 0
    assert tag.discarded == {reasons.BROKER_REJECTED: 1} and settled == [1]
    assert s.topic.stats.discarded == {reasons.BROKER_REJECTED: 5}
    assert evidence.batches == [(reasons.BROKER_REJECTED, T, spooled)]
    assert evidence.datagrams == [(reasons.BROKER_REJECTED, VALUE)] * 2


def test_discard_everything_takes_open_and_pending_batches() -> None:
    s = Setup()
    producer = PartitionProducer(T, 0, 1, BatchPolicy())
    s.topic.attach([producer])
    producer.pending.append(s.batch(None, None))
    for _ in range(3):  # the open batch
        producer.batch.append(b"", 0, VALUE, 0, CHARGE)
        s.ledger.accept(CHARGE)
    s.waiting()
    other = Topic("persistent://public/default/other")
    assert s.outcomes.discard_everything([s.topic, other], reasons.SHUTDOWN) == 6
    s.check()
    assert s.ledger.discarded[reasons.SHUTDOWN] == 6
    assert (s.ledger.buffered_messages, s.ledger.buffered_bytes) == (0, 0)
    assert producer.buffered_messages == 0


# -- sent batches ----------------------------------------------------------------------------


def test_batches_sent_counts_batches_and_possible_duplicates() -> None:
    evidence, observer = RecordingEvidence(), RecordingObserver()
    s = Setup(evidence=evidence, observer=observer)
    new, again = s.batch(None, None), s.batch(None, None, None)
    new.send_attempts, again.send_attempts = 1, 2
    s.delivery.batches_sent([new, again], resent_messages=3)
    s.check()
    assert (s.ledger.batches_sent, s.ledger.possible_duplicates) == (2, 3)
    assert observer.sent == [2]  # only first sends are observed
    assert evidence.batches == [("possible_duplicate", T, again)]
    assert s.ledger.buffered_messages == 5  # nothing is settled by sending


def test_batches_sent_without_evidence_or_observer() -> None:
    s = Setup()
    batch = s.batch(None)
    batch.send_attempts = 2
    s.delivery.batches_sent([batch], resent_messages=1)
    assert (s.ledger.batches_sent, s.ledger.possible_duplicates) == (1, 1)


def test_batches_renumbered_after_a_write_are_possible_duplicates_with_evidence() -> None:
    evidence = RecordingEvidence()
    s = Setup(evidence=evidence)
    written, from_last_run = s.batch(None, None), s.batch(None)
    s.delivery.batches_possibly_stored([written, from_last_run])
    s.check()
    assert (s.ledger.batches_sent, s.ledger.possible_duplicates) == (0, 3)
    assert evidence.batches == [("possible_duplicate", T, written),
                                ("possible_duplicate", T, from_last_run)]  # fmt: skip
    assert s.ledger.buffered_messages == 3  # still to be sent and settled


# -- refusals at the door -----------------------------------------------------------------------


def test_refusals_are_sampled_for_status_and_kept_as_evidence() -> None:
    evidence = RecordingEvidence()
    s = Setup(evidence=evidence)
    s.outcomes.refused(reasons.MALFORMED, b"x" * 100, sample=True)
    s.outcomes.refused(reasons.RATE_LIMITED, b"y", sample=False)
    assert list(s.outcomes.recent_rejects) == [(reasons.MALFORMED, b"x" * REJECT_SAMPLE_BYTES)]
    assert evidence.datagrams == [(reasons.MALFORMED, b"x" * 100), (reasons.RATE_LIMITED, b"y")]
    for n in range(2 * REJECT_SAMPLES):
        s.outcomes.refused(reasons.BAD_TOPIC, bytes([n]), sample=True)
    assert len(s.outcomes.recent_rejects) == REJECT_SAMPLES
    assert s.outcomes.recent_rejects[-1] == (reasons.BAD_TOPIC, bytes([2 * REJECT_SAMPLES - 1]))


# -- evidence is best effort ------------------------------------------------------------------


def test_broken_evidence_cannot_break_the_accounting(caplog: pytest.LogCaptureFixture) -> None:
    settled: list[int] = []
    s = Setup(evidence=BrokenEvidence(), observer=RecordingObserver())
    tag = flush(settled, 1)
    with caplog.at_level(logging.ERROR):
        s.outcomes.refused(reasons.MALFORMED, b"junk", sample=True)
        discarded = s.batch(tag, None)
        s.delivery.batch_discarded(discarded, reasons.RETRIES_EXHAUSTED)
        resent = s.batch(None)
        resent.send_attempts = 2
        s.delivery.batches_sent([resent], resent_messages=1)
        s.waiting()
        s.outcomes.discard_waiting(s.topic, reasons.BROKER_REJECTED)
        s.delivery.batch_acked(resent, 0.1)
    s.check()
    assert s.ledger.discarded[reasons.RETRIES_EXHAUSTED] == 2
    assert s.ledger.discarded[reasons.BROKER_REJECTED] == 1
    assert (s.ledger.acked, s.ledger.possible_duplicates, s.ledger.buffered_messages) == (1, 1, 0)
    assert tag.discarded == {reasons.RETRIES_EXHAUSTED: 1} and settled == [1]
    assert list(s.outcomes.recent_rejects) == [(reasons.MALFORMED, b"junk")]
    messages = [record.getMessage() for record in caplog.records]
    assert len(messages) == 4 and all(m.startswith("discard log: cannot write") for m in messages)
