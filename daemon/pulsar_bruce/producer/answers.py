"""What the broker answers for our batches: receipts and send errors, for one producer.

A part of :class:`~pulsar_bruce.producer.driver.ProducerDriver` (its base class),
kept apart because it is the decision table of the producer's edge: which
receipt confirms which batch (``PartitionProducer.on_receipt``), when a receipt
confirms nothing stored (:func:`~.faults.unstored_reason`), and what each
``SendError`` does to the batch it names and to the producer.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from pulsar_bruce import reasons
from pulsar_bruce.frame import pulsar_api_pb2 as pb
from pulsar_bruce.model.batch import SealedBatch
from pulsar_bruce.producer.delivery import DeliveryListener, SendJournal
from pulsar_bruce.producer.faults import (
    answered_duplicate,
    count_failure,
    error_name,
    frame_intact,
    is_permanent,
    not_yet_known,
    unstored_reason,
)
from pulsar_bruce.producer.partition_producer import PartitionProducer, ReceiptMatch
from pulsar_bruce.producer.topic_size import halves_for_topic_limit, over_topic_limit

#: The driver's logger: these lines are the driver's to the operator.
log = logging.getLogger("pulsar_bruce.producer.driver")


class BrokerAnswers:
    """Receipt and send-error handling; the driver provides the state and the actions."""

    producer: PartitionProducer
    listener: DeliveryListener
    journal: SendJournal
    topic_batch_limit: int
    clock: Callable[[], float]
    _unstored_logged: set[str]

    def _recreate(self, reason: str, failed: SealedBatch | None = None) -> None:
        raise NotImplementedError

    def flush(self) -> None:
        raise NotImplementedError

    def _ride_out(self, reason: str) -> None:
        raise NotImplementedError

    def _confirmed(self) -> None:
        """A receipt confirmed a batch (the driver's backoff starts over)."""

    def on_receipt(self, receipt: pb.CommandSendReceipt) -> None:
        producer = self.producer
        match, batch = producer.on_receipt(receipt.sequence_id)
        self._journal_overtaken()
        if batch is None:
            if match is ReceiptMatch.MISMATCH:
                self._recreate(
                    f"receipt for sequence id {receipt.sequence_id} matches no pending batch",
                    producer.pending[0] if producer.in_flight else None,
                )
            elif producer.queue.refused:
                self.flush()  # the last answer a refused message in chunks waited for
            return
        self._confirmed()
        reason = unstored_reason(producer.topic, receipt, batch)
        if reason != reasons.BROKER_DROPPED and producer.exactly_once and answered_duplicate(
            receipt
        ):
            self.listener.batch_already_stored(batch)  # an earlier attempt's copy is stored
        elif reason is None:
            self.listener.batch_acked(batch, self.clock() - batch.sent_at)
        else:
            batch.refused(batch.frames)  # this write stored nothing; an earlier copy may be
            reason = reasons.given_up(reason, batch)
            self.listener.batch_discarded(batch, reason)
            level = logging.DEBUG if reason in self._unstored_logged else logging.WARNING
            self._unstored_logged.add(reason)
            log.log(level, "%s: receipt for message id -1:-1 (sequence id %d): %d messages not "
                    "stored, discarded as %s", producer.topic, receipt.sequence_id, batch.count,
                    reason)  # fmt: skip
        if producer.queue.refused:
            self.flush()  # the last answer a refused batch waited for: it goes again

    def on_send_error(self, error: pb.CommandSendError) -> None:
        """The broker failed the batch whose id range holds ``error.sequence_id``.

        The Java broker names a failed batch by its highest sequence id
        (``Producer.checkAndStartPublish``, ``MessagePublishContext.completed``);
        the write stored nothing (``SealedBatch.refused_writes``).

        - A permanent error, or a ``ChecksumError`` on a copy of ours that is
          corrupt, discards exactly that batch as ``broker_rejected``; other
          permanent errors concern the topic, so the producer is re-created and the
          broker's refusal of it discards the rest at once.
        - ``NotAllowed`` for the topic's size limit: the batch goes again in halves
          (:meth:`_fit_topic_limit`), the producer stays, like the Java client's
          ``recoverNotAllowedError``.
        - Any other error: the batch stored nothing, but the batches written after it
          may be stored (a topic un-fenced after a failed write takes the next ones), so
          it waits for their answers (``BatchQueue.refuse``) before it goes again.  A
          ``ChecksumError`` on an intact copy, or ``MessageDupUnknownException`` (a
          ``PersistenceError``) for ids no earlier write of ours took, leaves the
          producer as it is; ``MessageDupUnknownException`` for a batch an earlier write
          of which is still being persisted (a bookie slower than our timeouts) is not an
          attempt spent: the producer is re-created after a growing wait until the broker
          knows (:meth:`_ride_out`; the Java client reconnects, ``ClientCnx.handleSendError``);
          anything else re-creates the producer, and everything pending is resent.
        """
        producer = self.producer
        name = error_name(error.error)
        where = f"{producer.topic} (sequence id {error.sequence_id})"
        batch = producer.in_flight_batch(error.sequence_id)
        if batch is None and producer.queue.answered_refused(error.sequence_id, stored=False):
            self.flush()  # another chunk of a message already refused: maybe the last answer
            return
        if batch is None:
            if 0 <= error.sequence_id < producer.next_sequence_id:
                log.info("send error on %s: %s for a batch no longer pending", where, name)
                self.journal.settle_now()  # its give-up, before a crash could replay it
            else:
                self._recreate(f"{name} for sequence id {error.sequence_id}, never sent")
            return
        if error.error == pb.NotAllowedError and over_topic_limit(error.message):
            batch.refused(batch.frames)  # a chunk over the limit is refused at every write
            self._fit_topic_limit(batch)
            return
        batch.refused()  # a chunk: the write stored nothing once each of its chunks is refused
        if is_permanent(error.error) or (
            error.error == pb.ChecksumError and not frame_intact(batch.frame)
        ):
            producer.reject(error.sequence_id)
            self.listener.batch_discarded(batch, reasons.BROKER_REJECTED)
            log.warning(
                "send error on %s: %s %s; %d messages discarded as broker_rejected",
                where,
                name,
                error.message,
                batch.count,
            )
            if is_permanent(error.error) and error.error != pb.NotAllowedError:
                self._recreate(name)
            return
        producer.refuse(batch, [batch])  # this write stored nothing; later ones may be stored
        unknown = not_yet_known(error)
        if unknown and batch.may_be_stored:  # riding it out, it keeps its ids (for now)
            producer.queue.keep_journalled(batch)
            self._journal_overtaken()
            log.warning("send error on %s: %s %s; the broker is still persisting an earlier "
                        "write of it: will resend once it knows", where, name,
                        error.message)  # fmt: skip
            self._ride_out(name)
            return
        self.journal.refused(producer, batch)
        if unknown or error.error == pb.ChecksumError:
            count_failure(batch)
            log.warning("send error on %s: %s %s; will resend once the batches written after "
                        "it are answered", where, name, error.message)  # fmt: skip
            self.flush()
        else:
            log.warning("send error on %s: %s %s; will resend", where, name, error.message)
            self._recreate(name, batch)

    def producer_disconnected(self) -> None:
        """The producer's connection is gone: a batch lost unanswered with it may be stored."""
        self.producer.on_disconnected()
        self._journal_overtaken()

    def _journal_overtaken(self) -> None:
        """A refusal ridden out under its ids, an id above which may be stored now, is
        journalled as refused (a replay gives it new ids, as a possible duplicate): replayed
        under its ids after a crash, the broker would answer it -1:-1 as a duplicate of the
        later batch, and it would count stored."""
        producer = self.producer
        for batch in producer.queue.overtaken():
            self.journal.refused(producer, batch)

    def _fit_topic_limit(self, batch: SealedBatch) -> None:
        """The topic's own size limit refused ``batch``: it goes again in halves once the
        batches written after it are answered, later batches are kept below its size; a single
        message is discarded as ``too_large``."""
        producer = self.producer
        limit, halves = halves_for_topic_limit(batch)
        if limit < self.topic_batch_limit:
            self.topic_batch_limit = limit
            log.warning("%s refuses a batch of %d bytes (over the topic's maximum message "
                        "size); batches limited to %d bytes", producer.topic, 2 * limit,
                        limit)  # fmt: skip
        producer.limit_batch_bytes(self.topic_batch_limit)
        if not halves and batch.receipts + 1 < batch.frames:
            # A message in chunks whose later chunks are unanswered: the last one may be
            # stored, which records its id, so the batches refused before it must wait for
            # that answer too (resent under ids the broker holds, they are dropped unstored).
            producer.refuse(batch, [])
            self.journal.refused(producer, batch)
            log.warning("%s: a message over the topic's maximum message size is given up once "
                        "its other chunks are answered", producer.topic)  # fmt: skip
            self.flush()
            return
        if not halves:
            producer.reject(batch.sequence_id)
            reason = reasons.given_up(reasons.TOO_LARGE, batch)
            log.warning("%s: a message over the topic's maximum message size discarded as %s",
                        producer.topic, reason)  # fmt: skip
            self.listener.batch_discarded(batch, reason)
            return
        producer.refuse(batch, halves)
        self.journal.refused(producer, batch)
        self.flush()
