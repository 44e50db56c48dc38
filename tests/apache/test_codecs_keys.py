"""Codecs, chunking and Key_Shared dispatch on Apache Pulsar, read back with the official client.

The Java broker's Key_Shared dispatcher (``PersistentStickyKeyDispatcherMultipleConsumers``)
picks the consumer of a whole entry from the entry's ``MessageMetadata`` key
(``peekStickyKey``: the ordering key, else the partition key); an entry without a
key goes where every keyless entry goes, one consumer.
"""

from __future__ import annotations

import os
import random
import time
import uuid
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path

import pytest
from to_pulsar import FlushResult, StreamSender

from tests.support.apache_pulsar import ApachePulsar
from tests.support.consume import consume
from tests.support.processes import Daemon

pytestmark = pytest.mark.apache


def unique(prefix: str) -> str:
    return f"persistent://public/default/{prefix}-{uuid.uuid4().hex[:10]}"


@pytest.mark.parametrize("codec", ["none", "lz4", "zlib", "zstd", "snappy"])
def test_every_codec_reads_back(apache: ApachePulsar, start_daemon, codec: str) -> None:
    daemon = start_daemon(apache.url, "--compression", codec)
    topic = unique(f"codec-{codec}")
    values = [(b"%05d compressible text " % i) * 20 for i in range(300)]
    with daemon.sender() as sender:
        for value in values:
            sender.send(topic, value, key=b"k")
    counters = daemon.wait_settled(len(values), timeout=60)
    assert counters.acked == len(values) and counters.identity_holds()
    assert [m.value for m in consume(apache.url, topic, len(values))] == values


def test_compressed_and_uncompressed_batches_on_one_topic_read_back_in_order(
    apache: ApachePulsar, start_daemon
) -> None:
    """On an LZ4 topic, batches of random values (LZ4 does not save an eighth) go with
    compression NONE, batches of text with LZ4, in turns on one topic; the official consumer
    reads every value, in order, from the mix."""
    daemon = start_daemon(apache.url, "--compression", "lz4", "--batch-max-messages", "50")
    topic = unique("codec-mix")
    noise = random.Random(37)
    phases = [
        [noise.randbytes(500) for _ in range(150)],
        [(b"%05d compressible text " % i) * 20 for i in range(150)],
        [noise.randbytes(500) for _ in range(150)],
    ]
    sent = 0
    with daemon.sender() as sender:
        for values in phases:  # each phase settled first: batches never mix the kinds
            for value in values:
                sender.send(topic, value)
            sent += len(values)
            daemon.wait_settled(sent, timeout=60)
    samples = daemon.metrics()
    uncompressed = samples["pulsar_bruce_batches_uncompressed_total"]
    assert 0 < uncompressed < samples["pulsar_bruce_batches_sent_total"]  # both kinds went
    everything = [value for values in phases for value in values]
    assert [m.value for m in consume(apache.url, topic, sent, timeout=60)] == everything


def test_12_mb_message_goes_in_chunks(apache: ApachePulsar, start_daemon, tmp_path: Path) -> None:
    """Above the broker's 5 MiB ``maxMessageSize`` a message is chunked; the official
    consumer reassembles it, key, properties and event time included."""
    stream = str(tmp_path / "st.sock")
    start_daemon(apache.url, "--stream-socket", stream, "--compression", "lz4")
    topic = unique("chunked")
    value = os.urandom(12_000_000)
    with StreamSender(stream, timeout=120) as sender:
        sender.send(topic, b"before")
        sender.send(topic, value, key="big", timestamp_ms=1234, properties={"kind": "chunked"})
        sender.send(topic, b"after")
        assert sender.flush() == FlushResult(3, {})
    messages = consume(apache.url, topic, 3, timeout=60)
    assert [len(m.value) for m in messages] == [6, len(value), 5]
    big = messages[1]
    assert big.value == value
    assert (big.key, big.event_time, big.properties) == ("big", 1234, {"kind": "chunked"})


KEYS = [f"device-{i}" for i in range(40)]
ROUNDS = 5


def read_key_shared(
    apache: ApachePulsar, topic: str, send: Callable[[], None]
) -> list[dict[str, list[int]]]:
    """Two Key_Shared consumers on ``topic``; ``send()`` runs once they are subscribed.
    Returns, per consumer, the rounds of each key it got, in arrival order."""
    import pulsar

    client = pulsar.Client(apache.url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    seen: list[dict[str, list[int]]] = [defaultdict(list), defaultdict(list)]
    try:
        key_shared = pulsar.ConsumerType.KeyShared
        consumers = [
            client.subscribe(topic, "ks", consumer_type=key_shared, consumer_name=f"c{index}")
            for index in range(2)
        ]
        send()
        total, got = ROUNDS * len(KEYS), 0
        deadline = time.monotonic() + 60
        while got < total and time.monotonic() < deadline:
            for index, consumer in enumerate(consumers):
                try:
                    message = consumer.receive(200)
                except pulsar.Timeout:
                    continue
                key, round_ = message.data().decode().split("/")
                assert message.partition_key() == key
                consumer.acknowledge(message)
                seen[index][key].append(int(round_))
                got += 1
        assert got == total
    finally:
        client.close()
    return seen


def send_rounds(daemon: Daemon, topic: str) -> None:
    """Every key once per round, keys interleaved."""
    with daemon.sender() as sender:
        for round_ in range(ROUNDS):
            for key in KEYS:
                sender.send(topic, f"{key}/{round_}".encode(), key=key.encode())


def test_key_shared_with_key_based_batching(apache: ApachePulsar, start_daemon) -> None:
    """One key per batch, the batch carrying it: each key at one consumer, in order, and
    interleaved keys still make multi-message batches (one open batch per key)."""
    topic = unique("ks-kbb")
    daemon = start_daemon(apache.url, "--key-based-batching", "--batch-max-delay-ms", "200")

    seen = read_key_shared(apache, topic, lambda: send_rounds(daemon, topic))
    first, second = set(seen[0]), set(seen[1])
    assert first and second and not first & second
    for by_key in seen:
        for key, rounds in by_key.items():
            assert rounds == list(range(ROUNDS)), f"{key} out of order: {rounds}"
    counters = daemon.counters()
    assert counters.acked == ROUNDS * len(KEYS) and counters.possible_duplicates == 0
    entries = apache.admin.internal_stats(topic)["numberOfEntries"]
    assert entries <= ROUNDS * len(KEYS) // 2, f"{entries} entries: keys interleaved one by one"


def test_key_shared_without_key_based_batching(apache: ApachePulsar, start_daemon) -> None:
    """A batch carries its first message's key (as the Java client's do): batches of one
    message put each key at one consumer.  Keyless batches were spread over both."""
    topic = unique("ks-default")
    daemon = start_daemon(apache.url, "--batch-max-messages", "1")

    seen = read_key_shared(apache, topic, lambda: send_rounds(daemon, topic))
    first, second = set(seen[0]), set(seen[1])
    assert first and second
    assert not first & second, f"keys at both consumers: {sorted(first & second)}"
