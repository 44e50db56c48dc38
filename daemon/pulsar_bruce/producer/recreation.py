"""Closing and re-creating one producer on its connection, which stays up.

A failed send, an overdue or a mismatched receipt, or a new schema (SIGHUP)
concerns one producer only: it is closed (``CloseProducer``) and created again
on the same connection with the next epoch, as the Java client re-creates just
the producer after a failed send (``ClientCnx.handleSendError``); the driver's
``_run`` does the creating.  A creation that timed out is closed on the broker
before the next attempt.
"""

from __future__ import annotations

import asyncio
import logging

from pulsar_bruce.connection.broker_connection import (
    BrokerConnection,
    ConnectionClosedError,
    ServerError,
)
from pulsar_bruce.frame import commands
from pulsar_bruce.model.batch import SealedBatch
from pulsar_bruce.producer.availability import Availability
from pulsar_bruce.producer.faults import count_failure
from pulsar_bruce.producer.partition_producer import PartitionProducer

#: The driver's log: these lines are part of its story.
log = logging.getLogger("pulsar_bruce.producer.driver")


class Recreation:
    """Re-creation of the driver's producer; the driver provides the state."""

    producer: PartitionProducer
    connection: BrokerConnection | None
    receipt_timeout_s: float
    availability: Availability
    #: Set once the connection or the producer is lost: ``_run`` starts over.
    _lost: asyncio.Event
    #: Why the producer is being closed and re-created on its connection (None: it is not).
    _recreating: str | None

    def _forget_producer(self, connection: BrokerConnection) -> None:
        """Creating the producer timed out, but the broker may still create it, and would then
        answer the next attempt with that one or ``ServiceNotReady`` (``ServerCnx.handleProducer``):
        close it first, as the Java (``ProducerImpl.connectionOpened``) and Go (``grabCnx``)
        clients do."""
        log.warning(
            "%s: producer creation timed out; closing it on the broker", self.producer.topic
        )
        connection.write(
            commands.close_producer(self.producer.producer_id, connection.next_request_id())
        )

    def redeclare(self) -> None:
        """Its schema changed (SIGHUP): re-created now (if connected), declaring the new one."""
        self._recreate(f"its schema is now {self.producer.policy.schema}")

    def _recreate(self, reason: str, failed: SealedBatch | None = None) -> None:
        """Close and re-create this producer on its connection; the connection stays up.
        ``failed``: the batch the broker failed, charged one of its ``--max-send-attempts``."""
        count_failure(failed)
        if self.connection is None or self._lost.is_set():
            return  # already being re-created or reconnected
        log.warning("%s: %s; re-creating the producer", self.producer.topic, reason)
        self._recreating = reason
        self.producer.pause()
        self.availability.away()  # the close may take receipt_timeout_s: the grace runs meanwhile
        self._lost.set()

    async def _close_producer(self) -> None:
        """Close our producer on the broker before re-creating it.

        The Java broker answers ``CloseProducer`` once every send already
        written has its receipt or error (``ServerCnx.handleCloseProducer``,
        ``Producer.close``), and those still count meanwhile: a batch still
        unanswered then was not taken (``PartitionProducer.on_closed``).  A broker that
        does not answer within ``receipt_timeout_s`` is not trusted with the
        connection any longer.
        """
        reason, self._recreating = self._recreating, None
        connection = self.connection
        if connection is None:
            return  # the connection went away meanwhile; a reconnect follows
        producer_id = self.producer.producer_id
        request_id = connection.next_request_id()
        try:
            await connection.request(
                request_id,
                commands.close_producer(producer_id, request_id),
                timeout=self.receipt_timeout_s,
            )
        except ConnectionClosedError:
            return
        except (TimeoutError, ServerError) as exc:
            connection.abort(
                f"closing the producer for {self.producer.topic} ({reason}) failed: "
                f"{exc or 'no answer'}"
            )
            return
        self.producer.on_closed()
