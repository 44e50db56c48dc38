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
    ``client_options``: more ``pulsar.Client`` arguments (``authentication``, TLS files).

    pulsar-lite's consumers sometimes stall a partition (messages stored and acked, never
    delivered to that subscription): when a subscription has delivered nothing for
    ``STALL_S`` and is still short of ``count``, a fresh one reads from the start again,
    until ``timeout``; the most messages one subscription delivered are returned.
    """
    import pulsar

    client = pulsar.Client(
        service_url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error), **client_options
    )
    deadline = time.monotonic() + timeout
    best: list[Received] = []
    try:
        while len(best) < count and time.monotonic() < deadline:
            messages = _read(client, topic, count, deadline)
            if len(messages) > len(best):
                best = messages
        return best
    finally:
        client.close()


#: Seconds without a message, short of the count, after which a subscription is renewed.
STALL_S = 8.0


def _read(client: Any, topic: str, count: int, deadline: float) -> list[Received]:
    """One subscription from the earliest message: until ``count``, the deadline, or a stall."""
    import pulsar

    consumer = client.subscribe(
        topic, f"test-{time.monotonic_ns()}", initial_position=pulsar.InitialPosition.Earliest
    )
    messages: list[Received] = []
    last = time.monotonic()
    try:
        while len(messages) < count:
            now = time.monotonic()
            remaining_ms = int((deadline - now) * 1000)
            if remaining_ms <= 0 or now - last > STALL_S:
                break
            try:
                message = consumer.receive(min(remaining_ms, 2000))
            except pulsar.Timeout:
                continue
            last = time.monotonic()
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
    finally:
        consumer.close()
    return messages


def keyed_to_fresh_topics_stay_on_k_mod_n(
    daemon: Any, service_url: str, topics: list[str], partitions: int, per_topic: int = 200
) -> None:
    """PartitionKey ``k`` (value ``b"k"``) for k in ``range(per_topic)`` to every topic at once,
    before any of their producers can be ready; every message acked, read back complete, and
    each on partition ``k % partitions``: a partition still being created is waited for,
    never failed over from (issue 28)."""
    with daemon.sender() as sender:
        for key in range(per_topic):
            for topic in topics:
                sender.send(topic, b"%d" % key, partition_key=key)
    counters = daemon.wait_settled(len(topics) * per_topic, timeout=120)
    assert counters.acked == len(topics) * per_topic, counters
    for topic in topics:
        messages = consume(service_url, topic, per_topic)
        assert sorted(int(m.value) for m in messages) == list(range(per_topic))
        wrong = [m for m in messages if m.partition != int(m.value) % partitions]
        assert not wrong, f"{len(wrong)} not on K % {partitions}: {wrong[:5]}"
