"""The metrics server's ``?name[]=`` filter (Prometheus' own): only the named series."""

from __future__ import annotations

import asyncio

from pulsar_bruce.metrics.http import MetricsServer
from pulsar_bruce.metrics.registry import Metrics
from pulsar_bruce.model.ledger import Ledger


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
    metrics = Metrics(ledger, lambda: [], lambda: 0)
    metrics.receipt_latency(0.003)

    async def test() -> tuple[str, str]:
        server = MetricsServer(metrics.registry, "127.0.0.1", 0)
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
