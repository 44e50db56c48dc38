"""Producer names that cannot collide, against the fake broker modelling the Java broker.

The Java broker keeps one producer per name on a topic: a second producer
asking for a name already connected there is refused with ``ProducerBusy``
(pulsar-broker ``AbstractTopic.tryOverwriteOldProducer``: a ``NamingException``
"Producer with name '...' is already connected to topic", unless it is the same
producer re-created on the same connection).  pulsar-lite does not enforce it,
so the fake broker (``unique_producer_names=True``) does.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.fakebroker import FakeBroker
from tests.support.processes import Daemon, wait_for

pytestmark = pytest.mark.timeout(90)

CONFLICTS = "pulsar_bruce_producer_name_conflicts_total"


@pytest.fixture
def java_like_broker() -> Iterator[FakeBroker]:
    broker = FakeBroker(partitions=2, unique_producer_names=True).start()
    yield broker
    assert not broker.errors(), broker.errors()
    broker.stop()


def test_a_partition_addressed_directly_and_through_its_topic_has_one_producer(
    java_like_broker: FakeBroker, start_daemon
) -> None:
    broker = java_like_broker
    topic = f"both-{uuid.uuid4().hex[:8]}"
    partition0 = f"persistent://public/default/{topic}-partition-0"
    daemon = start_daemon(broker.url, "--producer-name-prefix", "edge-1")
    with daemon.sender() as sender:
        for i in range(20):
            sender.send(f"{topic}-partition-0", b"direct-%d" % i)
            sender.send(topic, b"any-%d" % i)
    counters = daemon.wait_settled(40)
    assert counters.acked == 40 and counters.identity_holds()
    assert daemon.metrics()[CONFLICTS] == 0
    requests = [r for r in broker.producer_requests() if r.topic == partition0]
    assert len({r.producer_id for r in requests}) == 1, requests
    direct = [m for m in broker.messages() if m.value.startswith(b"direct-")]
    assert {m.topic for m in direct} == {partition0}
    assert [m.value for m in direct] == [b"direct-%d" % i for i in range(20)]


def test_a_second_daemon_with_our_name_is_logged_once_counted_and_recovers(
    java_like_broker: FakeBroker, tmp_path: Path
) -> None:
    """Names are ``prefix-host-hash(socket path)``: two daemons of one host and prefix
    collide only when their socket paths read the same, here one relative path in two
    working directories (as two hosts with one host name and configuration would)."""
    broker = java_like_broker
    broker.partitions = 0
    topic = f"shared-{uuid.uuid4().hex[:8]}"
    args = ["--producer-name-prefix", "same", "--socket", "bruce.sock"]
    daemons = []
    try:
        for index in range(2):
            workdir = tmp_path / f"host{index}"
            workdir.mkdir()
            daemons.append(Daemon(workdir, broker.url, args, cwd=workdir))
            with daemons[-1].sender() as sender:
                sender.send(topic, b"from-%d" % index)
            if index == 0:
                daemons[0].wait_settled(1)
        first, second = daemons
        wait_for(lambda: second.metrics()[CONFLICTS] >= 3, 30, "three refusals of our name")
        assert second.counters().buffered == 1  # still trying, not given up
        assert second.log().count("refuses our producer name 'same-") == 1
        assert "--producer-name-prefix" in second.log()

        assert first.terminate() == 0  # the name is free again: the second daemon gets it
        counters = second.wait_settled(1)
        assert counters.acked == 1 and counters.identity_holds()
    finally:
        for daemon in daemons:
            daemon.kill()
