"""The asyncio edge of one partition producer: connect, register, write, match receipts.

Lifecycle (like pulsar-client-go's ``producer_partition.go``): look the
partition up, get the shared connection to its broker, create the producer
(passing back the broker-assigned name on re-creation), write every pending
batch in order, then wait until the connection is lost or the broker closes
the producer, and start over after an exponential backoff.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time

from pulsar_bruce import reasons
from pulsar_bruce.connection.broker_connection import (
    BrokerConnection,
    ConnectionClosedError,
    ServerError,
)
from pulsar_bruce.connection.pool import ConnectionPool, TopicLookupError
from pulsar_bruce.frame import commands
from pulsar_bruce.frame import pulsar_api_pb2 as pb
from pulsar_bruce.frame.codec import FrameError, decode_frame_body
from pulsar_bruce.producer.backoff import Backoff
from pulsar_bruce.producer.delivery import DeliveryListener, DeliveryPolicy
from pulsar_bruce.producer.faults import error_name, is_permanent
from pulsar_bruce.producer.partition_producer import PartitionProducer, ReceiptMatch

log = logging.getLogger(__name__)


class ProducerDriver:
    """Keeps one :class:`PartitionProducer` connected and its batches moving."""

    def __init__(
        self,
        producer: PartitionProducer,
        pool: ConnectionPool,
        listener: DeliveryListener,
        delivery: DeliveryPolicy | None = None,
    ):
        self.producer = producer
        self.pool = pool
        self.listener = listener
        self.connection: BrokerConnection | None = None
        self._lost = asyncio.Event()
        self._linger: asyncio.TimerHandle | None = None
        self._receipt_check: asyncio.TimerHandle | None = None
        self._epoch = 0
        self.delivery = delivery or DeliveryPolicy()
        self.receipt_timeout_s = self.delivery.receipt_timeout_s
        self._expiry_check: asyncio.TimerHandle | None = None
        #: Set while the broker refuses this producer for good (a ServerError name).
        self.rejected: str | None = None
        self._task: asyncio.Task[None] | None = None
        self._backoff = Backoff()
        self._loop = asyncio.get_running_loop()

    # -- lifecycle ------------------------------------------------------------------

    def start(self) -> None:
        self._task = self._loop.create_task(self._run(), name=f"producer {self.producer.topic}")

    async def stop(self) -> None:
        if self._linger is not None:
            self._linger.cancel()
        if self._receipt_check is not None:
            self._receipt_check.cancel()
        if self._expiry_check is not None:
            self._expiry_check.cancel()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        if self.connection is not None:
            self.connection.unregister_producer(self.producer.producer_id)
        self.producer.on_disconnected()

    async def _run(self) -> None:
        producer = self.producer
        while True:
            try:
                await self._connect()
            except (TopicLookupError, ServerError) as exc:
                if is_permanent(exc.error):
                    self._reject(error_name(exc.error), str(exc))
                elif exc.error == pb.ProducerBusy and producer.name_is_ours and producer.name:
                    self.listener.producer_name_conflict(producer.topic, producer.name)
                delay = self._backoff.next_delay()
                log.warning(
                    "producer for %s not connected (%s); retrying in %.1f s",
                    producer.topic,
                    exc,
                    delay,
                )
                await asyncio.sleep(delay)
                continue
            except (TimeoutError, ConnectionClosedError, OSError) as exc:
                delay = self._backoff.next_delay()
                log.warning(
                    "producer for %s not connected (%s); retrying in %.1f s",
                    producer.topic,
                    exc or type(exc).__name__,
                    delay,
                )
                await asyncio.sleep(delay)
                continue
            await self._lost.wait()
            self._disconnect()
            delay = self._backoff.next_delay()
            log.info("producer for %s reconnecting in %.2f s", producer.topic, delay)
            await asyncio.sleep(delay)

    async def _connect(self) -> None:
        producer = self.producer
        address = await self.pool.lookup(producer.topic)
        connection = await self.pool.get(address)
        self._lost.clear()
        connection.register_producer(producer.producer_id, self)
        request_id = connection.next_request_id()
        try:
            response = await connection.request(
                request_id,
                commands.producer(
                    producer.topic,
                    producer.producer_id,
                    request_id,
                    producer.name,
                    self._epoch,
                    user_provided=producer.name_is_ours,
                ),
            )
        except BaseException:
            connection.unregister_producer(producer.producer_id)
            raise
        if self._lost.is_set():
            raise ConnectionClosedError("connection lost while creating the producer")
        success = response.producer_success
        producer.on_registered(
            success.producer_name, success.last_sequence_id, connection.core.max_message_size
        )
        self.connection = connection
        self._epoch += 1
        self._backoff.reset()
        if self.rejected is not None:
            log.info("%s accepts our producer again (was %s)", producer.topic, self.rejected)
            self.rejected = None
        log.info(
            "producer %s ready on %s for %s (%d batches pending)",
            success.producer_name,
            connection.address,
            producer.topic,
            len(producer.pending),
        )
        self.flush()

    def _disconnect(self) -> None:
        if self.connection is not None:
            self.connection.unregister_producer(self.producer.producer_id)
        self._mark_lost()

    # -- batches --------------------------------------------------------------------

    def arm_linger(self) -> None:
        if self._linger is None:
            self._linger = self._loop.call_later(
                self.producer.policy.max_delay_s, self._on_linger_expired
            )

    def _on_linger_expired(self) -> None:
        self._linger = None
        self.producer.seal()
        self.flush()

    def flush(self) -> None:
        """Write every sealed batch not yet written on the current connection."""
        self._stamp_new_batches()
        if self.rejected is not None:
            self._discard_all(reasons.BROKER_REJECTED)
            return
        connection = self.connection
        if connection is None or not self.producer.has_unsent:
            return
        out = self.producer.frames_to_send(
            time.time_ns() // 1_000_000,
            connection.core.max_message_size,
            self.delivery.max_send_attempts,
        )
        for batch, reason in out.rejected:
            log.warning(
                "%s: batch of %d messages discarded as %s (broker max message size %d)",
                self.producer.topic,
                batch.count,
                reason,
                connection.core.max_message_size,
            )
            self.listener.batch_discarded(batch, reason)
        now = time.monotonic()
        for batch in out.batches:
            batch.sent_at = now
        self.listener.batches_sent(out.batches, out.resent_messages)
        connection.writelines(out.frames)
        if self._receipt_check is None and self.producer.in_flight:
            self._receipt_check = self._loop.call_later(
                self.receipt_timeout_s, self._check_receipts
            )

    def _stamp_new_batches(self) -> None:
        """Give just-sealed batches their creation time; arm the send-timeout check."""
        pending = self.producer.pending
        if not pending or pending[-1].created_at:
            return
        now = time.monotonic()
        for index in range(len(pending) - 1, -1, -1):
            if pending[index].created_at:
                break
            pending[index].created_at = now
        timeout = self.delivery.send_timeout_s
        if timeout and self._expiry_check is None:
            self._expiry_check = self._loop.call_later(timeout, self._expire)

    def _expire(self) -> None:
        """Discard batches older than the send timeout, so a stuck topic cannot hide."""
        self._expiry_check = None
        timeout = self.delivery.send_timeout_s
        now = time.monotonic()
        expired = self.producer.expire(now - timeout)
        if expired:
            count = sum(batch.count for batch in expired)
            for batch in expired:
                self.listener.batch_discarded(batch, reasons.SEND_TIMEOUT)
            log.warning(
                "%s: %d messages not acked within %.0f s; discarded as send_timeout",
                self.producer.topic,
                count,
                timeout,
            )
        pending = self.producer.pending
        if pending:
            oldest = pending[0].created_at or now
            self._expiry_check = self._loop.call_later(
                max(oldest + timeout - now, 0.01), self._expire
            )

    def _reject(self, error: str, detail: str) -> None:
        """The broker refuses this producer for good: discard what waits, keep retrying."""
        if self.rejected is None:
            log.warning(
                "%s refused by the broker (%s); discarding its messages",
                self.producer.topic,
                detail,
            )
        self.rejected = error
        self._discard_all(reasons.BROKER_REJECTED)

    def _discard_all(self, reason: str) -> None:
        for batch in self.producer.take_all():
            self.listener.batch_discarded(batch, reason)

    def _check_receipts(self) -> None:
        """A receipt overdue by ``receipt_timeout_s`` means the connection is not trustworthy:
        drop it, so everything unconfirmed is resent (never left waiting forever)."""
        self._receipt_check = None
        producer = self.producer
        if not producer.in_flight or self.connection is None:
            return
        waited = time.monotonic() - producer.pending[0].sent_at
        if waited >= self.receipt_timeout_s:
            self.connection.abort(
                f"no receipt from {producer.topic} for {waited:.0f} s; resending unconfirmed"
            )
        else:
            self._receipt_check = self._loop.call_later(
                self.receipt_timeout_s - waited, self._check_receipts
            )

    # -- ProducerListener -------------------------------------------------------------

    def on_receipt(self, receipt: pb.CommandSendReceipt) -> None:
        match, batch = self.producer.on_receipt(receipt.sequence_id)
        if batch is not None:
            self.listener.batch_acked(batch, time.monotonic() - batch.sent_at)
        elif match is ReceiptMatch.MISMATCH and self.connection is not None:
            self.connection.abort(
                f"receipt for sequence id {receipt.sequence_id} of {self.producer.topic} "
                "matches no pending batch"
            )

    def on_send_error(self, error: pb.CommandSendError) -> None:
        """A permanent error rejects the batch it names; any error resends the rest afresh.

        ``ChecksumError``: if our own copy of the batch is corrupt it is discarded
        as ``broker_rejected``; if it is intact the corruption was on the way, resend.
        """
        name = error_name(error.error)
        rejected = None
        if is_permanent(error.error) or (
            error.error == pb.ChecksumError and not self._head_frame_intact(error.sequence_id)
        ):
            rejected = self.producer.reject_head(error.sequence_id)
        if rejected is not None:
            self.listener.batch_discarded(rejected, reasons.BROKER_REJECTED)
        log.warning(
            "send error on %s (sequence id %d): %s %s; %s",
            self.producer.topic,
            error.sequence_id,
            name,
            error.message,
            f"{rejected.count} messages discarded" if rejected else "will resend",
        )
        if self.connection is not None:
            self.connection.abort(f"{name}; resending the rest on a new connection")

    def _head_frame_intact(self, sequence_id: int) -> bool:
        pending = self.producer.pending
        if not pending or pending[0].sequence_id != sequence_id:
            return True
        try:
            decode_frame_body(pending[0].frame[4:])
        except FrameError:
            return False
        return True

    def on_close_producer(self) -> None:
        log.info("broker closed the producer for %s", self.producer.topic)
        self._mark_lost()

    def on_connection_lost(self) -> None:
        self._mark_lost()

    def _mark_lost(self) -> None:
        """Stop routing to and writing on this producer at once; ``_run`` reconnects."""
        self.connection = None
        self.producer.on_disconnected()
        self._lost.set()
