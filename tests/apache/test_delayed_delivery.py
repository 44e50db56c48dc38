"""Delayed delivery on Apache Pulsar, read with the official client on a Shared
subscription: a delayed message is not delivered before its time and is after it; the
messages around it are not held back (it is sent unbatched, as the Java client does)."""

from __future__ import annotations

import time
import uuid
from typing import Any

import pytest

from tests.support.apache_pulsar import ApachePulsar

pytestmark = pytest.mark.apache

DELAY_MS = 4000


def test_delayed_messages_wait_for_their_time_on_a_shared_subscription(
    apache: ApachePulsar, start_daemon: Any
) -> None:
    import pulsar

    topic = f"persistent://public/default/delayed-{uuid.uuid4().hex[:8]}"
    daemon = start_daemon(apache.url, "--batch-max-delay-ms", "50")
    client = pulsar.Client(apache.url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    try:
        consumer = client.subscribe(
            topic, "shared", consumer_type=pulsar.ConsumerType.Shared,
            initial_position=pulsar.InitialPosition.Earliest,
        )  # fmt: skip
        sent_ms = time.time_ns() // 1_000_000
        with daemon.sender() as sender:
            sender.send(topic, b"now-1")
            sender.send(topic, b"after", deliver_after_ms=DELAY_MS)
            sender.send(topic, b"at", deliver_at_ms=sent_ms + DELAY_MS)
            sender.send(topic, b"now-2")
        counters = daemon.wait_settled(4, timeout=60)
        assert counters.acked == 4
        arrivals: dict[bytes, int] = {}
        deadline = time.monotonic() + 60
        while len(arrivals) < 4 and time.monotonic() < deadline:
            try:
                message = consumer.receive(timeout_millis=1000)
            except pulsar.Timeout:
                continue
            arrivals[message.data()] = time.time_ns() // 1_000_000
            consumer.acknowledge(message)
        assert set(arrivals) == {b"now-1", b"after", b"at", b"now-2"}
        for value in (b"now-1", b"now-2"):  # not held back by the delayed ones
            assert arrivals[value] - sent_ms < DELAY_MS, arrivals
        for value in (b"after", b"at"):  # not before their time (same host, same clock)
            assert arrivals[value] >= sent_ms + DELAY_MS, (value, arrivals[value] - sent_ms)
    finally:
        client.close()
