"""The core forwarding checks on Apache Pulsar itself, read back with the official client."""

from __future__ import annotations

import base64
import json
import urllib.request
import uuid
from collections import Counter

import pytest

from tests.support.apache_pulsar import ApachePulsar
from tests.support.consume import consume, keyed_to_fresh_topics_stay_on_k_mod_n
from tests.support.processes import wait_for

pytestmark = pytest.mark.apache


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def partitioned(apache: ApachePulsar, prefix: str, partitions: int = 4) -> str:
    topic = f"persistent://public/default/{unique(prefix)}"
    apache.admin.create_partitioned_topic(topic, partitions)
    return topic


def test_any_partition_spreads_and_keeps_fields(apache: ApachePulsar, start_daemon) -> None:
    daemon = start_daemon(apache.url, "--batch-max-messages", "10")
    topic = partitioned(apache, "any")
    n = 200
    with daemon.sender() as sender:
        for i in range(n):
            sender.send(topic, b"v%d" % i, key=b"k%d" % i, timestamp_ms=1_700_000_000_000 + i)
    counters = daemon.wait_settled(n, timeout=60)
    assert counters.acked == n and counters.identity_holds()
    messages = consume(apache.url, topic, n)
    assert sorted(m.value for m in messages) == sorted(b"v%d" % i for i in range(n))
    assert set(Counter(m.partition for m in messages)) == {0, 1, 2, 3}
    for message in messages:
        i = int(message.value[1:])
        assert message.key == f"k{i}" and message.event_time == 1_700_000_000_000 + i
    # The standalone answers lookups "through the service URL" with its own address: one
    # connection, listed once in /status.
    with urllib.request.urlopen(f"http://127.0.0.1:{daemon.metrics_port}/status") as response:
        assert json.load(response)["connections"] == [apache.url.removeprefix("pulsar://")]


def test_partition_key_is_key_modulo_partitions(apache: ApachePulsar, start_daemon) -> None:
    daemon = start_daemon(apache.url)
    topic = partitioned(apache, "pkey")
    daemon.warm_up(topic, 4)
    keys = [0, 1, 2, 3, 5, 6, 7, 11, 4_294_967_295, 1_000_003]
    with daemon.sender() as sender:
        for n, pk in enumerate(keys * 3):
            sender.send(topic, f"{pk}:{n}".encode(), partition_key=pk)
    daemon.wait_settled(1 + len(keys) * 3, timeout=60)
    messages = [m for m in consume(apache.url, topic, 1 + len(keys) * 3) if m.value != b"warm-up"]
    assert len(messages) == len(keys) * 3
    for message in messages:
        assert message.partition == int(message.value.split(b":")[0]) % 4, message


def test_partition_keys_sent_before_any_producer_is_ready_stay_on_k_mod_n(
    apache: ApachePulsar, start_daemon
) -> None:
    """Fresh 8-partition topics, PartitionKey messages sent at once, before any producer is
    ready: a partition still being created is waited for, never failed over from."""
    daemon = start_daemon(apache.url)
    topics = [partitioned(apache, "fresh", 8) for _ in range(6)]
    keyed_to_fresh_topics_stay_on_k_mod_n(daemon, apache.url, topics, 8)


def test_message_record_properties_and_binary_keys(apache: ApachePulsar, start_daemon) -> None:
    daemon = start_daemon(apache.url)
    topic = f"persistent://public/default/{unique('record')}"
    raw_key = b"\xff\xfe\x00binary"
    with daemon.sender() as sender:
        sender.send(topic, b"with-props", key=b"k", properties={"a": "1", "trace": "x-y"})
        sender.send(topic, b"binary-key", key=raw_key)
    daemon.wait_settled(2, timeout=60)
    received = {m.value: m for m in consume(apache.url, topic, 2)}
    assert received[b"with-props"].properties == {"a": "1", "trace": "x-y"}
    assert received[b"with-props"].key == "k"
    assert received[b"binary-key"].key == base64.b64encode(raw_key).decode()


def test_large_values_and_bad_input_counted(apache: ApachePulsar, start_daemon) -> None:
    daemon = start_daemon(apache.url)
    topic = f"persistent://public/default/{unique('large')}"
    value = bytes(range(256)) * 400  # 102,400 bytes
    with daemon.sender() as sender:
        sender.send(topic, value)
    daemon.send_raw(b"\x00\x00\x00\x09garbage!")  # Size says 9, the datagram has 12
    daemon.send_raw(b"\x00\x00\x00\x08\x00\x07\x00\x00")  # ApiKey 7: not Bruce's
    counters = daemon.wait_settled(3, timeout=60)
    assert counters.acked == 1 and counters.identity_holds()
    assert sum(counters.discarded.values()) == 2
    [message] = consume(apache.url, topic, 1)
    assert message.value == value


def test_non_persistent_topic(apache: ApachePulsar, start_daemon) -> None:
    daemon = start_daemon(apache.url)
    topic = f"non-persistent://public/default/{unique('np')}"
    import pulsar

    client = pulsar.Client(apache.url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    try:
        consumer = client.subscribe(topic, "np-sub")  # non-persistent: subscribe before sending
        with daemon.sender() as sender:
            for i in range(50):
                sender.send(topic, b"np%d" % i)
        counters = daemon.wait_settled(50, timeout=60)
        assert counters.acked == 50 and counters.identity_holds()
        got = [consumer.receive(10_000).data() for _ in range(50)]
        assert sorted(got) == sorted(b"np%d" % i for i in range(50))
    finally:
        client.close()


def test_partitions_added_while_sending(apache: ApachePulsar, start_daemon) -> None:
    daemon = start_daemon(apache.url, "--metadata-refresh-s", "1", "--batch-max-messages", "10")
    topic = partitioned(apache, "grow", 2)
    daemon.warm_up(topic, 2)
    with daemon.sender() as sender:
        for i in range(100):
            sender.send(topic, b"a%d" % i)
        apache.admin.update_partitions(topic, 4)
        key = f'pulsar_bruce_topic_partitions_ready{{topic="{topic}"}}'
        wait_for(lambda: daemon.metrics().get(key) == 4, 60, "4 ready producers")
        for i in range(200):
            sender.send(topic, b"b%d" % i)
    counters = daemon.wait_settled(301, timeout=60)
    assert counters.acked == 301 and counters.identity_holds()
    messages = consume(apache.url, topic, 301)
    assert len({m.value for m in messages}) == 301
    assert {m.partition for m in messages if m.value.startswith(b"b")} == {0, 1, 2, 3}
