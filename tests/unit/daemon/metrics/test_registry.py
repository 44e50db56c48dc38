"""Metrics exposition: the families a scrape shows, from the ledger, and the per-topic cap."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families
from pulsar_bruce.metrics.registry import Metrics
from pulsar_bruce.model.ledger import Ledger, TopicCounters


def brokers(count: int) -> Any:
    """A connection pool with ``count`` connections, as the metrics read it."""
    return SimpleNamespace(connections=[object()] * count)

def fake_topic(name: str, acked: int, buffered: int, ready: list[bool]) -> Any:
    """What the collector reads of a route.topic.Topic, nothing more."""
    stats = TopicCounters()
    stats.acked = acked
    stats.discarded["too_large"] = 1
    producers = [
        SimpleNamespace(ready=r, compression_tries=SimpleNamespace(uncompressed=acked))
        for r in ready
    ]
    return SimpleNamespace(
        name=name,
        stats=stats,
        buffered_messages=buffered,
        producers=producers,
        name_conflicts=0,
        batches_uncompressed=lambda: len(producers) * acked,
    )


def scrape(metrics: Metrics) -> dict[str, float]:
    text = generate_latest(metrics.registry).decode()
    samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            labels = ",".join(f'{k}="{v}"' for k, v in sorted(sample.labels.items()))
            samples[f"{sample.name}{{{labels}}}" if labels else sample.name] = sample.value
    return samples


def test_a_scrape_shows_the_ledger_and_the_gauges() -> None:
    ledger = Ledger()
    topic = TopicCounters()
    for _ in range(3):
        ledger.accept(100)
    ledger.ack(topic, 2, 200)
    ledger.reject("invalid")
    ledger.sent(batches=1, resent_messages=0)
    spool = SimpleNamespace(size_bytes=4096, corrupt_records=3)
    metrics = Metrics(ledger, topics=[], brokers=brokers(2), spool=spool)
    metrics.batch_sent(2)
    metrics.receipt_latency(0.003)
    samples = scrape(metrics)
    assert samples["pulsar_bruce_received_total"] == ledger.received
    assert samples["pulsar_bruce_acked_total"] == 2
    assert samples['pulsar_bruce_discarded_total{reason="invalid"}'] == 1
    assert samples["pulsar_bruce_buffered_messages"] == ledger.buffered_messages
    assert samples["pulsar_bruce_buffered_bytes"] == ledger.buffered_bytes
    assert samples["pulsar_bruce_batches_sent_total"] == 1
    assert samples["pulsar_bruce_spool_bytes"] == 4096
    assert samples["pulsar_bruce_spool_corrupt_records_total"] == 3
    assert samples["pulsar_bruce_broker_connections"] == 2
    assert samples["pulsar_bruce_batch_messages_count"] == 1
    assert samples['pulsar_bruce_send_latency_seconds_bucket{le="0.005"}'] == 1
    assert samples['pulsar_bruce_send_latency_seconds_bucket{le="0.002"}'] == 0
    assert not any(name.endswith("_created") for name in samples)


def test_per_topic_families_stop_at_the_label_limit() -> None:
    topics = [fake_topic(f"t{i}", acked=i, buffered=10 + i, ready=[True, False]) for i in range(5)]
    metrics = Metrics(Ledger(), topics=topics, brokers=brokers(0), topic_label_limit=3)
    samples = scrape(metrics)
    shown = sorted(
        name for name in samples if name.startswith("pulsar_bruce_topic_acked_total{")
    )
    assert shown == [f'pulsar_bruce_topic_acked_total{{topic="t{i}"}}' for i in range(3)]
    assert samples['pulsar_bruce_topic_acked_total{topic="t2"}'] == 2
    assert samples['pulsar_bruce_topic_buffered_messages{topic="t1"}'] == 11
    assert samples['pulsar_bruce_topic_partitions_ready{topic="t0"}'] == 1
    assert samples['pulsar_bruce_topic_discarded_total{reason="too_large",topic="t0"}'] == 1
    assert not any('topic="t3"' in name or 'topic="t4"' in name for name in samples)
    # Not a per-topic family: every producer of every topic counts (2 x (0+1+2+3+4)).
    assert samples["pulsar_bruce_batches_uncompressed_total"] == 20
