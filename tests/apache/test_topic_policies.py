"""What the broker refuses, on Apache Pulsar: every message counted, other topics flowing.

Each case is a refusal the Java broker makes on its own terms (terminated topics,
backlog quotas, auto-creation off, a topic's message size limit); the daemon must
count what it gives up within a bounded time (well before ``--send-timeout-s``),
keep every other topic flowing, and deliver what the broker accepts again.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable

import pytest

from tests.support.apache_pulsar import AdminError, ApachePulsar
from tests.support.consume import consume
from tests.support.processes import Daemon, wait_for

pytestmark = pytest.mark.apache

#: Long enough that a discard before it shows the daemon gave up on the broker's word.
SEND_TIMEOUT = ("--send-timeout-s", "300")


def namespace(apache: ApachePulsar, prefix: str) -> str:
    name = f"public/{prefix}-{uuid.uuid4().hex[:8]}"
    apache.admin.create_namespace(name)
    return name


def discarded(daemon: Daemon, reason: str) -> Callable[[], float]:
    return lambda: daemon.counters().discarded.get(reason, 0)


def test_terminated_topic_is_rejected_others_flow(apache: ApachePulsar, start_daemon) -> None:
    daemon = start_daemon(apache.url, *SEND_TIMEOUT)
    ns = namespace(apache, "term")
    dead, alive = f"persistent://{ns}/dead", f"persistent://{ns}/alive"
    with daemon.sender() as sender:
        sender.send(dead, b"before")
        sender.send(alive, b"before")
        daemon.wait_settled(2, timeout=60)
        apache.admin.terminate(dead)
        for i in range(20):
            sender.send(dead, b"after%d" % i)
            sender.send(alive, b"after%d" % i)
    counters = daemon.wait_settled(42, timeout=60)
    assert counters.discarded.get("broker_rejected") == 20 and counters.acked == 22
    assert counters.identity_holds()
    assert len(consume(apache.url, alive, 21)) == 21
    assert "TopicTerminatedError" in daemon.log()


def fill_backlog(apache: ApachePulsar, daemon: Daemon, topic: str, policy: str) -> None:
    """A subscription that acks nothing, a 10 KB quota, and 40 KB sent (uncompressed): the
    broker's next quota check (every second here) finds the topic over it and closes the
    producer; re-created, it is refused (``ProducerBlockedQuotaExceeded...``)."""
    import pulsar

    client = pulsar.Client(apache.url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    try:
        client.subscribe(topic, "slow").close()  # the subscription stays, with its backlog
    finally:
        client.close()
    apache.admin.set_backlog_quota(topic.split("://")[1].rsplit("/", 1)[0], 10_240, policy)
    with daemon.sender() as sender:
        for i in range(40):
            sender.send(topic, b"%04d" % i + b"x" * 1000)
    daemon.wait_settled(40, timeout=60)

    wait_for(lambda: not apache.admin.topic_stats(topic)["publishers"], 30, "the quota check")


def drain(apache: ApachePulsar, topic: str) -> None:
    """The slow subscription catches up: the topic is within its quota again."""
    path = f"/admin/v2/persistent/{topic.split('://')[1]}/subscription/slow/skip_all"
    apache.admin.call("POST", path)


def test_backlog_quota_producer_exception(apache: ApachePulsar, start_daemon) -> None:
    """``producer_exception``: the broker refuses the producer (the Java client fails its
    pending sends at once); what waits is counted, and sending works again once drained."""
    daemon = start_daemon(apache.url, *SEND_TIMEOUT, "--compression", "none")
    ns = namespace(apache, "quota-exc")
    topic, other = f"persistent://{ns}/full", f"persistent://{ns}/other"
    fill_backlog(apache, daemon, topic, "producer_exception")
    with daemon.sender() as sender:
        for i in range(10):
            sender.send(topic, b"over%d" % i)
            sender.send(other, b"other%d" % i)
    wait_for(lambda: discarded(daemon, "broker_rejected")() >= 10, 60, "10 counted discards")
    counters = daemon.wait_settled(60, timeout=60)
    assert counters.acked == 50 and counters.identity_holds()
    drain(apache, topic)
    ready = f'pulsar_bruce_topic_partitions_ready{{topic="{topic}"}}'
    wait_for(lambda: daemon.metrics().get(ready) == 1, 90, "the producer accepted again")
    with daemon.sender() as sender:
        sender.send(topic, b"again")
    counters = daemon.wait_settled(61, timeout=30)
    assert counters.acked == 51


def test_backlog_quota_producer_request_hold(apache: ApachePulsar, start_daemon) -> None:
    """``producer_request_hold``: the broker holds the producer off; nothing is given up, and
    everything held is delivered once the backlog is drained."""
    daemon = start_daemon(apache.url, *SEND_TIMEOUT, "--compression", "none")
    ns = namespace(apache, "quota-hold")
    topic = f"persistent://{ns}/held"
    fill_backlog(apache, daemon, topic, "producer_request_hold")
    with daemon.sender() as sender:
        for i in range(10):
            sender.send(topic, b"held%d" % i)
    wait_for(lambda: daemon.counters().received == 50, 30, "the held messages read")
    assert daemon.counters().buffered == 10  # waiting, not given up
    drain(apache, topic)
    counters = daemon.wait_settled(50, timeout=120)
    assert counters.acked == 50 and sum(counters.discarded.values()) == 0
    values = {m.value for m in consume(apache.url, topic, 50)}
    assert {b"held%d" % i for i in range(10)} <= values


def test_auto_creation_off_topic_not_found(apache: ApachePulsar, start_daemon) -> None:
    ns = namespace(apache, "nocreate")
    apache.admin.set_auto_topic_creation(ns, False)
    existing = f"persistent://{ns}/exists"
    apache.admin.create_topic(existing)
    daemon = start_daemon(apache.url, *SEND_TIMEOUT)
    with daemon.sender() as sender:
        for i in range(5):
            sender.send(f"persistent://{ns}/missing", b"m%d" % i)
            sender.send(existing, b"e%d" % i)
    counters = daemon.wait_settled(10, timeout=60)
    assert counters.discarded.get("broker_rejected") == 5 and counters.acked == 5
    assert "TopicNotFound" in daemon.log() or "not found" in daemon.log().lower()
    with pytest.raises(AdminError):
        apache.admin.topic_stats(f"persistent://{ns}/missing")


def test_topic_max_message_size_below_the_brokers(apache: ApachePulsar, start_daemon) -> None:
    """A topic policy of 8 KB (the broker's limit is 5 MiB): batches are split to fit it,
    a message over it is discarded and counted, and everything else arrives."""
    ns = namespace(apache, "msgsize")
    topic = f"persistent://{ns}/small"
    apache.admin.create_topic(topic)
    apache.admin.set_max_message_size(topic, 8192)
    wait_for(
        lambda: apache.admin.get(f"/admin/v2/persistent/{ns}/small/maxMessageSize") == "8192",
        30,
        "the topic policy",
    )
    daemon = start_daemon(apache.url, *SEND_TIMEOUT, "--compression", "none")
    values = [b"%04d" % i + b"v" * 500 for i in range(100)]  # about 50 KB: several batches
    with daemon.sender() as sender:
        for value in values[:50]:
            sender.send(topic, value)
        sender.send(topic, b"big" * 6000)  # 18 KB: over the topic's limit
        for value in values[50:]:
            sender.send(topic, value)
    counters = daemon.wait_settled(101, timeout=90)
    assert counters.acked == 100 and sum(counters.discarded.values()) == 1
    assert sorted(m.value for m in consume(apache.url, topic, 100)) == sorted(values)
