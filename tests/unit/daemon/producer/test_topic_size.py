"""A topic whose own size limit is below the broker's: batches are cut to fit, single
messages over it are discarded as ``too_large`` (``producer/topic_size.py``)."""

from __future__ import annotations

import asyncio

from pulsar_bruce import reasons
from pulsar_bruce.frame import pulsar_api_pb2 as pb

from tests.support.fakes_asyncio import FakePool
from tests.unit.daemon.producer.helpers import PRODUCER_ID, driver_for, seal

TOPIC = "persistent://public/default/small"


def refuse(driver, sequence_id: int, message: str = "Exceed maximum message size") -> None:  # type: ignore[no-untyped-def]
    driver.on_send_error(
        pb.CommandSendError(
            producer_id=PRODUCER_ID, sequence_id=sequence_id, error=pb.NotAllowedError,
            message=message,
        )
    )  # fmt: skip


def test_a_batch_over_the_topic_limit_is_resent_in_halves_under_its_ids() -> None:
    async def scenario() -> None:
        driver, listener = await driver_for(TOPIC, FakePool())
        producer = driver.producer
        seal(driver, 4)  # ids 0..3, in flight
        before = producer.max_batch_bytes
        refuse(driver, 3)
        assert listener.discarded == []  # nothing given up
        assert [(b.count, b.sequence_id) for b in producer.pending] == [(2, 0), (2, 2)]
        assert producer.in_flight == 2  # both halves written again at once
        assert producer.max_batch_bytes < before
        await driver.stop()

    asyncio.run(scenario())


def test_a_single_message_over_the_topic_limit_is_discarded_too_large() -> None:
    async def scenario() -> None:
        driver, listener = await driver_for(TOPIC, FakePool())
        seal(driver, 1)
        refuse(driver, 0)
        assert [(b.count, why) for b, why in listener.discarded] == [(1, reasons.TOO_LARGE)]
        assert not driver.producer.pending
        await driver.stop()

    asyncio.run(scenario())


def test_other_not_allowed_errors_still_discard_as_broker_rejected() -> None:
    async def scenario() -> None:
        driver, listener = await driver_for(TOPIC, FakePool())
        seal(driver, 4)
        refuse(driver, 3, "Producer is not allowed to publish")
        assert [(b.count, why) for b, why in listener.discarded] == [
            (4, reasons.BROKER_REJECTED)
        ]
        await driver.stop()

    asyncio.run(scenario())
