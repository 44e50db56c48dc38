"""The daemon following its topics where a Java broker sends them (``tests/fakebroker.py``).

- Blue-green cluster migration (protocol v20): the Java broker tells each producer
  ``TopicMigrated`` with the new cluster's service URLs, then ``CloseProducer``
  (pulsar-broker ``Producer.topicMigrated``); a producer created on the old
  cluster afterwards gets the same pair and no answer
  (``ServerCnx.buildProducerAndAddTopic``).  The Java client then looks the topic
  up on the new cluster (``ConnectionHandler.grabCnx`` with ``redirectedClusterURI``).
- The extensible load manager moving a bundle: ``CloseProducer`` carries
  ``assignedBrokerServiceUrl`` (``ServerCnx.closeProducer``), and the Java client
  connects straight there without a lookup and without a backoff delay
  (``ClientCnx.handleCloseProducer``).
- ``--advertised-listener``: every lookup names the listener, and the Java broker
  answers with that listener's address (``ServerCnx.handleLookup``).

Every test runs the real daemon process against two fake brokers: ``blue`` (the
service URL) and ``green`` (where the topic goes).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator

import pytest

from tests.support.fakebroker import FakeBroker
from tests.support.processes import Daemon, wait_for

pytestmark = pytest.mark.timeout(60)

FAST = ("--batch-max-delay-ms", "5")


@pytest.fixture
def blue_green() -> Iterator[tuple[FakeBroker, FakeBroker]]:
    pair = (FakeBroker().start(), FakeBroker().start())
    yield pair
    for broker in pair:
        assert broker.errors() == [], broker.errors()
        broker.stop()


def topic_names(what: str) -> tuple[str, str]:
    """A fresh short topic name and the full name brokers see."""
    short = f"moves-{what}-{uuid.uuid4().hex[:8]}"
    return short, f"persistent://public/default/{short}"


def send(daemon: Daemon, topic: str, *values: bytes) -> None:
    with daemon.sender() as sender:
        for value in values:
            sender.send(topic, value)


def one_acked_one_in_flight(daemon: Daemon, blue: FakeBroker, topic: str) -> str:
    """``before`` acked by blue, ``in-flight`` written to blue and never confirmed; the
    producer's name."""
    send(daemon, topic, b"before")
    wait_for(lambda: daemon.counters().acked == 1, 10, "the first message acked on blue")
    blue.swallow_receipts()
    send(daemon, topic, b"in-flight")
    wait_for(lambda: len(blue.messages()) == 2, 10, "the in-flight message to reach blue")
    return blue.producer_requests()[0].assigned_name


def test_a_migrated_topic_is_followed_to_the_new_cluster_with_what_was_in_flight(
    blue_green: tuple[FakeBroker, FakeBroker], start_daemon: Callable[..., Daemon]
) -> None:
    blue, green = blue_green
    daemon = start_daemon(blue.url, *FAST)
    topic, full = topic_names("migrated")
    name = one_acked_one_in_flight(daemon, blue, topic)

    assert blue.migrate_topic(full, green.url) == 1
    wait_for(green.producer_requests, 10, "the producer to be created on green")
    send(daemon, topic, b"after")

    counters = daemon.wait_settled(3)
    assert counters.acked == 3 and counters.identity_holds()
    assert counters.possible_duplicates == 1
    assert blue.values() == [b"before", b"in-flight"]
    assert green.values() == [b"in-flight", b"after"]
    assert [lookup.topic for lookup in green.lookups()] == [full]  # asked green, not blue
    assert len(blue.lookups()) == 1
    assert green.producer_requests()[0].requested_name == name
    assert f"{full} migrated to the cluster at {green.url}" in daemon.log()


def test_a_producer_refused_by_a_migrated_topic_follows_it_at_once(
    blue_green: tuple[FakeBroker, FakeBroker], start_daemon: Callable[..., Daemon]
) -> None:
    """Blue never answers the Producer command for a migrated topic: the CloseProducer that
    follows the TopicMigrated must end the wait, not the 30 s request timeout."""
    blue, green = blue_green
    topic, full = topic_names("refused")
    assert blue.migrate_topic(full, green.url) == 0  # no producer yet
    daemon = start_daemon(blue.url, *FAST)

    send(daemon, topic, b"first")

    assert daemon.wait_settled(1).acked == 1
    assert [r.topic for r in blue.producer_requests()] == [full]  # asked, never answered
    assert green.values() == [b"first"] and blue.values() == []
    assert f"closed producer {blue.producer_requests()[0].producer_id} while creating it" in (
        daemon.log()
    )


def test_a_producer_closed_with_an_assigned_broker_goes_there_without_a_lookup(
    blue_green: tuple[FakeBroker, FakeBroker], start_daemon: Callable[..., Daemon]
) -> None:
    blue, green = blue_green
    daemon = start_daemon(blue.url, *FAST)
    topic, full = topic_names("assigned")
    name = one_acked_one_in_flight(daemon, blue, topic)

    assert blue.close_producer(full, assigned_url=green.url) == 1
    wait_for(green.producer_requests, 10, "the producer to be created on green")
    send(daemon, topic, b"after")

    counters = daemon.wait_settled(3)
    assert counters.acked == 3 and counters.identity_holds()
    assert green.values() == [b"in-flight", b"after"]
    assert "LOOKUP" not in green.commands() and len(blue.lookups()) == 1
    assert green.producer_requests()[0].requested_name == name
    assert f"broker moved the producer for {full} to {green.url}" in daemon.log()
    assert "reconnecting in 0.00 s" in daemon.log()  # no backoff: the broker said where


def test_lookups_name_the_advertised_listener(
    blue_green: tuple[FakeBroker, FakeBroker], start_daemon: Callable[..., Daemon]
) -> None:
    blue, green = blue_green
    blue.listeners = {"internal": green.url}  # blue's address on the "internal" network
    daemon = start_daemon(blue.url, "--advertised-listener", "internal", *FAST)
    topic, full = topic_names("listener")

    send(daemon, topic, b"through the internal listener")

    assert daemon.wait_settled(1).acked == 1
    assert [(x.topic, x.listener) for x in blue.lookups()] == [(full, "internal")]
    assert green.values() == [b"through the internal listener"]


def test_without_the_option_lookups_name_no_listener(
    blue_green: tuple[FakeBroker, FakeBroker], start_daemon: Callable[..., Daemon]
) -> None:
    blue, green = blue_green
    blue.listeners = {"internal": green.url}
    daemon = start_daemon(blue.url, *FAST)
    topic, full = topic_names("no-listener")

    send(daemon, topic, b"default listener")

    assert daemon.wait_settled(1).acked == 1
    assert [(x.topic, x.listener) for x in blue.lookups()] == [(full, None)]
    assert blue.values() == [b"default listener"] and green.commands() == []
