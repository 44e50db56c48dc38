"""Prometheus exposition of the daemon's counters.

The hot path only bumps plain ints in the :class:`~pulsar_bruce.model.ledger.Ledger`;
a custom collector turns them into metric families when ``/metrics`` is scraped (on
the event loop, so a scrape never sees a half-processed datagram).  Per-topic families are capped
at ``topic_label_limit`` topics to keep label cardinality bounded.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sized
from typing import Protocol

from prometheus_client import CollectorRegistry, Histogram, disable_created_metrics
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from pulsar_bruce.model.ledger import Ledger
from pulsar_bruce.route.topic import Topic

PREFIX = "pulsar_bruce"

disable_created_metrics()  # type: ignore[no-untyped-call]  # the *_created samples only add noise to every scrape


class Brokers(Protocol):
    """The broker connections (``connection/pool.py``'s ``ConnectionPool``)."""

    @property
    def connections(self) -> Sized: ...


class SpoolSize(Protocol):
    """What the disk spool reports at scrape time (``spool/store.py``'s ``SpoolStore``)."""

    @property
    def size_bytes(self) -> int: ...

    @property
    def corrupt_records(self) -> int: ...


class BatchHistograms:
    """The histograms observed once per batch: the pipeline's ``BatchObserver``, built
    before it (the :class:`Metrics` that expose them read the pipeline's parts)."""

    def __init__(self) -> None:
        self.batch_messages = Histogram(
            f"{PREFIX}_batch_messages",
            "Messages per batch sent to a broker",
            buckets=(1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000),
            registry=None,
        )
        self.send_latency = Histogram(
            f"{PREFIX}_send_latency_seconds",
            "Time from writing a batch to a broker until its SendReceipt",
            buckets=(0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 30),
            registry=None,
        )

    # -- BatchObserver (pulsar_bruce.route.outcomes) --------------------------------------

    def batch_sent(self, messages: int) -> None:
        self.batch_messages.observe(messages)

    def receipt_latency(self, seconds: float) -> None:
        self.send_latency.observe(seconds)


class Metrics:
    """The registry: the ledger's families, read when scraped from the pipeline's parts
    (its topics, broker connections and spool), and the batch histograms."""

    def __init__(
        self,
        ledger: Ledger,
        topics: Iterable[Topic],
        brokers: Brokers,
        spool: SpoolSize | None = None,
        histograms: BatchHistograms | None = None,
        topic_label_limit: int = 100,
    ):
        self.registry = CollectorRegistry(auto_describe=False)
        self._ledger_families = _LedgerCollector(ledger, topics, brokers, spool, topic_label_limit)
        self.registry.register(self._ledger_families)
        self.histograms = histograms or BatchHistograms()
        self.registry.register(self.histograms.batch_messages)
        self.registry.register(self.histograms.send_latency)
        self._histograms = (
            (f"{PREFIX}_batch_messages", self.histograms.batch_messages),
            (f"{PREFIX}_send_latency_seconds", self.histograms.send_latency),
        )

    def select(self, sample_names: Iterable[str]) -> Iterator[Metric]:
        """The families that may hold one of ``sample_names`` (``/metrics?name[]=``), built
        alone: a tight poll of a few counters does not pay for every family."""
        wanted = family_names(sample_names)
        yield from self._ledger_families.collect_only(wanted)
        for name, histogram in self._histograms:
            if name in wanted:
                yield from histogram.collect()

    # -- BatchObserver, for tests and tools that build the metrics alone ---------------------

    def batch_sent(self, messages: int) -> None:
        self.histograms.batch_sent(messages)

    def receipt_latency(self, seconds: float) -> None:
        self.histograms.receipt_latency(seconds)


class _LedgerCollector:
    def __init__(
        self,
        ledger: Ledger,
        topics: Iterable[Topic],
        brokers: Brokers,
        spool: SpoolSize | None,
        topic_label_limit: int,
    ):
        self._ledger = ledger
        self._topics = topics
        self._brokers = brokers
        self._spool = spool
        self._limit = topic_label_limit

    def collect(self) -> Iterator[Metric]:
        return self.collect_only(None)

    def collect_only(self, families: set[str] | None) -> Iterator[Metric]:
        """The families named in ``families`` (all of them for None), in exposition order;
        each is built only when it is asked for."""

        def want(name: str) -> bool:
            return families is None or f"{PREFIX}_{name}" in families

        s = self._ledger
        if want("received"):
            yield _counter(
                "received", "Datagrams read from the socket(s), valid or not", s.received
            )
        if want("acked"):
            yield _counter("acked", "Messages the broker confirmed with a SendReceipt", s.acked)
        if want("discarded"):
            discarded = CounterMetricFamily(
                f"{PREFIX}_discarded", "Messages given up, by reason", labels=["reason"]
            )
            for reason, count in s.discarded.items():
                discarded.add_metric([reason], count)
            yield discarded
        if want("buffered_messages"):
            yield _gauge(
                "buffered_messages",
                "Messages received and valid, not yet acked or discarded",
                s.buffered_messages,
            )
        if want("buffered_bytes"):
            yield _gauge("buffered_bytes", "Bytes held for buffered messages", s.buffered_bytes)
        if want("possible_duplicates"):
            yield _counter(
                "possible_duplicates",
                "Messages resent after an unconfirmed send",
                s.possible_duplicates,
            )
        if want("already_stored"):
            yield _counter(
                "already_stored",
                "Of the acked messages, those the broker already had under their sender's "
                "producer name and ids (a retried task's; stored once)",
                s.already_stored,
            )
        if want("batches_sent"):
            yield _counter("batches_sent", "Batch frames written to brokers", s.batches_sent)
        if want("batches_uncompressed"):
            yield _counter(
                "batches_uncompressed",
                "Batches framed without compression on a topic with a codec: it would not "
                "have saved an eighth, or they followed one that did not",
                sum(topic.batches_uncompressed() for topic in self._topics),
            )
        if want("spooled_messages"):
            yield _gauge(
                "spooled_messages",
                "Messages this process wrote to the disk spool, not yet replayed",
                s.spooled_messages,
            )
        if want("spool_bytes") or want("spool_corrupt_records"):
            spool = self._spool
            if want("spool_bytes"):
                size = spool.size_bytes if spool is not None else 0
                yield _gauge("spool_bytes", "Bytes in the disk spool", size)
            if want("spool_corrupt_records"):
                yield _counter(
                    "spool_corrupt_records",
                    "Spool records found torn or corrupt and skipped",
                    spool.corrupt_records if spool is not None else 0,
                )
        if want("broker_connections"):
            yield _gauge(
                "broker_connections",
                "Open, handshaken broker connections",
                len(self._brokers.connections),
            )
        if want("producer_name_conflicts"):
            yield _counter(
                "producer_name_conflicts",
                "Producer creations refused with ProducerBusy for our own producer name "
                "(another daemon with the same --producer-name-prefix)",
                sum(topic.name_conflicts for topic in self._topics),
            )
        if families is None or families & _PER_TOPIC:
            yield from self._per_topic()

    def _per_topic(self) -> Iterator[Metric]:
        acked = CounterMetricFamily(
            f"{PREFIX}_topic_acked", "Messages acked, per topic", labels=["topic"]
        )
        discarded = CounterMetricFamily(
            f"{PREFIX}_topic_discarded",
            "Messages discarded, per topic and reason",
            labels=["topic", "reason"],
        )
        buffered = GaugeMetricFamily(
            f"{PREFIX}_topic_buffered_messages", "Messages buffered, per topic", labels=["topic"]
        )
        ready = GaugeMetricFamily(
            f"{PREFIX}_topic_partitions_ready",
            "Partitions whose producer is connected and ready, per topic",
            labels=["topic"],
        )
        for index, topic in enumerate(self._topics):
            if index >= self._limit:
                break
            acked.add_metric([topic.name], topic.stats.acked)
            for reason, count in topic.stats.discarded.items():
                discarded.add_metric([topic.name, reason], count)
            buffered.add_metric([topic.name], topic.buffered_messages)
            ready.add_metric([topic.name], sum(1 for p in topic.producers if p.ready))
        yield from (acked, discarded, buffered, ready)


#: The per-topic families, built together in one pass over the topics.
_PER_TOPIC = frozenset(
    f"{PREFIX}_topic_{name}"
    for name in ("acked", "discarded", "buffered_messages", "partitions_ready")
)
#: What Prometheus appends to a family's name in its samples' names.
_SAMPLE_SUFFIXES = ("_total", "_bucket", "_count", "_sum", "_created")


def family_names(sample_names: Iterable[str]) -> set[str]:
    """The family names that may hold samples named ``sample_names`` (a counter ``x``'s
    sample is ``x_total``, a histogram's ``x_bucket``, ``x_count``, ``x_sum``)."""
    families = set()
    for sample in sample_names:
        families.add(sample)
        families.update(sample.removesuffix(suffix) for suffix in _SAMPLE_SUFFIXES)
    return families


def _counter(name: str, documentation: str, value: int) -> CounterMetricFamily:
    return CounterMetricFamily(f"{PREFIX}_{name}", documentation, value=value)


def _gauge(name: str, documentation: str, value: int) -> GaugeMetricFamily:
    return GaugeMetricFamily(f"{PREFIX}_{name}", documentation, value=value)
