"""What the driver makes of broker answers that look alike but are not (``producer/answers.py``):
receipts for message id -1:-1, ProducerBusy for a name or for a limit, refusals that are
permanent by their text, names the broker has seen ahead of us, and which re-writes count as
attempts."""

from __future__ import annotations

import asyncio
import logging

import pytest
from pulsar_bruce import reasons
from pulsar_bruce.connection.broker_connection import ConnectionClosedError, ServerError
from pulsar_bruce.frame import pulsar_api_pb2 as pb
from pulsar_bruce.producer.delivery import DeliveryPolicy

from tests.support.fakes_asyncio import FakePool, RecordingListener, until
from tests.unit.daemon.producer.helpers import (
    MINUS_ONE,
    PRODUCER_ID,
    Rig,
    driver_for,
    receipt,
    run_connected,
    seal,
    sent_ids,
)


class NamingListener(RecordingListener):
    def __init__(self) -> None:
        super().__init__()
        self.conflicts: list[tuple[str, str]] = []

    def producer_name_conflict(self, broker_topic: str, name: str) -> None:
        self.conflicts.append((broker_topic, name))


# -- receipts for message id -1:-1 ---------------------------------------------------------------


def test_a_minus_one_receipt_on_a_persistent_topic_is_deduplicated_not_acked() -> None:
    async def body(rig: Rig) -> None:
        rig.seal(2)
        rig.seal(1)
        rig.seal(1)
        rig.driver.on_receipt(receipt(0, MINUS_ONE, MINUS_ONE))
        rig.driver.on_receipt(receipt(2, 12, MINUS_ONE))  # either half -1 stored nothing
        rig.driver.on_receipt(receipt(3, 12, 7))
        assert [(b.sequence_id, why) for b, why in rig.listener.discarded] == [
            (0, reasons.DEDUPLICATED),
            (2, reasons.DEDUPLICATED),
        ]
        assert [b.sequence_id for b in rig.listener.acked] == [3]
        assert not rig.producer.pending  # matched and removed like any receipt

    run_connected(body)


def test_a_minus_one_receipt_on_a_non_persistent_topic_is_broker_dropped() -> None:
    async def scenario() -> None:
        driver, listener = await driver_for("non-persistent://public/default/np", FakePool())
        seal(driver, 3)
        seal(driver, 1)
        driver.on_receipt(receipt(0, MINUS_ONE, MINUS_ONE))
        driver.on_receipt(receipt(3, 0, 0))  # what the broker sends for a delivered one
        assert [(b.count, why) for b, why in listener.discarded] == [(3, reasons.BROKER_DROPPED)]
        assert [b.count for b in listener.acked] == [1]
        await driver.stop()

    asyncio.run(scenario())


def test_a_receipt_without_message_id_is_acked() -> None:
    async def body(rig: Rig) -> None:
        rig.seal(1)
        rig.pool.connection.receipt(PRODUCER_ID, 0)
        assert len(rig.listener.acked) == 1 and rig.listener.discarded == []

    run_connected(body)


def test_new_reasons_are_exported() -> None:
    assert {reasons.DEDUPLICATED, reasons.BROKER_DROPPED} <= set(reasons.ALL)
    assert len(set(reasons.ALL)) == len(reasons.ALL)


# -- a broker that has seen our name further than we numbered ----------------------------------


def test_re_registration_behind_the_brokers_last_id_renumbers_and_counts_duplicates(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def body(rig: Rig) -> None:
        rig.seal(2)
        rig.seal(1)
        assert sent_ids(rig) == [(0, 2), (2, 1)]
        rig.pool._connection_options["last_sequence_id"] = 40  # another daemon used our name
        with caplog.at_level(logging.WARNING):
            rig.pool.connection.lose()
            await rig.connected(2)
        assert sent_ids(rig, 2) == [(41, 2), (43, 1)]  # above the broker's, not 0 and 2
        # Three messages may now be stored twice: reported, with evidence.
        assert [b.count for b in rig.listener.possibly_stored] == [2, 1]
        (line,) = [r.getMessage() for r in caplog.records if "renumbered" in r.getMessage()]
        assert "edge" in line and "40" in line and " 2 we " in line

    run_connected(body, name="edge")


# -- ProducerBusy: a name conflict, or the topic's producer limit ------------------------------


def test_producer_busy_for_the_max_producers_limit_is_no_name_conflict(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def scenario() -> None:
        pool = FakePool()
        limit = "Topic 'persistent://public/default/t' reached max producers limit"
        pool.request_errors.extend([ServerError(pb.ProducerBusy, limit)] * 2)
        rig = Rig(pool, name="edge")
        rig.listener = listener = NamingListener()
        rig.driver.listener = listener
        rig.seal(1)
        rig.driver.start()
        await rig.connected()
        assert listener.conflicts == [] and listener.discarded == []
        assert sent_ids(rig) == [(0, 1)]
        warned = [r for r in caplog.records if "max producers limit" in r.getMessage()]
        assert [r.levelno for r in warned] == [logging.WARNING, logging.DEBUG]
        await rig.driver.stop()

    with caplog.at_level(logging.DEBUG, logger="pulsar_bruce.producer.driver"):
        asyncio.run(scenario())


def test_producer_busy_for_our_name_is_a_name_conflict() -> None:
    async def scenario() -> None:
        pool = FakePool()
        taken = "Producer with name 'edge' is already connected to topic"
        pool.request_errors.append(ServerError(pb.ProducerBusy, taken))
        rig = Rig(pool, name="edge")
        rig.listener = listener = NamingListener()
        rig.driver.listener = listener
        rig.driver.start()
        await rig.connected()
        assert listener.conflicts == [(rig.producer.topic, "edge")]
        await rig.driver.stop()

    asyncio.run(scenario())


# -- refusals that are permanent ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("error", "put"),
    [
        (ServerError(pb.MetadataError, "Encryption is required in persistent://p/n/t"), "request"),
        (ServerError(pb.AuthenticationError, "Unable to authenticate"), "request"),
        # A refused Connect handshake arrives as a closed connection (the lookup's, here).
        (ConnectionClosedError("AuthenticationError: Unable to authenticate"), "lookup"),
    ],
)
def test_a_refusal_for_good_discards_what_waits_at_once(error: Exception, put: str) -> None:
    async def scenario() -> None:
        pool = FakePool()
        (pool.request_errors if put == "request" else pool.lookup_errors).append(error)
        rig = Rig(pool)
        rig.seal(2)
        rig.driver.start()
        await until(lambda: rig.listener.discarded, "the discard")
        assert [(b.count, why) for b, why in rig.listener.discarded] == [
            (2, reasons.BROKER_REJECTED)
        ]
        await rig.connected()  # still retried with backoff; accepted again later
        assert rig.driver.rejected is None
        await rig.driver.stop()

    asyncio.run(scenario())


@pytest.mark.parametrize(
    "error",
    [
        ServerError(pb.MetadataError, "Failed to load topic metadata"),
        ConnectionClosedError("connection to broker:6650 closed"),
    ],
)
def test_other_metadata_errors_and_closed_connections_keep_the_batches(error: Exception) -> None:
    async def scenario() -> None:
        pool = FakePool()
        pool.request_errors.append(error)
        rig = Rig(pool)
        rig.seal(2)
        rig.driver.start()
        await rig.connected()
        assert rig.listener.discarded == [] and sent_ids(rig) == [(0, 2)]
        await rig.driver.stop()

    asyncio.run(scenario())


# -- max_send_attempts counts broker failures only --------------------------------------------

ONE_TRY = DeliveryPolicy(receipt_timeout_s=3600.0, send_timeout_s=0, max_send_attempts=1)


def test_lost_connections_and_closed_producers_are_no_send_attempts() -> None:
    """A rolling restart or a topic unload closes producers and connections (CloseProducer,
    then a lost connection): the Java client resends under its send timeout only."""

    async def body(rig: Rig) -> None:
        rig.seal(1)
        for number in (2, 3):
            rig.pool.connection.lose()
            await rig.connected(number)
        connection = rig.pool.connection
        connection.close_producer(PRODUCER_ID)
        await until(lambda: len(connection.sends) == 2, "the resend after CloseProducer")
        assert [len(c.sends) for c in rig.pool.opened] == [1, 1, 2]
        assert rig.listener.discarded == []
        assert rig.producer.pending[0].failed_sends == 0

    run_connected(body, delivery=ONE_TRY)


def test_a_mismatched_receipt_counts_against_the_batch() -> None:
    async def body(rig: Rig) -> None:
        rig.seal(1)
        connection = rig.pool.connection
        connection.receipt(PRODUCER_ID, 5)  # matches nothing: the producer is re-created
        await until(lambda: rig.listener.discarded, "the batch to be given up")
        # its one write was never answered: it may be stored, so not counted as lost
        assert rig.listener.discarded_for(reasons.UNCONFIRMED)
        assert len(connection.sends) == 1

    run_connected(body, delivery=ONE_TRY)
