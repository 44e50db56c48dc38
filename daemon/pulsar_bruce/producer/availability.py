"""Whether a partition counts as available for PartitionKey routing (Bruce's failover).

Bruce fails a PartitionKey message over to the next partition only when its own
is *unavailable*.  A producer still being created, or re-created after an unload
(the cluster answers "not served here yet" for a moment), is not: its messages
wait for it and keep their partition.  It becomes unavailable once an attempt
to reach it finds no broker (its broker died, no host of the service URL
answers) or is refused for good, or once it has been away for the grace; it is
available again as soon as its producer is ready.

Every way of being away starts the grace: a new producer's first attempt, a
producer paused to be closed and re-created on its connection (the close alone
may take ``--receipt-timeout-s``), a lost connection, and a connection or
producer the broker closed while we created it (an unload, a rolling restart:
the broker was reached, so that is no sign the partition cannot be).  The edge
passes its event loop in for the one timer.
"""

from __future__ import annotations

import asyncio
import logging

from pulsar_bruce.producer.partition_producer import PartitionProducer

log = logging.getLogger(__name__)


class Availability:
    """Keeps ``producer.available`` for one partition producer."""

    def __init__(
        self, producer: PartitionProducer, grace_s: float, loop: asyncio.AbstractEventLoop
    ):
        self.producer = producer
        self.grace_s = grace_s
        self._loop = loop
        self._grace: asyncio.TimerHandle | None = None

    def away(self) -> None:
        """Not ready (lost, or an attempt the cluster answered failed): the grace starts,
        unless it runs already."""
        producer = self.producer
        if self._grace is None and producer.available and not producer.ready:
            self._grace = self._loop.call_later(self.grace_s, self._grace_over)

    def unreachable(self, why: str) -> None:
        """No broker answered (or the topic refuses us for good): fail over now."""
        self.stop()
        if self.producer.available:
            self.producer.available = False
            log.info("%s unavailable (%s); PartitionKey messages fail over to the next "
                     "ready partition", self.producer.topic, why)  # fmt: skip

    def ready(self) -> None:
        """The producer is registered (``on_registered`` made it available again)."""
        self.stop()

    def stop(self) -> None:
        if self._grace is not None:
            self._grace.cancel()
            self._grace = None

    def _grace_over(self) -> None:
        self._grace = None
        if not self.producer.ready:
            self.unreachable(f"not back within {self.grace_s:g} s")
