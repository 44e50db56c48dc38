"""The send timeout of one partition producer, for users who want a bound (off by default).

Each sealed batch is stamped with the time it was first seen pending; a timer
gives up the batches older than ``send_timeout_s`` and re-arms itself for the
oldest one left.  A batch never written to a broker is discarded as
``send_timeout``; one written but never confirmed as ``unconfirmed``, since the
broker may have stored it (the discard counter never claims a loss that did not
happen).  The clock is passed in, so tests drive it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from pulsar_bruce import reasons
from pulsar_bruce.producer.delivery import DeliveryListener
from pulsar_bruce.producer.partition_producer import PartitionProducer

log = logging.getLogger(__name__)


class SendTimeout:
    """Stamps new batches and expires old ones for one producer (0 s: never)."""

    def __init__(
        self,
        producer: PartitionProducer,
        listener: DeliveryListener,
        timeout_s: float,
        loop: asyncio.AbstractEventLoop,
        now: Callable[[], float],
    ):
        self.producer = producer
        self.listener = listener
        self.timeout_s = timeout_s
        self._loop = loop
        self._now = now
        self._check: asyncio.TimerHandle | None = None

    def stamp(self) -> None:
        """Give just-sealed batches their creation time; arm the check."""
        pending = self.producer.pending
        if not pending or pending[-1].created_at:
            return
        now = self._now()
        for index in range(len(pending) - 1, -1, -1):
            if pending[index].created_at:
                break
            pending[index].created_at = now
        if self.timeout_s and self._check is None:
            self._check = self._loop.call_later(self.timeout_s, self._expire)

    def stop(self) -> None:
        """Shutdown: from now on ``--shutdown-timeout-s`` bounds the wait, and what it
        leaves is discarded as ``shutdown``, not as ``send_timeout``."""
        self.timeout_s = 0.0
        self.cancel()

    def cancel(self) -> None:
        if self._check is not None:
            self._check.cancel()
            self._check = None

    def _expire(self) -> None:
        """Discard batches older than the send timeout; re-arm for the oldest left."""
        self._check = None
        timeout = self.timeout_s
        now = self._now()
        expired = self.producer.expire(now - timeout)
        if expired:
            counts = {reasons.SEND_TIMEOUT: 0, reasons.UNCONFIRMED: 0}
            for batch in expired:
                reason = reasons.given_up(reasons.SEND_TIMEOUT, batch)
                counts[reason] += batch.count
                self.listener.batch_discarded(batch, reason)
            log.warning(
                "%s: not acked within %.0f s (--send-timeout-s): %d messages never written "
                "discarded as send_timeout, %d written but unconfirmed as unconfirmed",
                self.producer.topic,
                timeout,
                counts[reasons.SEND_TIMEOUT],
                counts[reasons.UNCONFIRMED],
            )
        pending = self.producer.pending
        if pending:
            oldest = pending[0].created_at or now
            self._check = self._loop.call_later(max(oldest + timeout - now, 0.01), self._expire)
