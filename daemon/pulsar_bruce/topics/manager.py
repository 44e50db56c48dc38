"""Topics at the edge: partition discovery and growth, producers and their drivers.

A topic seen for the first time gets its per-topic settings and, once its
partition count is known (looked up with backoff), one producer and driver per
partition; the messages that waited are routed then.  Partition counts are
re-checked every ``metadata_refresh_s`` and producers added when a topic grows.
Sealed batches are written once per socket drain (:meth:`flush_dirty`), not per
message.  What the write-ahead journal must look at (topics and producers added,
producers whose batches changed) the manager writes down in :class:`TopicChanges`,
and the pipeline hands it to the journal (``pipeline/journalling.py``); the manager
never calls the journal.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import itertools
import logging
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any

from pulsar_bruce import reasons
from pulsar_bruce.connection.broker_connection import ConnectionClosedError, ServerError
from pulsar_bruce.connection.pool import ConnectionPool, TopicLookupError
from pulsar_bruce.parse.deliver_at import epoch_ms
from pulsar_bruce.parse.topic import is_partition_name, partition_name
from pulsar_bruce.producer.backoff import Retry
from pulsar_bruce.producer.delivery import DeliveryPolicy, SendJournal
from pulsar_bruce.producer.driver import ProducerDriver
from pulsar_bruce.producer.faults import is_permanent, unreachable
from pulsar_bruce.producer.partition_producer import PartitionProducer
from pulsar_bruce.producer.sequenced_driver import SequencedDriver
from pulsar_bruce.route.appender import Appender
from pulsar_bruce.route.outcomes import Outcomes
from pulsar_bruce.route.registry import TopicRegistry
from pulsar_bruce.route.topic import Topic
from pulsar_bruce.route.topic_settings import TopicConfigurator
from pulsar_bruce.spool.journal_stage import NO_JOURNAL
from pulsar_bruce.topics.rate_limit import RateLimiter

log = logging.getLogger(__name__)

#: Failures of a metadata lookup that a later try may cure.
_LOOKUP_FAILURES = (TopicLookupError, ConnectionClosedError, ServerError, OSError, TimeoutError)


@dataclass(slots=True)
class TopicChanges:
    """What the topic manager did that the write-ahead journal must know, written down until
    the pipeline takes it (``pipeline/journalling.py``): the pipeline builds it, the manager
    only adds to it."""

    #: Topics seen for the first time (their messages may wait for partitions).
    topics: list[Topic] = field(default_factory=list)
    #: Producers created, each with the topic and partition it serves as senders name it.
    placed: list[tuple[PartitionProducer, str, int]] = field(default_factory=list)
    #: Producers whose open batch got its first message, or which sealed a batch.
    touched: set[PartitionProducer] = field(default_factory=set)

    def __bool__(self) -> bool:
        return bool(self.topics or self.placed or self.touched)

    def clear(self) -> None:
        self.topics.clear()
        self.placed.clear()
        self.touched.clear()


class TopicManager:
    """Acts on what the registry and the appender wrote down: looks new topics up, drives
    their producers and writes the batches sealed."""

    def __init__(
        self,
        pool: ConnectionPool,
        outcomes: Outcomes,
        settings: TopicConfigurator,
        delivery: DeliveryPolicy,
        registry: TopicRegistry,
        appender: Appender,
        *,
        producer_name: str | None = None,
        metadata_refresh_s: float = 0.0,
        changes: TopicChanges | None = None,
        send_journal: SendJournal = NO_JOURNAL,
        clock: Callable[[], float] = time.monotonic,
        wall_ms: Callable[[], int] = epoch_ms,
    ):
        self.pool = pool
        self.outcomes = outcomes
        self.settings = settings
        self.delivery = delivery
        self.producer_name = producer_name
        self.metadata_refresh_s = metadata_refresh_s
        #: The drivers' clocks: now in seconds (timeouts, latencies), in epoch ms (frames).
        self.clock, self.wall_ms = clock, wall_ms
        #: What the journal must know of what the manager did (the pipeline takes it).
        self.changes = TopicChanges() if changes is None else changes
        #: The drivers' one declared hook into the journal, which the manager only hands to
        #: the drivers it makes: they frame on timers and receipts, outside any drain, and a
        #: batch's ids are journalled before its frame is written (``producer/delivery.py``).
        self.send_journal = send_journal
        self.drivers: dict[int, ProducerDriver] = {}
        self.rate_limiter = RateLimiter(settings)
        self._dirty: set[ProducerDriver] = set()
        #: The one producer of each broker topic (a partition, or a non-partitioned topic),
        #: whichever of the names senders use for it came first.
        self._by_broker_topic: dict[str, PartitionProducer] = {}
        self._producer_ids = itertools.count(1)
        #: The producers under stream senders' names, with their topics, until closed.
        self._sequenced: dict[SequencedDriver, Topic] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        #: The parts the intake shares: what they write down, :meth:`collect` acts on.
        self.registry = registry
        self.appender = appender

    # -- lifecycle -----------------------------------------------------------------------

    def start(self) -> None:
        if self.metadata_refresh_s > 0:
            self._spawn(self._refresh_metadata_periodically())

    async def stop(self) -> None:
        self.rate_limiter.stop()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await asyncio.gather(*(driver.stop() for driver in self.drivers.values()))

    def seal_all(self) -> None:
        """Shutdown: seal every open batch and write it; no send timeout fires from now on
        (the shutdown timeout bounds the wait, and what it leaves is ``shutdown``'s)."""
        self.delivery = dataclasses.replace(self.delivery, send_timeout_s=0.0)
        for driver in self.drivers.values():
            driver.send_timeout.stop()
        for topic in self.registry:
            for producer in [*topic.producers, *topic.sequenced]:
                if producer.seal() is not None:
                    self.batch_sealed(producer)
        self.flush_dirty()

    # -- what the registry and the appender wrote down -------------------------------------

    def collect(self) -> None:
        """What the intake did since the last call: new topics are looked up, the batches it
        opened get their linger timers, those it sealed are marked to be written."""
        registry, appender = self.registry, self.appender
        if registry.added:  # (tested first: this runs after every slab, mostly for nothing)
            for topic in registry.take_added():
                self.topic_added(topic)
        if self._sequenced:
            self._forget_closed()
        if appender.batches_opened or appender.batches_sealed:
            opened, sealed = appender.take_batches()
            for producer in opened:
                self.batch_opened(producer)
            for producer in sealed:
                self.batch_sealed(producer)

    def topic_added(self, topic: Topic) -> None:
        self.changes.topics.append(topic)
        self.apply_settings(topic)
        self._spawn(self._resolve_partitions(topic))

    def apply_settings(self, topic: Topic) -> None:
        """(Re)apply ``topic``'s per-topic settings, rate-limit timer included; a producer
        whose schema changed (SIGHUP) is re-created, so the broker is told now."""
        schemas = {p.producer_id: p.policy.schema for p in topic.owned_producers()}
        settings = self.settings.apply(topic)
        for producer in topic.owned_producers():
            driver = self.drivers.get(producer.producer_id)
            if driver is not None and producer.policy.schema != schemas[producer.producer_id]:
                driver.redeclare()
        limited = settings.rate_limit_messages > 0
        self.rate_limiter.schedule(topic, settings.rate_limit_interval_s if limited else None)

    def batch_opened(self, producer: PartitionProducer) -> None:
        self.drivers[producer.producer_id].arm_linger()
        if not producer.exactly_once:
            self.changes.touched.add(producer)

    def batch_sealed(self, producer: PartitionProducer) -> None:
        self._dirty.add(self.drivers[producer.producer_id])
        if not producer.exactly_once:
            self.changes.touched.add(producer)

    # -- producers under a stream sender's name and ids (route/sequenced.py) -----------------

    def open_sequenced(
        self, topic: Topic, partition: int, name: str, first_sequence_id: int
    ) -> PartitionProducer:
        """A producer for ``topic``'s ``partition`` under ``name``, numbering from
        ``first_sequence_id``; neither journalled nor spooled: its sender resends what a
        crash loses, under the same ids (see ``producer/exactly_once.py``)."""
        broker_topic = partition_name(topic.name, partition) if topic.partitioned else topic.name
        policy = dataclasses.replace(self.settings.policy(topic), key_based=False)
        producer = PartitionProducer(broker_topic, partition, next(self._producer_ids), policy)
        producer.publish_as(name, first_sequence_id)
        driver = SequencedDriver(
            producer,
            self.pool,
            self.outcomes.for_topic(topic),
            self.delivery,
            journal=self.send_journal,  # never placed, so never journalled
            clock=self.clock,
            wall_ms=self.wall_ms,
        )
        self.drivers[producer.producer_id] = driver
        self._sequenced[driver] = topic
        topic.add_sequenced(producer)
        driver.start()
        return producer

    def retire_sequenced(self, producers: list[PartitionProducer]) -> None:
        """Their sender is done: each is closed on the broker once its batches are settled."""
        for producer in producers:
            driver = self.drivers.get(producer.producer_id)
            if isinstance(driver, SequencedDriver):
                driver.retire()

    def _forget_closed(self) -> None:
        """Sequenced producers closed on the broker since the last call are forgotten."""
        for driver, topic in [(d, t) for d, t in self._sequenced.items() if d.closed]:
            del self._sequenced[driver]
            self.drivers.pop(driver.producer.producer_id, None)
            self._dirty.discard(driver)
            topic.remove_sequenced(driver.producer)

    def flush_dirty(self) -> None:
        """Write the batches sealed since the last call (what :meth:`collect` takes first).
        After a drain or a replay the pipeline has journalled them already; the drivers'
        hook journals what is framed in any case."""
        self.collect()
        if self._dirty:
            for driver in self._dirty:
                driver.flush()
            self._dirty.clear()

    # -- partitions -------------------------------------------------------------------------

    async def _resolve_partitions(self, topic: Topic) -> None:
        """Find the partition count (retrying with backoff) and start the producers."""
        retry = Retry()
        while True:
            try:
                count = await self._partition_count(topic.name)
                break
            except _LOOKUP_FAILURES as exc:
                delay = retry.next_delay(not unreachable(exc))
                dropped = 0
                if is_permanent(getattr(exc, "error", None)):
                    # Refused for good (no such topic, not allowed): waiting cannot help.
                    dropped = self.outcomes.discard_waiting(topic, reasons.BROKER_REJECTED)
                log.warning(
                    "partition count of %s unknown (%s)%s; retrying in %.1f s",
                    topic.name,
                    exc or type(exc).__name__,
                    f"; {dropped} waiting messages discarded as broker_rejected" if dropped else "",
                    delay,
                )
                await asyncio.sleep(delay)
        self.grow(topic, count)

    async def _partition_count(self, name: str) -> int:
        # A "-partition-N" name is one partition, addressed directly.
        return 0 if is_partition_name(name) else await self.pool.partition_count(name)

    def grow(self, topic: Topic, count: int) -> None:
        """Attach producers for partitions ``len(topic.producers) .. count-1`` (0: one,
        non-partitioned) and route the messages that waited for them."""
        if count == 0:
            if topic.producers:
                return
            names = [topic.name]
        else:
            if topic.producers and not topic.partitioned:
                log.warning(
                    "%s became partitioned; keeping its non-partitioned producer", topic.name
                )
                return
            names = [partition_name(topic.name, i) for i in range(len(topic.producers), count)]
            if not names:
                return
            if topic.producers:
                log.info("%s grew to %d partitions", topic.name, count)
        listener = self.outcomes.for_topic(topic)
        policy = self.settings.policy(topic)
        new, attached, borrowed = [], [], []
        for index, name in enumerate(names, start=len(topic.producers)):
            producer = self._by_broker_topic.get(name)
            if producer is not None:  # also addressed as t-partition-N, or as t: share it
                borrowed.append(producer.producer_id)
                attached.append(producer)
                continue
            producer = PartitionProducer(name, index, next(self._producer_ids), policy)
            if self.producer_name:
                producer.name_as(self.producer_name)
            self.changes.placed.append((producer, topic.name, index))
            self.drivers[producer.producer_id] = ProducerDriver(
                producer, self.pool, listener, self.delivery, journal=self.send_journal,
                clock=self.clock, wall_ms=self.wall_ms,
            )  # fmt: skip
            self._by_broker_topic[name] = producer
            new.append(producer)
            attached.append(producer)
        topic.attach(attached, partitioned=count > 0, borrowed=borrowed)
        self.appender.route_waiting(topic)
        for producer in new:
            self.drivers[producer.producer_id].start()
        self.flush_dirty()

    async def _refresh_metadata_periodically(self) -> None:
        while True:
            await asyncio.sleep(self.metadata_refresh_s)
            for topic in list(self.registry):
                if not topic.partitioned:
                    continue
                with contextlib.suppress(*_LOOKUP_FAILURES):
                    count = await self._partition_count(topic.name)
                    if count > len(topic.producers):
                        self.grow(topic, count)

    def _spawn(self, coroutine: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(coroutine)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
