"""The asyncio edge of one partition producer: connect, register, write, match receipts.

Lifecycle (like pulsar-client-go's ``producer_partition.go``): look the
partition up, get the shared connection to its broker, create the producer
(passing back the broker-assigned name on re-creation), write every pending
batch in order, then wait until the connection is lost or the broker closes
the producer, and start over after an exponential backoff.  Where the broker
says where to go next, go there: a CloseProducer naming the assigned broker
is followed at once without a lookup; after a TopicMigrated, lookups go to
the new cluster's service URL.

A failed send, an overdue or a mismatched receipt concerns this producer only:
it is closed and re-created on the shared connection (``CloseProducer``, then
``Producer`` with the same name and the next epoch: ``recreation.py``), as the
Java client re-creates just the producer after a failed send
(``ClientCnx.handleSendError``); the other producers on that connection go on.
Only connection-level failures (I/O errors, keep-alive silence, bad framing) drop
the connection.

Retries stay short while the cluster answers (``backoff.Retry``), so a producer
is back within about a second of its bundle's new owner; whether its partition
counts as available for PartitionKey failover meanwhile is ``availability.py``'s.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable

from pulsar_bruce import reasons
from pulsar_bruce.connection.broker_connection import (
    BrokerConnection,
    ConnectionClosedError,
    ServerError,
)
from pulsar_bruce.connection.pool import BrokerAddress, ConnectionPool, TopicLookupError
from pulsar_bruce.frame import commands
from pulsar_bruce.parse.deliver_at import epoch_ms
from pulsar_bruce.producer.answers import BrokerAnswers
from pulsar_bruce.producer.availability import Availability
from pulsar_bruce.producer.backoff import Backoff, Retry
from pulsar_bruce.producer.delivery import DeliveryListener, DeliveryPolicy, SendJournal
from pulsar_bruce.producer.faults import (
    Refusal,
    answered,
    creation_refusal,
    error_name,
    one_line,
    refusal_reason,
    unreachable,
)
from pulsar_bruce.producer.partition_producer import PartitionProducer
from pulsar_bruce.producer.recreation import Recreation
from pulsar_bruce.producer.send_timeout import SendTimeout

log = logging.getLogger(__name__)


class ProducerDriver(Recreation, BrokerAnswers):
    """Keeps one :class:`PartitionProducer` connected and its batches moving."""

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
        self.producer = producer
        self.pool = pool
        self.listener = listener
        self.journal = journal
        #: Now, in seconds: when a batch was written, how long its receipt takes.
        self.clock = clock
        #: Now, in ms since the epoch: the publish time written into each batch's frame.
        self.wall_ms = wall_ms
        self.connection: BrokerConnection | None = None
        self._lost = asyncio.Event()
        self._linger: asyncio.TimerHandle | None = None
        self._receipt_check: asyncio.TimerHandle | None = None
        self._epoch = 0
        self._address: BrokerAddress | None = None
        #: From CloseProducer: the broker to reconnect to at once, without a lookup.
        self._assigned_url: str | None = None
        #: From TopicMigrated: the cluster whose service URL answers lookups from now on.
        self._cluster_url: str | None = None
        self.delivery = delivery or DeliveryPolicy()
        self.receipt_timeout_s = self.delivery.receipt_timeout_s
        #: Set while the broker refuses this producer for good (a ServerError name).
        self.rejected: str | None = None
        #: Why the producer is being closed and re-created on its connection (None: it is not).
        self._recreating: str | None = None
        self._task: asyncio.Task[None] | None = None
        #: Batch bytes at most, learnt from the topic's own size limit (see ``topic_size``).
        self.topic_batch_limit = 1 << 62
        #: The max-producers limit refused us and was logged (again after a success).
        self._at_limit = False
        #: Reasons of -1:-1 receipts already logged at warning level.
        self._unstored_logged: set[str] = set()
        self._retry = Retry()
        #: Re-creations that wait for the broker to persist an earlier write (``_ride_out``):
        #: their own growing delay, since each re-creation succeeds at once.
        self._not_yet_known = Backoff(initial_s=0.5, maximum_s=5.0)
        self._riding_out = False
        #: This attempt's lookup named the owner (a failure to reach it is the cluster's answer).
        self._owner_named = False
        #: This attempt reached the owner: a connection closed after that (an unload, a restart)
        #: is no sign that the partition cannot be reached.
        self._reached = False
        self._loop = asyncio.get_running_loop()
        self.availability = Availability(producer, self.delivery.failover_grace_s, self._loop)
        self.send_timeout = SendTimeout(
            producer,
            listener,
            self.delivery.send_timeout_s,
            self._loop,
            clock,
        )

    # -- lifecycle ------------------------------------------------------------------

    def start(self) -> None:
        self.availability.away()  # the first attempt gets the grace too
        self._task = self._loop.create_task(self._run(), name=f"producer {self.producer.topic}")

    async def stop(self) -> None:
        if self._linger is not None:
            self._linger.cancel()
        if self._receipt_check is not None:
            self._receipt_check.cancel()
        self.availability.stop()
        self.send_timeout.cancel()
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
            except (TopicLookupError, ServerError, TimeoutError, ConnectionClosedError,
                    OSError) as exc:  # fmt: skip
                await asyncio.sleep(self._not_connected(exc))
                continue
            await self._lost.wait()
            if self._recreating is not None:
                await self._close_producer()
            self._disconnect()
            delay = self._retry_delay()
            log.info("producer for %s reconnecting in %.2f s", producer.topic, delay)
            await asyncio.sleep(delay)

    def _not_connected(self, exc: Exception) -> float:
        """Act on a failed creation (:func:`creation_refusal`) and log it; the delay to wait.

        ProducerBusy for the topic's max-producers limit is no name conflict: logged once
        and retried.  A permanent refusal discards what waits (:meth:`_reject`).
        """
        producer = self.producer
        refusal, error = creation_refusal(exc)
        delay = self._retry.next_delay(answered(exc, self._owner_named))
        if refusal is Refusal.PERMANENT or (unreachable(exc) and not self._reached):
            self.availability.unreachable(f"{exc or type(exc).__name__}")
        else:
            self.availability.away()
        if refusal is Refusal.PERMANENT and self._reject(error_name(error), str(exc)):
            return delay  # our schema refused: its one line is said, retries are quiet
        elif refusal is Refusal.NAME_CONFLICT and producer.name_is_ours and producer.name:
            self.listener.producer_name_conflict(producer.topic, producer.name)
        elif refusal is Refusal.MAX_PRODUCERS:
            level = logging.DEBUG if self._at_limit else logging.WARNING
            self._at_limit = True
            log.log(level, "%s has reached its max producers limit on the broker (%s); "
                    "retrying with backoff", producer.topic, exc)  # fmt: skip
            return delay
        log.warning("producer for %s not connected (%s); retrying in %.1f s", producer.topic,
                    exc or type(exc).__name__, delay)  # fmt: skip
        return delay

    def _retry_delay(self) -> float:
        """After a lost connection or producer: no wait when the broker named where to go
        (the Java client reconnects at once), a growing one while the broker persists an
        earlier write (:meth:`_ride_out`), else a short one."""
        if self._assigned_url is not None:
            return 0.0
        riding_out, self._riding_out = self._riding_out, False
        if riding_out:
            return self._not_yet_known.next_delay()
        self._not_yet_known.reset()
        return self._retry.next_delay(True)

    def _confirmed(self) -> None:
        """A receipt: the producer works again, so the next failure is retried soon.  Not at
        registration: a broker that registers the producer and closes it again (a fenced
        topic while its bookie stalls) would have everything resent every 0.1 s."""
        self._retry.reset()
        self._not_yet_known.reset()

    def _ride_out(self, reason: str) -> None:
        """The broker cannot tell yet whether a resend is a duplicate: not an attempt spent
        (no ``--max-send-attempts``); re-created after a growing wait, until it can."""
        self._riding_out = True
        self._recreate(f"{reason} (an earlier write is still being persisted)")

    async def _connect(self) -> None:
        producer = self.producer
        assigned, self._assigned_url = self._assigned_url, None
        self._owner_named = self._reached = False
        if assigned is not None:
            address = self.pool.assigned_address(assigned, self._address)
        else:
            address = await self.pool.lookup(producer.topic, self._cluster_url)
        self._owner_named = True
        self._address = address
        connection = await self.pool.get(address)
        self._reached = True
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
                    schema=producer.policy.schema,
                    encrypted=producer.policy.encryptor is not None,
                ),
                producer_id=producer.producer_id,
            )
        except BaseException as exc:
            connection.unregister_producer(producer.producer_id)
            if isinstance(exc, TimeoutError):
                self._forget_producer(connection)
            raise
        if self._lost.is_set():
            raise ConnectionClosedError("connection lost while creating the producer")
        success = response.producer_success
        renumbered = producer.on_registered(
            success.producer_name,
            success.last_sequence_id,
            connection.core.max_message_size,
            success.schema_version,
        )
        if renumbered is not None:
            log.warning("%s: producer %s: the broker's last sequence id %d is above the %d we "
                        "assigned (another process used the name); %d batches renumbered, "
                        "resent as possible duplicates", producer.topic, success.producer_name,
                        renumbered.broker, renumbered.ours, renumbered.batches)  # fmt: skip
            if renumbered.possibly_stored:
                self.listener.batches_possibly_stored(renumbered.possibly_stored)
        producer.limit_batch_bytes(self.topic_batch_limit)
        self.connection = connection
        self._epoch += 1
        if not producer.pending:
            self._retry.reset()  # else once a receipt shows the broker takes them (_confirmed)
        self.availability.ready()
        self._at_limit = False
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
        self.send_timeout.stamp()
        if self.rejected is not None:
            self._discard_all(refusal_reason(self.rejected))
            return
        connection = self.connection
        if connection is None or not self.producer.has_unsent:
            return
        journal = self.journal
        journal.sync_producer(self.producer)  # what was queued, before framing takes the entries
        out = self.producer.frames_to_send(
            self.wall_ms(),
            connection.core.max_message_size,
            self.delivery.max_send_attempts,
        )
        journal.sent(self.producer, out)  # before a part is settled
        if out.possibly_stored:
            self.listener.batches_possibly_stored(out.possibly_stored)
        for batch, reason in out.rejected:
            log.warning("%s: batch of %d messages discarded as %s (broker max message size %d, "
                        "sent %d times)", self.producer.topic, batch.count, reason,
                        connection.core.max_message_size, batch.send_attempts)  # fmt: skip
            self.listener.batch_discarded(batch, reason)
        now = self.clock()
        for batch in out.batches:
            batch.sent_at = now
        self.listener.batches_sent(out.batches, out.resent_messages)
        connection.writelines(out.frames)
        if self._receipt_check is None and self.producer.in_flight:
            self._receipt_check = self._loop.call_later(
                self.receipt_timeout_s, self._check_receipts
            )

    def _reject(self, error: str, detail: str) -> bool:
        """The broker refuses this producer for good: discard what waits, keep retrying; True
        when it is our schema (``--schema``) it refuses, which the one line then names."""
        reason = refusal_reason(error)
        schema = reason == reasons.SCHEMA_INCOMPATIBLE
        if self.rejected is None:
            ours = f"our schema {self.producer.policy.schema}: " if schema else ""
            log.warning("%s refused by the broker (%s%s); discarding its messages as %s",
                        self.producer.topic, ours, one_line(detail), reason)  # fmt: skip
        self.rejected = error
        self._discard_all(reason)
        return schema

    def _discard_all(self, reason: str) -> None:
        for batch in self.producer.take_all():
            self.listener.batch_discarded(batch, reason)

    def _check_receipts(self) -> None:
        """A receipt overdue by ``receipt_timeout_s`` means the producer's state on the broker is
        unknown: re-create it, so everything unconfirmed is resent (never left waiting forever)."""
        self._receipt_check = None
        producer = self.producer
        if not producer.in_flight or self.connection is None or self._lost.is_set():
            return
        waited = self.clock() - producer.pending[0].sent_at
        if waited >= self.receipt_timeout_s:
            self._recreate(
                f"no receipt from {producer.topic} for {waited:.0f} s", producer.pending[0]
            )
        else:
            self._receipt_check = self._loop.call_later(
                self.receipt_timeout_s - waited, self._check_receipts
            )

    # -- ProducerListener -------------------------------------------------------------

    def on_close_producer(self, assigned_url: str | None = None) -> None:
        if assigned_url is not None:
            log.info("broker moved the producer for %s to %s", self.producer.topic, assigned_url)
        else:
            log.info("broker closed the producer for %s", self.producer.topic)
        self._assigned_url = assigned_url
        self._mark_lost()

    def on_topic_migrated(self, cluster_url: str) -> None:
        if cluster_url != self._cluster_url:
            log.warning("%s migrated to the cluster at %s; following it", self.producer.topic,
                        cluster_url)  # fmt: skip
        self._cluster_url = cluster_url

    def on_connection_lost(self) -> None:
        self._mark_lost()

    def _mark_lost(self) -> None:
        """Stop routing to and writing on this producer at once; ``_run`` reconnects (its
        PartitionKey messages wait for it through the failover grace)."""
        self.connection = None
        self.producer_disconnected()
        self.availability.away()
        self._lost.set()
