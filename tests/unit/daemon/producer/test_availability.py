"""When a partition counts as unavailable (PartitionKey failover), and how soon it is retried.

A partition stays available while its producer is being created or re-created
(its PartitionKey messages wait for it); it becomes unavailable once an attempt
finds no broker to talk to, or it has been away for ``failover_grace_s``.
Retries stay short while the cluster answers (``backoff.Retry``).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import re

import pytest
from pulsar_bruce.connection.broker_connection import (
    ConnectionClosedError,
    ProducerClosedError,
    ServerError,
)
from pulsar_bruce.connection.pool import TopicLookupError
from pulsar_bruce.frame import pulsar_api_pb2 as pb
from pulsar_bruce.producer.backoff import ANSWERED_MAX_S, Retry
from pulsar_bruce.producer.delivery import DeliveryPolicy
from pulsar_bruce.producer.faults import answered, unreachable

from tests.support.fakes_asyncio import FakeClock, FakePool, run_on_clock, until
from tests.unit.daemon.producer.helpers import LONG, PRODUCER_ID, Rig

NOT_READY = ServerError(pb.ServiceNotReady, "Namespace bundle is being unloaded")


def grace(seconds: float) -> DeliveryPolicy:
    return dataclasses.replace(LONG, failover_grace_s=seconds)


def test_a_new_producer_is_available_before_it_is_ready() -> None:
    async def test() -> None:
        rig = Rig(FakePool(lookups_hang=True))  # its lookup never completes
        rig.driver.start()
        await until(lambda: rig.pool.lookups, "the lookup")
        assert (rig.producer.ready, rig.producer.available) == (False, True)
        await rig.driver.stop()

    asyncio.run(test())


def test_an_owner_that_cannot_be_reached_makes_the_partition_unavailable_until_ready() -> None:
    async def test() -> None:
        pool = FakePool()
        pool.get_errors.append(ConnectionRefusedError(111, "Connection refused"))
        rig = Rig(pool)
        rig.driver.start()
        await until(lambda: not rig.producer.available, "the failed attempt")
        await rig.connected()
        assert (rig.producer.ready, rig.producer.available) == (True, True)
        await rig.driver.stop()

    asyncio.run(test())


def test_a_broker_that_answers_not_ready_is_waited_for_through_the_grace() -> None:
    async def test() -> None:
        pool = FakePool()
        pool.request_errors.extend([NOT_READY, NOT_READY])
        rig = Rig(pool, grace(3600.0))
        rig.driver.start()
        await rig.connected()
        assert len(pool.connection.requests) == 3  # two refusals, then the producer
        assert rig.producer.available
        await rig.driver.stop()

    asyncio.run(test())


def test_a_partition_away_past_the_grace_becomes_unavailable_and_comes_back() -> None:
    async def test() -> None:
        pool = FakePool()
        rig = Rig(pool, grace(0.05))
        rig.driver.start()
        await rig.connected()
        pool.request_errors.extend([NOT_READY] * 1000)  # the topic is not served for a while
        pool.connection.close_producer(rig.producer.producer_id)  # an unload
        assert rig.producer.available  # just lost: still waited for
        await until(lambda: not rig.producer.available, "the grace to end")
        pool.request_errors.clear()
        await until(lambda: rig.producer.ready, "the producer back")
        assert rig.producer.available
        await rig.driver.stop()

    asyncio.run(test())


def test_an_unload_within_the_grace_never_makes_the_partition_unavailable() -> None:
    async def test() -> None:
        pool = FakePool()
        rig = Rig(pool, grace(3600.0))
        rig.driver.start()
        await rig.connected()
        pool.request_errors.extend([NOT_READY] * 3)
        pool.connection.close_producer(rig.producer.producer_id)
        states: list[bool] = []
        await until(
            lambda: states.append(rig.producer.available) or rig.producer.ready, "re-created"
        )
        assert all(states)
        await rig.driver.stop()

    asyncio.run(test())


def test_retries_stay_short_while_the_broker_answers(caplog: pytest.LogCaptureFixture) -> None:
    async def test() -> None:
        pool = FakePool()
        pool.request_errors.extend([NOT_READY] * 7)  # 0.1 + 0.2 + 0.4 + 0.8 + 1 + 1 + 1 s at most
        rig = Rig(pool, grace(3600.0))
        rig.driver.start()
        await rig.connected()
        await rig.driver.stop()

    with caplog.at_level(logging.WARNING, logger="pulsar_bruce.producer.driver"):
        asyncio.run(test())
    delays = [float(d) for d in re.findall(r"retrying in ([\d.]+) s", caplog.text)]
    assert len(delays) == 7
    assert max(delays) <= ANSWERED_MAX_S


# -- the grace's gaps: every way a producer is away starts it --------------------------------


def test_a_new_producer_that_never_gets_ready_fails_over_after_the_grace() -> None:
    """The first attempt gets the grace too: a lookup that never answers used to leave the
    partition available for ever, its PartitionKey messages waiting."""

    async def test() -> None:
        rig = Rig(FakePool(lookups_hang=True), grace(0.05))
        rig.driver.start()
        await until(lambda: not rig.producer.available, "the grace to end")
        await rig.driver.stop()

    asyncio.run(test())


def test_a_producer_being_closed_for_re_creation_fails_over_after_the_grace() -> None:
    """A send error closes the producer to re-create it; a broker that does not answer the
    CloseProducer (a stalled bookie holds the writes it waits for) is given
    ``receipt_timeout_s`` before the connection is dropped.  The grace runs from the pause,
    not from the drop: failover 10 s after the pause, not 30 + 10 s."""
    clock = FakeClock()
    delivery = dataclasses.replace(LONG, receipt_timeout_s=30.0, failover_grace_s=10.0)

    async def test() -> None:
        pool = FakePool(unanswered=frozenset({pb.BaseCommand.CLOSE_PRODUCER}))
        rig = Rig(pool, delivery, clock=clock)
        rig.driver.start()
        await rig.connected()
        rig.seal(1)
        pool.connection.send_error(PRODUCER_ID, 0, pb.PersistenceError)
        paused = clock.now
        assert (rig.producer.ready, rig.producer.available) == (False, True)
        await asyncio.sleep(delivery.failover_grace_s + 0.5)  # moves the fake clock
        assert not pool.connection.aborted, "the close is still unanswered"
        assert clock.now - paused < delivery.receipt_timeout_s
        assert not rig.producer.available
        await rig.driver.stop()

    run_on_clock(test(), clock)


@pytest.mark.parametrize(
    "closed",
    [ConnectionClosedError("connection closed"), ProducerClosedError("producer closed")],
    ids=["connection", "producer"],
)
def test_a_connection_or_producer_closed_during_creation_is_waited_for(
    closed: Exception,
) -> None:
    """The broker was reached, then closed the connection or the producer while creating it
    (an unload, a rolling restart): that is no partition out of reach, so its PartitionKey
    messages wait through the grace; it used to fail them over at once."""

    async def test() -> None:
        pool = FakePool()
        pool.request_errors.append(closed)
        rig = Rig(pool, grace(3600.0))
        states: list[bool] = []
        rig.driver.start()
        await until(
            lambda: states.append(rig.producer.available) or rig.producer.ready, "created"
        )
        assert all(states)
        assert len(pool.connection.requests) == 2  # the closed creation, then the producer
        await rig.driver.stop()

    asyncio.run(test())


# -- the classification, sans-IO --------------------------------------------------------------


@pytest.mark.parametrize(
    ("exc", "owner_named", "expected"),
    [
        (NOT_READY, False, True),  # the topic is loading or moving
        (TopicLookupError("lookup: ServiceNotReady", pb.ServiceNotReady), False, True),
        (ServerError(pb.PersistenceError, "not enough bookies"), True, True),
        (ServerError(pb.TooManyRequests, "throttled"), True, False),  # asked to slow down
        (ServerError(pb.ProducerBusy, "name taken"), True, False),
        (ServerError(pb.TopicTerminatedError, "terminated"), True, False),  # permanent
        (ConnectionRefusedError(111, "refused"), True, True),  # a named owner that died
        (ConnectionClosedError("closed"), True, True),
        (ConnectionRefusedError(111, "refused"), False, False),  # no service host answers
        (TimeoutError(), True, False),  # a broker too slow to answer
    ],
)
def test_which_failures_count_as_answered(
    exc: Exception, owner_named: bool, expected: bool
) -> None:
    assert answered(exc, owner_named) is expected


def test_unreachable_is_about_no_answer_at_all() -> None:
    assert unreachable(ConnectionRefusedError()) and unreachable(TimeoutError())
    assert unreachable(ConnectionClosedError("gone"))
    assert not unreachable(NOT_READY)
    assert not unreachable(TopicLookupError("lookup failed", pb.ServiceNotReady))


def test_retry_keeps_answered_delays_short_and_grows_silent_ones() -> None:
    retry = Retry()
    answered_delays = [retry.next_delay(True) for _ in range(20)]
    assert max(answered_delays) <= ANSWERED_MAX_S
    silent = [retry.next_delay(False) for _ in range(20)]
    assert max(silent) > ANSWERED_MAX_S * 4
    retry.reset()
    assert retry.next_delay(False) <= 0.1 and retry.next_delay(True) <= 0.1
