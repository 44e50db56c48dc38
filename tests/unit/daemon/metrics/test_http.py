"""The metrics server's ``?name[]=`` filter (Prometheus' own): only the named series, built
alone (``Metrics.select``) and the same as the full registry's filtered."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from prometheus_client import generate_latest
from pulsar_bruce.metrics.http import MetricsServer, _Only
from pulsar_bruce.metrics.registry import Metrics, family_names
from pulsar_bruce.model.ledger import Ledger

from .test_registry import brokers, fake_topic

PER_TOPIC = ("acked", "discarded", "buffered_messages", "partitions_ready")


async def _get(port: int, target: str) -> str:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(f"GET {target} HTTP/1.0\r\n\r\n".encode())
    await writer.drain()
    response = (await reader.read()).decode()
    writer.close()
    return response.partition("\r\n\r\n")[2]


def test_name_filter_serves_only_the_named_series() -> None:
    ledger = Ledger()
    ledger.accept(10)
    ledger.reject("malformed")
    metrics = Metrics(ledger, [], brokers(0))
    metrics.receipt_latency(0.003)

    async def test() -> tuple[str, str]:
        server = MetricsServer(metrics, "127.0.0.1", 0)
        await server.start()
        try:
            everything = await _get(server.port, "/metrics")
            only = await _get(
                server.port,
                "/metrics?name[]=pulsar_bruce_received_total&name[]=pulsar_bruce_discarded_total",
            )
        finally:
            await server.stop()
        return everything, only

    everything, only = asyncio.run(test())
    assert "pulsar_bruce_send_latency_seconds_bucket" in everything
    series = [line for line in only.splitlines() if line and not line.startswith("#")]
    assert "pulsar_bruce_received_total 2.0" in series
    assert 'pulsar_bruce_discarded_total{reason="malformed"} 1.0' in series
    named = ("pulsar_bruce_received", "pulsar_bruce_discarded")
    assert all(line.startswith(named) for line in series)


class Everything:
    """The full registry as an exposition: ``select`` builds every family."""

    def __init__(self, metrics: Metrics) -> None:
        self.registry = metrics.registry

    def select(self, sample_names: object) -> Any:
        return self.registry.collect()


def _exposition(registry: object) -> list[str]:
    return generate_latest(registry).decode().splitlines()  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "names",
    [
        {"pulsar_bruce_received_total", "pulsar_bruce_acked_total"},
        {"pulsar_bruce_buffered_messages", "pulsar_bruce_discarded_total"},
        {"pulsar_bruce_send_latency_seconds_bucket", "pulsar_bruce_batch_messages_count"},
        {"pulsar_bruce_topic_acked_total", "pulsar_bruce_spool_bytes"},
        {"pulsar_bruce_nothing_total"},
    ],
)
def test_a_filtered_scrape_builds_only_what_it_serves_and_serves_what_a_full_one_would(
    names: set[str],
) -> None:
    """``Metrics.select`` builds only the families that may hold the named samples; the
    exposition is line for line the full registry's, filtered."""
    ledger = Ledger()
    ledger.accept(10)
    ledger.reject("malformed")
    topics = [fake_topic("persistent://public/default/t", 3, 1, [True, False])]
    metrics = Metrics(ledger, topics, brokers(2))
    metrics.batch_sent(7)
    metrics.receipt_latency(0.003)
    selected = _exposition(_Only(metrics, names))
    assert selected == _exposition(_Only(Everything(metrics), names))
    built = {family.name for family in metrics.select(names)}
    per_topic = {f"pulsar_bruce_topic_{name}" for name in PER_TOPIC}
    expected = family_names(names)
    assert built <= (expected | per_topic if expected & per_topic else expected)


def test_family_names_strip_the_sample_suffixes() -> None:
    assert family_names(["a_total", "h_bucket", "g"]) >= {"a", "h", "g"}
