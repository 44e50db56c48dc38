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
from pulsar_bruce.metrics.registry import Metrics
from pulsar_bruce.producer.backoff import Backoff
from pulsar_bruce.producer.partition_producer import PartitionProducer, ReceiptMatch
from pulsar_bruce.route.forwarder import Forwarder
from pulsar_bruce.route.router import Topic

log = logging.getLogger(__name__)

#: SendError codes that no resend can cure: the batch is discarded as ``broker_rejected``.
PERMANENT_SEND_ERRORS = frozenset(
    {
        pb.NotAllowedError,
        pb.TopicTerminatedError,
        pb.ProducerFenced,
        pb.AuthorizationError,
        pb.AuthenticationError,
        pb.TopicNotFound,
        pb.IncompatibleSchema,
        pb.InvalidTopicName,
    }
)


class ProducerDriver:
    """Keeps one :class:`PartitionProducer` connected and its batches moving."""

    def __init__(
        self,
        producer: PartitionProducer,
        topic: Topic,
        pool: ConnectionPool,
        forwarder: Forwarder,
        metrics: Metrics,
        receipt_timeout_s: float = 30.0,
    ):
        self.producer = producer
        self.topic = topic
        self.pool = pool
        self.forwarder = forwarder
        self.metrics = metrics
        self.connection: BrokerConnection | None = None
        self._lost = asyncio.Event()
        self._linger: asyncio.TimerHandle | None = None
        self._receipt_check: asyncio.TimerHandle | None = None
        self._epoch = 0
        self.receipt_timeout_s = receipt_timeout_s
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
            except (
                TimeoutError,
                ConnectionClosedError,
                TopicLookupError,
                ServerError,
                OSError,
            ) as exc:
                delay = self._backoff.next_delay()
                log.warning(
                    "producer for %s not connected (%s); retrying in %.1f s",
                    producer.topic,
                    exc,
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
                    producer.topic, producer.producer_id, request_id, producer.name, self._epoch
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
        connection = self.connection
        if connection is None or not self.producer.has_unsent:
            return
        out = self.producer.frames_to_send(
            time.time_ns() // 1_000_000, connection.core.max_message_size
        )
        for batch in out.rejected:
            log.warning(
                "%s: batch of %d messages exceeds the broker's max message size %d; discarded",
                self.producer.topic,
                batch.count,
                connection.core.max_message_size,
            )
            self.forwarder.discard_batch(self.topic, batch, reasons.TOO_LARGE)
        stats = self.forwarder.stats
        stats.possible_duplicates += out.resent_messages
        stats.batches_sent += len(out.frames)
        now = time.monotonic()
        observe_batch = self.metrics.batch_messages.observe
        for batch in out.batches:
            batch.sent_at = now
            if batch.send_attempts == 1:
                observe_batch(batch.count)
        connection.writelines(out.frames)
        if self._receipt_check is None and self.producer.in_flight:
            self._receipt_check = self._loop.call_later(
                self.receipt_timeout_s, self._check_receipts
            )

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
            self.forwarder.on_acked(self.topic, batch)
            self.metrics.send_latency.observe(time.monotonic() - batch.sent_at)
        elif match is ReceiptMatch.MISMATCH and self.connection is not None:
            self.connection.abort(
                f"receipt for sequence id {receipt.sequence_id} of {self.producer.topic} "
                "matches no pending batch"
            )

    def on_send_error(self, error: pb.CommandSendError) -> None:
        """A permanent error rejects the batch it names; any error resends the rest afresh."""
        error_name = pb.ServerError.Name(error.error)
        rejected = None
        if error.error in PERMANENT_SEND_ERRORS:
            rejected = self.producer.reject_head(error.sequence_id)
        if rejected is not None:
            self.forwarder.discard_batch(self.topic, rejected, reasons.BROKER_REJECTED)
        log.warning(
            "send error on %s (sequence id %d): %s %s; %s",
            self.producer.topic,
            error.sequence_id,
            error_name,
            error.message,
            f"{rejected.count} messages discarded" if rejected else "will resend",
        )
        if self.connection is not None:
            self.connection.abort(f"{error_name}; resending the rest on a new connection")

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
