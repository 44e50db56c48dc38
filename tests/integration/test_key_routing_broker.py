"""Key routing on a real pulsar-lite broker, read back with the official client.

The partition a keyed message should land on is the Java client's
(``RoundRobinPartitionMessageRouterImpl.choosePartition``: ``hash(key) % N``),
computed by the hashes that tests/unit/test_key_routing.py checks against the
Java definitions and published vectors.
"""

from __future__ import annotations

import uuid
from collections import defaultdict

import pytest
from pulsar_bruce.route.key_hash import java_string_hash, murmur3_hash

from tests.support.consume import consume
from tests.support.processes import Broker

pytestmark = pytest.mark.broker

KEYS = [f"customer-{i}" for i in range(40)]


@pytest.mark.parametrize(
    ("routing", "hash_text"), [("java_string", java_string_hash), ("murmur3", murmur3_hash)]
)
def test_each_key_lands_on_the_java_clients_partition(
    broker: Broker, start_daemon, routing, hash_text
) -> None:
    daemon = start_daemon(broker.url, "--key-routing", routing)
    topic = f"keyrouted-{uuid.uuid4().hex[:10]}"
    daemon.warm_up(topic, 4)  # every producer ready: no failover to a stand-in partition
    with daemon.sender() as sender:
        for round_ in range(3):
            for key in KEYS:
                sender.send(topic, f"{key}/{round_}".encode(), key=key.encode())
    total = 1 + 3 * len(KEYS)
    counters = daemon.wait_settled(total)
    assert counters.acked == total and counters.identity_holds()

    partitions: dict[str, set[int]] = defaultdict(set)
    for message in consume(broker.url, f"persistent://public/default/{topic}", total):
        if message.key:
            partitions[message.key].add(message.partition)
    assert dict(partitions) == {key: {hash_text(key) % 4} for key in KEYS}
