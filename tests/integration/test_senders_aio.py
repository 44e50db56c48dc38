"""to_pulsar.aio.AsyncSender through a real daemon to a real broker."""

from __future__ import annotations

import asyncio
import uuid

import pytest
from to_pulsar.aio import AsyncSender

from tests.support.consume import consume
from tests.support.processes import Broker

pytestmark = pytest.mark.broker


def test_through_daemon_and_broker(broker: Broker, start_daemon) -> None:
    daemon = start_daemon(broker.url)
    topic = f"aio-sender-{uuid.uuid4().hex[:10]}"
    daemon.warm_up(topic, 4)  # partition keys land on key % 4 only once all 4 are ready
    partition_keys = [0, 1, 2, 3, 5, 6, 7, 11, 4_294_967_295, -1]
    n_any = 200  # well above the kernel's default queue of 10 datagrams

    async def main() -> None:
        async with AsyncSender(daemon.socket_path) as sender:
            await asyncio.gather(
                *(
                    sender.send(topic, f"any-{i}".encode(), key=f"key-{i}", timestamp_ms=1000 + i)
                    for i in range(n_any)
                )
            )
            for pk in partition_keys:
                await sender.send(topic, f"pk:{pk}", key=f"k{pk}", partition_key=pk)

    asyncio.run(main())
    total = n_any + len(partition_keys)
    counters = daemon.wait_settled(1 + total)
    assert counters.acked == 1 + total and counters.identity_holds()

    messages = consume(broker.url, f"persistent://public/default/{topic}", 1 + total)
    messages = [m for m in messages if m.value != b"warm-up"]
    by_value = {m.value.decode(): m for m in messages}
    assert len(messages) == total and len(by_value) == total
    for i in range(n_any):
        assert by_value[f"any-{i}"].key == f"key-{i}"
        assert by_value[f"any-{i}"].event_time == 1000 + i
    for pk in partition_keys:
        assert by_value[f"pk:{pk}"].key == f"k{pk}"
        assert by_value[f"pk:{pk}"].partition == (pk & 0xFFFFFFFF) % 4
