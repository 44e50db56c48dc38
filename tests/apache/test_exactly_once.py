"""Exactly once on Apache Pulsar with deduplication on: a stream sender that begins with a
Producer record, dies midway and starts over (on another daemon, with other batch sizes,
so the attempts cut their batches differently) stores every message once; the same
without the Producer record (the control) stores the early messages twice."""

from __future__ import annotations

import socket
import time
import uuid
from collections import Counter
from typing import Any

import pytest
from pulsar_bruce.parse.producer_record import decode_producer_record, encode_producer_record
from to_pulsar.encoding import encode_any_partition, encode_partition_key

from tests.support.apache_pulsar import ApachePulsar
from tests.support.consume import consume
from tests.support.processes import wait_for

pytestmark = pytest.mark.apache

ROWS = 1200
FIRST_ATTEMPT = 700  # rows the first attempt sends before it dies


def records(topic: str) -> list[bytes]:
    """The rows a task sends, in its (deterministic) order: most round-robin, some keyed."""
    out = []
    for i in range(ROWS):
        value = b"row-%05d" % i
        out.append(encode_partition_key(i % 7, topic, value) if i % 5 == 0
                   else encode_any_partition(topic, value))  # fmt: skip
    return out


def die_midway(daemon: Any, head: bytes, rows: list[bytes]) -> None:
    """Write ``head`` and ``rows`` on a stream connection, wait until the daemon has taken
    them all, then close without a flush (a task killed before its end)."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.connect(daemon.stream_path)
        sock.sendall(head + b"".join(rows))
        wait_for(lambda: daemon.counters(cheap=True).received >= len(rows), 60, "rows read")


def run_to_the_end(daemon: Any, head: bytes, rows: list[bytes]) -> tuple[int, dict[str, int]]:
    from to_pulsar.stream import StreamSender

    with StreamSender(daemon.stream_path, timeout=60) as sender:
        if head:
            sender.publish_as(*decode_producer_record(head))
        for row in rows:
            sender.send_raw(row)
        result = sender.flush(timeout=120)
    return result.acked, dict(result.discarded)


def stored(apache: ApachePulsar, topic: str, at_least: int) -> Counter[bytes]:
    """Every value stored on ``topic`` (waiting a while past ``at_least`` for extra copies)."""
    return Counter(m.value for m in consume(apache.url, topic, at_least + 1, timeout=20))


@pytest.fixture
def namespace(apache: ApachePulsar) -> str:
    name = f"public/once-{uuid.uuid4().hex[:8]}"
    apache.admin.create_namespace(name)
    apache.admin.set_deduplication(name, True)
    return name


@pytest.mark.parametrize("exactly_once", [True, False], ids=["producer-record", "control"])
def test_a_retried_sender_stores_nothing_twice(
    apache: ApachePulsar, start_daemon: Any, namespace: str, exactly_once: bool
) -> None:
    topic = f"persistent://{namespace}/t-{uuid.uuid4().hex[:8]}"
    apache.admin.create_partitioned_topic(topic, 3)
    rows = records(topic)
    head = encode_producer_record(f"job-{uuid.uuid4().hex[:8]}-p0", 0) if exactly_once else b""
    first = start_daemon(apache.url, "--batch-max-messages", "7", "--batch-max-delay-ms", "1")
    die_midway(first, head, rows[:FIRST_ATTEMPT])
    # The first daemon delivers what it read, and (exactly once) closes its producers.
    wait_for(lambda: first.counters(cheap=True).acked >= FIRST_ATTEMPT, 90, "first attempt")
    second = start_daemon(apache.url, "--batch-max-messages", "50")
    acked, discarded = run_to_the_end(second, head, rows)
    assert (acked, discarded) == (ROWS, {})  # a duplicate is confirmed, not a failure
    values = stored(apache, topic, ROWS + (0 if exactly_once else FIRST_ATTEMPT))
    assert set(values) == {b"row-%05d" % i for i in range(ROWS)}  # 0 missing
    twice = sum(count - 1 for count in values.values())
    metrics = second.metrics(["pulsar_bruce_already_stored_total"])
    if exactly_once:
        assert twice == 0
        assert metrics["pulsar_bruce_already_stored_total"] == FIRST_ATTEMPT
    else:
        assert twice == FIRST_ATTEMPT
        assert metrics["pulsar_bruce_already_stored_total"] == 0


def test_a_retry_while_the_first_attempts_producers_still_hold_the_name(
    apache: ApachePulsar, start_daemon: Any, namespace: str
) -> None:
    """On one daemon, the retry's connection comes while the first one's messages may
    still be in flight: its producers wait for the name (ProducerBusy) and then take out
    what the broker already has."""
    topic = f"persistent://{namespace}/t-{uuid.uuid4().hex[:8]}"
    apache.admin.create_partitioned_topic(topic, 2)
    rows = records(topic)
    head = encode_producer_record(f"job-{uuid.uuid4().hex[:8]}-p3", 1 << 32)
    daemon = start_daemon(apache.url, "--batch-max-messages", "20")
    die_midway(daemon, head, rows[:FIRST_ATTEMPT])
    started = time.monotonic()
    acked, discarded = run_to_the_end(daemon, head, rows)
    assert (acked, discarded) == (ROWS, {}), time.monotonic() - started
    values = stored(apache, topic, ROWS)
    assert len(values) == ROWS and max(values.values()) == 1


def test_a_sender_into_a_topic_with_a_small_size_limit_stores_every_row_once(
    apache: ApachePulsar, start_daemon: Any, namespace: str
) -> None:
    """A topic's maxMessageSize policy (2 KiB) below the daemon's batch size, exactly once:
    the refused batches behind which nothing was stored go again in halves, in id order,
    so every row is stored once (issue 36, point 9: most rows came back ``too_large``)."""
    topic = f"persistent://{namespace}/small-{uuid.uuid4().hex[:8]}"
    apache.admin.create_topic(topic)
    apache.admin.set_max_message_size(topic, 2048)
    policy = f"/admin/v2/persistent/{namespace}/{topic.rsplit('/', 1)[1]}/maxMessageSize"
    wait_for(lambda: apache.admin.get(policy) == "2048", 30, "the topic policy")
    rows = [encode_any_partition(topic, b"row-%05d-" % i + b"x" * 90) for i in range(2000)]
    head = encode_producer_record(f"job-{uuid.uuid4().hex[:8]}-p0", 0)
    daemon = start_daemon(apache.url, "--compression", "none")
    acked, discarded = run_to_the_end(daemon, head, rows)
    assert (acked, discarded) == (2000, {})
    values = stored(apache, topic, 2000)
    assert len(values) == 2000 and max(values.values()) == 1
