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
from pulsar_bruce.producer.delivery import DeliveryListener
from pulsar_bruce.producer.faults import (
    answered_duplicate,
    error_name,
    frame_intact,
    is_permanent,
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
    topic_batch_limit: int
    clock: Callable[[], float]
    _unstored_logged: set[str]

    def _recreate(self, reason: str, failed: SealedBatch | None = None) -> None:
        raise NotImplementedError

    def flush(self) -> None:
        raise NotImplementedError

    def on_receipt(self, receipt: pb.CommandSendReceipt) -> None:
        producer = self.producer
        match, batch = producer.on_receipt(receipt.sequence_id)
        reason = None if batch is None else unstored_reason(producer.topic, receipt, batch)
        if batch is not None and producer.exactly_once and answered_duplicate(receipt):
            self.listener.batch_already_stored(batch)  # an earlier attempt's copy is stored
        elif batch is not None and reason is None:
            self.listener.batch_acked(batch, self.clock() - batch.sent_at)
        elif batch is not None and reason is not None:
            self.listener.batch_discarded(batch, reason)
            level = logging.DEBUG if reason in self._unstored_logged else logging.WARNING
            self._unstored_logged.add(reason)
            log.log(level, "%s: receipt for message id -1:-1 (sequence id %d): %d messages not "
                    "stored, discarded as %s", producer.topic, receipt.sequence_id, batch.count,
                    reason)  # fmt: skip
        elif match is ReceiptMatch.MISMATCH:
            self._recreate(
                f"receipt for sequence id {receipt.sequence_id} matches no pending batch",
                producer.pending[0] if producer.in_flight else None,
            )

    def on_send_error(self, error: pb.CommandSendError) -> None:
        """The broker failed the batch whose id range holds ``error.sequence_id``.

        The Java broker names a failed batch by its highest sequence id
        (``Producer.checkAndStartPublish``, ``MessagePublishContext.completed``).
        A permanent error, or a ``ChecksumError`` on a copy of ours that is
        corrupt, discards exactly that batch as ``broker_rejected``; anything
        else re-creates the producer and resends.  ``NotAllowed`` (the batch is
        over the topic's size limit) leaves the producer as it is, like the
        Java client's ``recoverNotAllowedError``; other permanent errors concern
        the topic, so the producer is re-created and the broker's refusal of
        it discards the rest at once.
        """
        producer = self.producer
        name = error_name(error.error)
        where = f"{producer.topic} (sequence id {error.sequence_id})"
        batch = producer.in_flight_batch(error.sequence_id)
        if batch is None:
            if 0 <= error.sequence_id < producer.next_sequence_id:
                log.info("send error on %s: %s for a batch no longer pending", where, name)
            else:
                self._recreate(f"{name} for sequence id {error.sequence_id}, never sent")
            return
        if error.error == pb.NotAllowedError and over_topic_limit(error.message):
            self._fit_topic_limit(batch)
            return
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
        log.warning("send error on %s: %s %s; will resend", where, name, error.message)
        self._recreate(name, batch)

    def _fit_topic_limit(self, batch: SealedBatch) -> None:
        """The topic's own size limit refused ``batch``: resend it in halves, keep later
        batches below its size, or discard a single message as ``too_large``."""
        producer = self.producer
        limit, halves = halves_for_topic_limit(batch)
        if limit < self.topic_batch_limit:
            self.topic_batch_limit = limit
            log.warning("%s refuses a batch of %d bytes (over the topic's maximum message "
                        "size); batches limited to %d bytes", producer.topic, 2 * limit,
                        limit)  # fmt: skip
        producer.limit_batch_bytes(self.topic_batch_limit)
        if not producer.resend_in_halves(batch, halves):
            what = "batch written before others" if halves else "message"
            log.warning("%s: a %s over the topic's maximum message size discarded as "
                        "too_large", producer.topic, what)  # fmt: skip
            self.listener.batch_discarded(batch, reasons.TOO_LARGE)
            return
        self.flush()
