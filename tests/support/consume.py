"""Reading topics back with the official Pulsar client (the ground truth of what arrived)."""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from typing import Any


@dataclass
class Received:
    value: bytes
    key: str
    partition: int
    event_time: int
    topic: str
    properties: dict[str, str]


def consume(
    service_url: str, topic: str, count: int, timeout: float = 30.0, **client_options: Any
) -> list[Received]:
    """Read ``count`` messages from the beginning of ``topic`` with the official client;
    ``client_options``: more ``pulsar.Client`` arguments (``authentication``, TLS files)."""
    import pulsar

    client = pulsar.Client(
        service_url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error), **client_options
    )
    try:
        consumer = client.subscribe(
            topic,
            f"test-{time.monotonic_ns()}",
            initial_position=pulsar.InitialPosition.Earliest,
        )
        messages: list[Received] = []
        deadline = time.monotonic() + timeout
        while len(messages) < count:
            remaining_ms = int((deadline - time.monotonic()) * 1000)
            if remaining_ms <= 0:
                break
            try:
                message = consumer.receive(min(remaining_ms, 2000))
            except pulsar.Timeout:
                continue
            name = message.topic_name()
            match = re.search(r"-partition-(\d+)$", name)
            messages.append(
                Received(
                    value=message.data(),
                    key=message.partition_key(),
                    partition=int(match.group(1)) if match else -1,
                    event_time=message.event_timestamp(),
                    topic=name,
                    properties=dict(message.properties()),
                )
            )
            consumer.acknowledge(message)
        return messages
    finally:
        client.close()
