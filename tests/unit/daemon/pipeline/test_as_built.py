"""The pipeline as ``server.py`` builds it (``Server``, with its metrics and stages), driven
end to end against the fake broker: what the core writes down (new topics, batches opened
and sealed) is taken by the pipeline and acted on, with no hand wiring.

Two topics, one of three partitions; the write-ahead journal on (so each slab is taken
before it is journalled); fewer messages than a batch holds, so only the linger timers
armed for the batches opened send them.
"""

from __future__ import annotations

import asyncio
import socket
import time
from pathlib import Path
from typing import Any

from pulsar_bruce.config import load_config
from pulsar_bruce.server import Server
from to_pulsar.encoding import encode_any_partition, encode_partition_key

from tests.support.fakebroker import FakeBroker


async def _until(condition: Any, what: str, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.01)


def test_the_server_built_pipeline_delivers_every_message_and_settles_the_ledger(
    tmp_path: Path,
) -> None:
    broker = FakeBroker(partitions=3).start()
    try:
        config = load_config(
            {
                "socket": str(tmp_path / "bruce.sock"),
                "service_url": broker.url,
                "metrics_listen": "off",
                "stream_socket": "off",
                "producer_name_prefix": "",
                "spool_dir": str(tmp_path / "spool"),
                "spool_journal": "true",
                "batch_max_delay_ms": "20",
                "shutdown_timeout_s": "5",
            },
            {},
        )
        server = Server(config)
        values = [f"m{index}".encode() for index in range(40)]

        def send_all() -> None:
            with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sender:
                for index, value in enumerate(values):
                    data = (
                        encode_any_partition("a", value)
                        if index % 2
                        else encode_partition_key(index, "b", value)
                    )
                    sender.sendto(data, str(tmp_path / "bruce.sock"))

        async def run() -> None:
            task = asyncio.create_task(server.serve())
            await asyncio.wait_for(server.started.wait(), 10)
            await asyncio.to_thread(send_all)  # the socket's queue is short: off the loop
            await _until(lambda: server.ledger.acked == len(values), "every receipt")
            server.request_stop()
            await asyncio.wait_for(task, 30)

        asyncio.run(run())
    finally:
        broker.stop()
    assert sorted(broker.values()) == sorted(values)
    assert broker.errors() == []
    ledger = server.ledger
    assert ledger.received == ledger.acked == len(values)
    assert ledger.buffered_messages == 0 and ledger.identity_holds()
    registry = server.pipeline.manager.registry
    assert sorted(topic.name for topic in registry) == [
        "persistent://public/default/a",
        "persistent://public/default/b",
    ]
    assert all(len(topic.producers) == 3 for topic in registry)
    assert server.pipeline.registry.take_added() == []  # every new topic was taken
    assert server.pipeline.appender.take_batches() == ([], [])
