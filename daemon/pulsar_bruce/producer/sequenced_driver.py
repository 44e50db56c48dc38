"""The asyncio edge of a producer that publishes under a stream sender's name and ids.

It differs from :class:`~.driver.ProducerDriver` in its ends.  At its start,
the name may still be held on the broker by the producer of an earlier
attempt (``ProducerBusy``, pulsar-broker ``AbstractTopic.internalAddProducer``):
that is the normal case of a retried task, so it waits, with a short backoff,
instead of reporting a conflict.  At its end, once its sender is gone and its
batches are settled, it closes the producer on the broker (``CloseProducer``),
so that the next attempt, from this host or another, can take the name.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable

from pulsar_bruce.connection.broker_connection import ConnectionClosedError, ServerError
from pulsar_bruce.connection.pool import ConnectionPool
from pulsar_bruce.frame import commands
from pulsar_bruce.frame import pulsar_api_pb2 as pb
from pulsar_bruce.parse.deliver_at import epoch_ms
from pulsar_bruce.producer.delivery import DeliveryListener, DeliveryPolicy, SendJournal
from pulsar_bruce.producer.driver import ProducerDriver
from pulsar_bruce.producer.faults import Refusal, creation_refusal
from pulsar_bruce.producer.partition_producer import PartitionProducer

log = logging.getLogger(__name__)

#: The longest wait between tries while an earlier attempt's producer holds the name.
NAME_WAIT_MAX_S = 2.0
#: How often a retiring producer looks whether it is settled (send timeouts settle batches
#: without any broker answer to look after).
SETTLED_CHECK_S = 1.0


class SequencedDriver(ProducerDriver):
    """Keeps a sender-numbered producer connected; closes it when its sender is done."""

    _closing = False

    def __init__(
        self,
        producer: PartitionProducer,
        pool: ConnectionPool,
        listener: DeliveryListener,
        delivery: DeliveryPolicy | None = None,
        *,
        journal: SendJournal,
        clock: Callable[[], float] = time.monotonic,
        wall_ms: Callable[[], int] = epoch_ms,
    ):
        super().__init__(
            producer, pool, listener, delivery, journal=journal, clock=clock, wall_ms=wall_ms
        )
        #: The producer is closed on the broker: its topic manager may forget it.
        self.closed = False

    def retire(self) -> None:
        """The sender is gone: send what it left, then close the producer on the broker."""
        producer = self.producer
        producer.retire()
        producer.seal()
        self.flush()
        self._check_settled()

    def flush(self) -> None:
        super().flush()
        self._close_if_settled()

    def on_receipt(self, receipt: pb.CommandSendReceipt) -> None:
        super().on_receipt(receipt)
        self._close_if_settled()

    def on_send_error(self, error: pb.CommandSendError) -> None:
        super().on_send_error(error)
        self._close_if_settled()

    def _not_connected(self, exc: Exception) -> float:
        refusal, _ = creation_refusal(exc)
        if refusal is not Refusal.NAME_CONFLICT:
            return super()._not_connected(exc)
        delay = min(self._retry.next_delay(False), NAME_WAIT_MAX_S)
        log.info("%s: producer name %s is still held (an earlier attempt's producer); "
                 "trying again in %.1f s", self.producer.topic, self.producer.name,
                 delay)  # fmt: skip
        return delay

    def _check_settled(self) -> None:
        if self._closing:
            return
        self._close_if_settled()
        if not self._closing:
            self._loop.call_later(SETTLED_CHECK_S, self._check_settled)

    def _close_if_settled(self) -> None:
        producer = self.producer
        if producer.retiring and not self._closing and producer.buffered_messages == 0:
            self._closing = True
            self._loop.create_task(self._close(), name=f"closing producer {producer.name}")

    async def _close(self) -> None:
        """Close the producer on the broker (so its name is free), then stop driving it."""
        connection, producer = self.connection, self.producer
        await self.stop()
        if connection is not None and connection.is_usable:
            request_id = connection.next_request_id()
            with contextlib.suppress(ConnectionClosedError, ServerError, TimeoutError):
                await connection.request(
                    request_id,
                    commands.close_producer(producer.producer_id, request_id),
                    timeout=self.receipt_timeout_s,
                )
        log.debug("producer %s closed on %s", producer.name, producer.topic)
        self.closed = True
