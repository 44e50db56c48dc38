"""The daemon against a real pulsar-lite broker, read back with the official client."""

from __future__ import annotations

import base64
import struct
import threading
import uuid
from collections import Counter, defaultdict

import pytest

from tests.support.consume import consume, keyed_to_fresh_topics_stay_on_k_mod_n
from tests.support.processes import Broker, wait_for

pytestmark = pytest.mark.broker


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def test_values_keys_and_event_times_arrive(broker: Broker, start_daemon) -> None:
    daemon = start_daemon(broker.url)
    topic = unique("fields")
    with daemon.sender() as sender:
        for i in range(20):
            sender.send(
                topic,
                f"value-{i}".encode(),
                key=f"key-{i}".encode(),
                timestamp_ms=1_700_000_000_000 + i,
            )
        sender.send(topic, b"no-key-no-time", timestamp_ms=0)
    counters = daemon.wait_settled(21)
    assert counters.acked == 21 and counters.identity_holds()

    received = {m.value: m for m in consume(broker.url, f"persistent://public/default/{topic}", 21)}
    assert len(received) == 21
    for i in range(20):
        message = received[f"value-{i}".encode()]
        assert message.key == f"key-{i}"
        assert message.event_time == 1_700_000_000_000 + i
    assert received[b"no-key-no-time"].key == ""
    assert received[b"no-key-no-time"].event_time == 0


def test_non_utf8_key_is_sent_base64_encoded(broker: Broker, start_daemon) -> None:
    daemon = start_daemon(broker.url)
    topic = unique("binkey")
    raw_key = b"\xff\xfe\x00binary"
    with daemon.sender() as sender:
        sender.send(topic, b"v", key=raw_key)
    daemon.wait_settled(1)
    [message] = consume(broker.url, f"persistent://public/default/{topic}", 1)
    assert message.key == base64.b64encode(raw_key).decode()


def test_partition_key_lands_on_key_modulo_partitions(broker: Broker, start_daemon) -> None:
    daemon = start_daemon(broker.url)
    topic = unique("pkey")
    daemon.warm_up(topic, 4)
    keys = [0, 1, 2, 3, 5, 6, 7, 11, 4_294_967_295, 1_000_003]
    with daemon.sender() as sender:
        for n, pk in enumerate(keys * 5):
            sender.send(topic, f"{pk}:{n}".encode(), partition_key=pk)
    daemon.wait_settled(1 + len(keys) * 5)
    messages = consume(broker.url, f"persistent://public/default/{topic}", 1 + len(keys) * 5)
    messages = [m for m in messages if m.value != b"warm-up"]
    assert len(messages) == len(keys) * 5
    for message in messages:
        pk = int(message.value.split(b":")[0])
        assert message.partition == pk % 4, message


def test_partition_keys_sent_before_any_producer_is_ready_stay_on_k_mod_n(
    tmp_path, start_daemon
) -> None:
    """Fresh 8-partition topics, PartitionKey messages sent at once: a partition whose
    producer is still being created is not unavailable, so nothing fails over (issue 28)."""
    broker = Broker(tmp_path / "broker8", partitions=8)
    broker.start()
    try:
        daemon = start_daemon(broker.url)
        topics = [f"persistent://public/default/{unique('fresh')}" for _ in range(6)]
        keyed_to_fresh_topics_stay_on_k_mod_n(daemon, broker.url, topics, 8)
    finally:
        broker.kill()


#: Where the compiled intake reads (the kernel queue's length picks one; both are run here).
RECEIVE = pytest.mark.parametrize("receive", ["thread", "loop"], ids=lambda r: f"receive-{r}")


@RECEIVE
def test_order_within_a_partition_is_preserved(
    broker: Broker, start_daemon, monkeypatch: pytest.MonkeyPatch, receive: str
) -> None:
    monkeypatch.setenv("PULSAR_BRUCE_RECEIVE", receive)
    daemon = start_daemon(broker.url, "--batch-max-messages", "7")
    topic = unique("order")
    daemon.warm_up(topic, 4)
    n = 3000
    with daemon.sender() as sender:
        for i in range(n):
            sender.send(topic, struct.pack(">I", i), partition_key=i % 4)
    daemon.wait_settled(1 + n)
    by_partition: dict[int, list[int]] = defaultdict(list)
    for message in consume(broker.url, f"persistent://public/default/{topic}", 1 + n):
        if message.value != b"warm-up":
            by_partition[message.partition].append(struct.unpack(">I", message.value)[0])
    assert sum(len(v) for v in by_partition.values()) == n
    for partition, values in by_partition.items():
        assert values == sorted(values), f"partition {partition} out of order"
        assert all(v % 4 == partition for v in values)


def test_any_partition_spreads_over_all_partitions(broker: Broker, start_daemon) -> None:
    daemon = start_daemon(broker.url, "--batch-max-messages", "10")
    topic = unique("spread")
    n = 400
    with daemon.sender() as sender:
        for i in range(n):
            sender.send(topic, b"x%d" % i)
    daemon.wait_settled(n)
    messages = consume(broker.url, f"persistent://public/default/{topic}", n)
    per_partition = Counter(m.partition for m in messages)
    assert len(messages) == n
    assert set(per_partition) == {0, 1, 2, 3}, per_partition


def test_large_value_of_100_kb(broker: Broker, start_daemon) -> None:
    daemon = start_daemon(broker.url)
    topic = unique("large")
    value = bytes(range(256)) * 400  # 102,400 bytes
    with daemon.sender() as sender:
        sender.send(topic, value, key=b"big")
    daemon.wait_settled(1)
    [message] = consume(broker.url, f"persistent://public/default/{topic}", 1)
    assert message.value == value


def test_malformed_datagrams_are_counted_while_good_ones_flow(broker: Broker, start_daemon) -> None:
    from to_pulsar.encoding import encode_any_partition

    daemon = start_daemon(broker.url)
    topic = unique("mixed")
    good = encode_any_partition(topic, b"good")
    bad = {
        "malformed": good[:-1],  # Size no longer matches
        "unsupported_api_key": struct.pack(">ihh", 8, 999, 0),
        "unsupported_version": good[:6] + b"\x00\x01" + good[8:],
        # The encoder refuses "a/b" (the daemon's rule), so the name is patched in afterwards.
        "bad_topic": encode_any_partition("a-b", b"x").replace(b"a-b", b"a/b", 1),
    }
    for _ in range(10):
        for datagram in bad.values():
            daemon.send_raw(datagram)
        daemon.send_raw(good)
    counters = daemon.wait_settled(50)
    assert counters.acked == 10
    for reason in bad:
        assert counters.discarded[reason] == 10, reason
    assert counters.identity_holds()
    assert len(consume(broker.url, f"persistent://public/default/{topic}", 10)) == 10


@RECEIVE
def test_accounting_identity_holds_during_a_stream(
    broker: Broker, start_daemon, monkeypatch: pytest.MonkeyPatch, receive: str
) -> None:
    monkeypatch.setenv("PULSAR_BRUCE_RECEIVE", receive)
    daemon = start_daemon(broker.url)
    topic = unique("identity")
    stop = threading.Event()

    def produce() -> None:
        with daemon.sender() as sender:
            for i in range(5000):
                sender.send(topic, b"m%d" % i, partition_key=i)
                if i % 97 == 0:
                    sender.send_raw(b"\x00\x00\x00\x10junk!")  # Size != length
        stop.set()

    thread = threading.Thread(target=produce)
    thread.start()
    scrapes = 0
    while not stop.is_set() or scrapes < 3:
        counters = daemon.counters()
        assert counters.identity_holds(), counters
        scrapes += 1
    thread.join()
    final = daemon.wait_settled(5000 + 52)
    assert final.acked == 5000 and final.discarded["malformed"] == 52


def test_non_partitioned_topic_takes_everything(flat_broker: Broker, start_daemon) -> None:
    daemon = start_daemon(flat_broker.url)
    topic = unique("flat")
    with daemon.sender() as sender:
        for i in range(30):
            sender.send(topic, b"f%d" % i, partition_key=i)
        for i in range(30):
            sender.send(topic, b"g%d" % i)
    daemon.wait_settled(60)
    messages = consume(flat_broker.url, f"persistent://public/default/{topic}", 60)
    assert len(messages) == 60
    assert {m.partition for m in messages} == {-1}
    assert [m.value for m in messages][:30] == [b"f%d" % i for i in range(30)]


def test_full_topic_names_and_tenant_namespace_form(broker: Broker, start_daemon) -> None:
    daemon = start_daemon(broker.url)
    topic = unique("named")
    with daemon.sender() as sender:
        sender.send(topic, b"short")
        sender.send(f"public/default/{topic}", b"three-part")
        sender.send(f"persistent://public/default/{topic}", b"full")
    daemon.wait_settled(3)
    values = {m.value for m in consume(broker.url, f"persistent://public/default/{topic}", 3)}
    assert values == {b"short", b"three-part", b"full"}


def test_sigterm_delivers_everything_buffered(broker: Broker, start_daemon) -> None:
    daemon = start_daemon(broker.url, "--batch-max-delay-ms", "1000")
    topic = unique("sigterm")
    n = 2000
    with daemon.sender() as sender:
        for i in range(n):
            sender.send(topic, b"s%d" % i)
    wait_for(lambda: daemon.counters().received == n, 30, "datagrams received")
    assert daemon.terminate() == 0
    assert "shutdown timeout" not in daemon.log()
    messages = consume(broker.url, f"persistent://public/default/{topic}", n)
    assert len(messages) == n


def test_broker_restart_during_a_stream_loses_nothing(own_broker: Broker, start_daemon) -> None:
    daemon = start_daemon(own_broker.url, "--batch-max-messages", "50")
    topic = unique("restart")
    n = 6000
    with daemon.sender() as sender:
        for i in range(n):
            sender.send(topic, struct.pack(">I", i), partition_key=i)
            if i == 2000:
                wait_for(lambda: daemon.counters().acked > 500, 30, "some acks")
                own_broker.kill()
            if i == 4000:
                own_broker.start()
    counters = daemon.wait_settled(n, timeout=90)
    assert counters.acked == n and counters.total_discarded == 0
    values = {
        struct.unpack(">I", m.value)[0]
        for m in consume(
            own_broker.url,
            f"persistent://public/default/{topic}",
            n + counters.possible_duplicates,
            timeout=30,
        )
    }
    assert values == set(range(n))
