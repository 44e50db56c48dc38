"""Key-based batching on pulsar-lite: a Key_Shared subscription gets each key at one consumer.

A Key_Shared dispatcher picks the consumer of a whole batch (one broker entry)
from the entry's ``MessageMetadata`` key (pulsar-broker
``PersistentStickyKeyDispatcherMultipleConsumers`` hashes ``peekStickyKey``:
the ordering key, else the partition key of the entry's metadata).  So the
Java client's ``BatchMessageKeyBasedContainer`` puts one key per batch and sets
that key on the batch; with ``--key-based-batching`` the daemon does the same.
Read back with the official client in Key_Shared mode.

pulsar-lite's Key_Shared dispatcher sometimes delivers a message a second time
(seen about one run in five: the same key and round twice, at the same
consumer).  The daemon's own counters show whether it sent anything twice
(``possible_duplicates``); what the consumers see is then read as the set of
distinct messages, each key's first deliveries in order.
"""

from __future__ import annotations

import time
import uuid
from collections import defaultdict

import pytest

from tests.support.processes import Broker

pytestmark = pytest.mark.broker

KEYS = [f"device-{i}" for i in range(40)]
ROUNDS = 5


def test_two_key_shared_consumers_never_share_a_key(flat_broker: Broker, start_daemon) -> None:
    import pulsar

    topic = f"persistent://public/default/keyshared-{uuid.uuid4().hex[:10]}"
    # Long lingering and big batches: without one key per batch, keys would share batches.
    daemon = start_daemon(flat_broker.url, "--key-based-batching", "--batch-max-delay-ms", "200")
    client = pulsar.Client(flat_broker.url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    try:
        consumers = [
            client.subscribe(
                topic,
                "key-shared",
                consumer_type=pulsar.ConsumerType.KeyShared,
                consumer_name=f"consumer-{index}",
            )
            for index in range(2)
        ]
        with daemon.sender() as sender:
            for round_ in range(ROUNDS):
                for key in KEYS:  # interleaved keys: each batch window holds all 40
                    sender.send(topic, f"{key}/{round_}".encode(), key=key.encode())
        total = ROUNDS * len(KEYS)
        counters = daemon.wait_settled(total)
        assert counters.acked == total and counters.identity_holds()
        assert counters.possible_duplicates == 0  # the daemon sent every message once

        seen: list[dict[str, list[int]]] = [defaultdict(list), defaultdict(list)]
        distinct: set[tuple[str, int]] = set()
        deadline = time.monotonic() + 60
        while len(distinct) < total and time.monotonic() < deadline:
            for index, consumer in enumerate(consumers):
                try:
                    message = consumer.receive(200)
                except pulsar.Timeout:
                    continue
                key, round_ = message.data().decode().split("/")
                assert message.partition_key() == key
                consumer.acknowledge(message)
                if (key, int(round_)) not in distinct:  # a redelivery is not a new message
                    distinct.add((key, int(round_)))
                    seen[index][key].append(int(round_))
    finally:
        client.close()

    assert len(distinct) == total
    first, second = set(seen[0]), set(seen[1])
    assert first and second, "both consumers should get some keys"
    assert not first & second, f"keys delivered to both consumers: {sorted(first & second)}"
    assert first | second == set(KEYS)
    for by_key in seen:
        for key, rounds in by_key.items():
            assert rounds == list(range(ROUNDS)), f"{key} out of order: {rounds}"
