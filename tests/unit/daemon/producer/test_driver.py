"""ProducerDriver against a fake pool and broker connection: connect, write, receipts,
reconnect and resend, broker errors, send and receipt timeouts, linger.

Time-driven checks give the driver a fake clock and move it; the driver's timers still run
on the event loop, so every wait is a condition with a deadline.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import pytest
from pulsar_bruce import reasons
from pulsar_bruce.connection.broker_connection import ServerError
from pulsar_bruce.connection.pool import TopicLookupError
from pulsar_bruce.frame import pulsar_api_pb2 as pb
from pulsar_bruce.producer.delivery import DeliveryPolicy
from pulsar_bruce.producer.partition_producer import BatchPolicy

from tests.support.fakes_asyncio import FakeClock, FakePool, until
from tests.unit.daemon.producer.helpers import PRODUCER_ID, TOPIC, Rig, run_connected, sent_ids

#: ``MessageDupUnknownException``'s text in the broker's ``PersistenceError``.
DUP_UNKNOWN = "[t][edge-1]Cannot determine whether the message is a duplicate at this time"


def run(test: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(test())


@pytest.fixture
def clock() -> FakeClock:
    """The driver's clock, moved by hand (its timers still run on the event loop's own)."""
    return FakeClock()


# -- connecting and writing ---------------------------------------------------------------------


def test_connect_registers_the_producer_and_writes_pending_batches_in_order() -> None:
    async def test() -> None:
        rig = Rig(FakePool(last_sequence_id=41))
        rig.seal(2)
        rig.seal(1)
        rig.seal(3)
        assert rig.pool.opened == []  # nothing written before a connection
        rig.driver.start()
        await rig.connected()
        connection = rig.pool.connection
        (create,) = connection.requests
        assert create.producer.topic == TOPIC
        assert create.producer.producer_id == PRODUCER_ID
        assert connection.producers[PRODUCER_ID] is rig.driver
        # The broker's last sequence id is where numbering continues.
        assert sent_ids(rig) == [(42, 2), (44, 1), (45, 3)]
        assert [[b.count for b in batches] for batches, _ in rig.listener.sent] == [[2, 1, 3]]
        assert rig.listener.sent[0][1] == 0  # nothing resent
        assert rig.producer.name == "broker-named-1"
        rig.seal(1)  # connected: written at once
        assert sent_ids(rig)[-1] == (48, 1)
        await rig.driver.stop()
        assert connection.producers == {}

    run(test)


def test_a_name_of_our_own_is_sent_as_user_provided() -> None:
    async def body(rig: Rig) -> None:
        (create,) = rig.pool.connection.requests
        assert create.producer.producer_name == "host-bruce-0"
        assert create.producer.user_provided_producer_name

    run_connected(body, name="host-bruce-0")


def test_receipts_ack_batches_through_the_listener() -> None:
    async def body(rig: Rig) -> None:
        rig.seal(2)
        rig.seal(1)
        connection = rig.pool.connection
        connection.receipt(PRODUCER_ID, 0)
        connection.receipt(PRODUCER_ID, 0)  # a duplicate receipt is stale: ignored
        connection.receipt(PRODUCER_ID, 2)
        assert [batch.sequence_id for batch in rig.listener.acked] == [0, 2]
        assert not rig.producer.pending
        assert connection.aborted == []

    run_connected(body)


def test_a_receipt_that_matches_nothing_recreates_the_producer_not_the_connection() -> None:
    """The producer is closed and created again on the same connection; everything
    unconfirmed is resent there (issue 11: recover the producer, not the connection)."""

    async def body(rig: Rig) -> None:
        rig.seal(1)
        rig.seal(1)
        connection = rig.pool.connection
        connection.receipt(PRODUCER_ID, 1)  # the second batch before the first
        assert rig.listener.acked == []
        await until(lambda: len(connection.sends) == 4, "the unconfirmed batches resent")
        assert connection.aborted == [] and len(rig.pool.opened) == 1
        kinds = [pb.BaseCommand.Type.Name(request.type) for request in connection.requests]
        assert kinds == ["PRODUCER", "CLOSE_PRODUCER", "PRODUCER"]
        assert sent_ids(rig) == [(0, 1), (1, 1), (0, 1), (1, 1)]

    run_connected(body)


# -- reconnect and resend --------------------------------------------------------------------


def test_after_a_lost_connection_every_unacked_batch_is_resent_in_order() -> None:
    async def body(rig: Rig) -> None:
        for count in (1, 2, 3):
            rig.seal(count)
        first = rig.pool.connection
        first.receipt(PRODUCER_ID, 0)
        first.lose()
        await until(lambda: rig.driver.connection is None, "the driver to notice")
        rig.seal(4)  # sealed while disconnected: goes after the resent ones
        await rig.connected(2)
        assert sent_ids(rig, 1) == [(0, 1), (1, 2), (3, 3)]
        assert sent_ids(rig, 2) == [(1, 2), (3, 3), (6, 4)]  # same sequence ids as before
        batches, resent = rig.listener.sent[-1]
        assert [batch.count for batch in batches] == [2, 3, 4]
        assert resent == 5  # the two batches written before: possible duplicates
        assert [batch.send_attempts for batch in batches] == [2, 2, 1]
        # The producer is re-created under the name the broker gave it, as a new epoch.
        create = rig.pool.connection.requests[-1].producer
        assert create.producer_name == "broker-named-1"
        assert not create.user_provided_producer_name
        assert create.epoch == 1
        rig.pool.connection.receipt(PRODUCER_ID, 1)
        assert [batch.sequence_id for batch in rig.listener.acked] == [0, 1]

    run_connected(body)


def test_a_broker_closing_the_producer_makes_it_register_again_and_resend() -> None:
    async def body(rig: Rig) -> None:
        rig.seal(2)
        connection = rig.pool.connection
        connection.close_producer(PRODUCER_ID)
        assert rig.driver.connection is None
        # The connection itself is fine: the producer comes back on it.
        await until(lambda: len(connection.requests) == 2, "the producer to be re-created")
        await until(lambda: len(connection.sends) == 2, "the resend")
        assert sent_ids(rig) == [(0, 2), (0, 2)]
        assert rig.listener.sent[-1][1] == 2

    run_connected(body)


def test_a_batch_the_broker_failed_max_send_attempts_times_is_given_up() -> None:
    async def body(rig: Rig) -> None:
        rig.seal(1)
        connection = rig.pool.connection
        connection.send_error(PRODUCER_ID, 0, pb.PersistenceError)
        await until(lambda: len(connection.sends) == 2, "the resend after re-creation")
        connection.send_error(PRODUCER_ID, 0, pb.PersistenceError)
        await until(lambda: rig.listener.discarded, "the batch to be given up")
        assert len(connection.sends) == 2
        assert [b.count for b in rig.listener.discarded_for(reasons.RETRIES_EXHAUSTED)] == [1]

    delivery = DeliveryPolicy(receipt_timeout_s=3600.0, send_timeout_s=0, max_send_attempts=2)
    run_connected(body, delivery=delivery)


# -- broker errors ---------------------------------------------------------------------------


async def resent_after_recreation(rig: Rig, before: int, count: int) -> list[tuple[int, int]]:
    """The Sends written after the producer was closed and created again on the same
    connection (a send error concerns the producer, not the connection: issue 11)."""
    connection = rig.pool.connection
    await until(lambda: len(connection.sends) >= before + count, "the producer re-created")
    assert connection.aborted == [] and len(rig.pool.opened) == 1
    kinds = [pb.BaseCommand.Type.Name(request.type) for request in connection.requests]
    assert kinds[-2:] == ["CLOSE_PRODUCER", "PRODUCER"]
    return sent_ids(rig)[before:]


def test_a_permanent_send_error_discards_the_batch_it_names_and_resends_the_rest() -> None:
    async def body(rig: Rig) -> None:
        rig.seal(1)
        rig.seal(2)
        rig.pool.connection.send_error(PRODUCER_ID, 0, pb.TopicTerminatedError)
        rejected = rig.listener.discarded_for(reasons.BROKER_REJECTED)
        assert [batch.sequence_id for batch in rejected] == [0]
        assert await resent_after_recreation(rig, 2, 1) == [(1, 2)]

    run_connected(body)


def test_a_retriable_send_error_resends_everything() -> None:
    async def body(rig: Rig) -> None:
        rig.seal(1)
        rig.seal(2)
        rig.pool.connection.send_error(PRODUCER_ID, 0, pb.PersistenceError)
        assert rig.listener.discarded == []
        assert await resent_after_recreation(rig, 2, 2) == [(0, 1), (1, 2)]

    run_connected(body)


def test_a_checksum_error_discards_the_batch_only_if_our_copy_is_corrupt() -> None:
    async def body(rig: Rig) -> None:
        rig.seal(1)
        rig.pool.connection.send_error(PRODUCER_ID, 0, pb.ChecksumError)
        assert rig.listener.discarded == []  # intact here: corrupted on the way, resend
        # nothing written after it: it goes again at once, on the same producer
        assert sent_ids(rig) == [(0, 1), (0, 1)]
        assert rig.producer.pending[0].failed_sends == 1
        head = rig.producer.pending[0]
        head.frame = head.frame[:-3] + b"\xff\xff\xff"  # our copy goes bad
        rig.pool.connection.send_error(PRODUCER_ID, 0, pb.ChecksumError)
        assert rig.listener.discarded_for(reasons.BROKER_REJECTED) == [head]

    run_connected(body)


def test_a_producer_refused_for_good_discards_what_waits_until_the_broker_accepts_it() -> None:
    async def test() -> None:
        pool = FakePool()
        pool.lookup_errors.append(TopicLookupError("lookup of t: TopicNotFound", pb.TopicNotFound))
        rig = Rig(pool)
        rig.seal(2)
        rig.driver.start()
        await until(lambda: rig.driver.rejected is not None, "the refusal")
        assert rig.driver.rejected == "TopicNotFound"
        assert [b.count for b in rig.listener.discarded_for(reasons.BROKER_REJECTED)] == [2]
        rig.seal(1)  # while refused: discarded at once, not kept
        assert len(rig.listener.discarded_for(reasons.BROKER_REJECTED)) == 2
        assert not rig.producer.pending
        await rig.connected()  # the retry finds the topic again
        assert rig.driver.rejected is None
        rig.seal(1)
        assert sent_ids(rig) == [(0, 1)]
        await rig.driver.stop()

    run(test)


def test_a_permanent_error_creating_the_producer_is_a_refusal_too() -> None:
    async def test() -> None:
        pool = FakePool()
        pool.request_errors.append(ServerError(pb.ProducerFenced, "fenced"))
        rig = Rig(pool)
        rig.seal(1)
        rig.driver.start()
        await until(lambda: rig.listener.discarded, "the discard")
        assert rig.listener.discarded_for(reasons.BROKER_REJECTED)
        assert rig.pool.connection.producers == {}  # unregistered after the failed create
        await rig.driver.stop()

    run(test)


def test_retriable_lookup_failures_keep_the_batches() -> None:
    async def test() -> None:
        pool = FakePool()
        pool.lookup_errors.extend([TopicLookupError("timeout"), OSError("unreachable")])
        rig = Rig(pool)
        rig.seal(1)
        rig.driver.start()
        await rig.connected()
        assert len(pool.lookups) == 3
        assert rig.listener.discarded == []
        assert sent_ids(rig) == [(0, 1)]
        await rig.driver.stop()

    run(test)


def test_a_message_too_large_for_the_broker_goes_as_chunks_and_a_large_batch_is_split() -> None:
    async def body(rig: Rig) -> None:
        for _ in range(3):
            rig.producer.batch.append(b"", 0, b"x" * 150, 0, 200)
        rig.producer.seal()
        rig.producer.batch.append(b"", 0, b"y" * 500, 0, 520)
        rig.producer.seal()
        rig.driver.flush()
        assert not rig.listener.discarded
        sends = rig.pool.connection.sends
        assert [(s.sequence_id, s.num_messages, s.is_chunk) for s in sends] == [
            (0, 1, False),  # the batch of three, split in halves to fit
            (1, 2, False),
            (3, 1, True),  # the large message: two chunks under its one sequence id
            (3, 1, True),
        ]
        connection = rig.pool.connection
        for sequence_id in (0, 1, 3):
            connection.receipt(PRODUCER_ID, sequence_id)
        assert [b.sequence_id for b in rig.listener.acked] == [0, 1]  # the chunked one waits
        connection.receipt(PRODUCER_ID, 3)
        assert [b.sequence_id for b in rig.listener.acked] == [0, 1, 3]
        assert not rig.producer.pending
        assert connection.aborted == []

    run_connected(body, pool=lambda: FakePool(max_message_size=1024 + 400))


# -- timers ----------------------------------------------------------------------------------


def test_the_send_timeout_discards_old_batches_only(clock: FakeClock) -> None:
    async def test() -> None:
        delivery = DeliveryPolicy(receipt_timeout_s=3600.0, send_timeout_s=0.05)
        rig = Rig(FakePool(lookups_hang=True), delivery, clock=clock)  # no broker answers
        rig.driver.start()
        rig.seal(1)  # sealed at 1000.00
        clock.advance(0.03)
        rig.seal(2)  # sealed at 1000.03
        clock.advance(0.03)  # 1000.06: only the first is older than 50 ms
        await until(lambda: rig.listener.discarded, "the first batch to expire")
        assert [(b.count, why) for b, why in rig.listener.discarded] == [(1, reasons.SEND_TIMEOUT)]
        assert [b.count for b in rig.producer.pending] == [2]
        clock.advance(0.03)
        await until(lambda: len(rig.listener.discarded) == 2, "the second batch to expire")
        expired = [(b.count, why) for b, why in rig.listener.discarded]
        assert expired == [(1, reasons.SEND_TIMEOUT), (2, reasons.SEND_TIMEOUT)]
        assert not rig.producer.pending
        await rig.driver.stop()

    run(test)


def test_a_written_batch_the_send_timeout_gives_up_is_unconfirmed_not_lost(
    clock: FakeClock,
) -> None:
    """Written to the broker, never confirmed: the broker may have stored it, so the send
    timeout counts it as ``unconfirmed``; a batch never written stays ``send_timeout``."""

    async def body(rig: Rig) -> None:
        rig.seal(2)  # written at once: the driver is connected
        rig.pool.connection.lose()
        await until(lambda: rig.driver.connection is None, "the connection lost")
        rig.pool.lookups_hang = True  # and no broker answers any more
        rig.seal(3)  # never written
        clock.advance(0.1)
        await until(lambda: len(rig.listener.discarded) == 2, "both batches to expire")
        given_up = [(b.count, why) for b, why in rig.listener.discarded]
        assert given_up == [(2, reasons.UNCONFIRMED), (3, reasons.SEND_TIMEOUT)]

    run_connected(
        body, delivery=DeliveryPolicy(receipt_timeout_s=3600.0, send_timeout_s=0.05), clock=clock
    )


def test_the_send_timeout_is_off_by_default() -> None:
    assert DeliveryPolicy().send_timeout_s == 0


def test_an_overdue_receipt_recreates_the_producer_and_the_batch_is_resent(
    clock: FakeClock,
) -> None:
    async def body(rig: Rig) -> None:
        rig.seal(1)
        clock.advance(1.0)  # the receipt is overdue by the driver's clock
        assert await resent_after_recreation(rig, 1, 1) == [(0, 1)]
        assert rig.listener.sent[-1][1] == 1
        rig.pool.connection.receipt(PRODUCER_ID, 0)
        assert len(rig.listener.acked) == 1

    run_connected(
        body, delivery=DeliveryPolicy(receipt_timeout_s=0.05, send_timeout_s=0), clock=clock
    )


def test_the_linger_timer_seals_the_open_batch_and_writes_it() -> None:
    async def body(rig: Rig) -> None:
        rig.producer.batch.append(b"", 0, b"a", 0, 64)
        rig.driver.arm_linger()
        rig.producer.batch.append(b"", 0, b"b", 0, 64)
        rig.driver.arm_linger()  # already armed: one timer, one batch
        await until(lambda: rig.pool.connection.sends, "the linger timer")
        assert sent_ids(rig) == [(0, 2)]
        assert rig.producer.batch.count == 0
        rig.producer.batch.append(b"", 0, b"c", 0, 64)
        rig.driver.arm_linger()  # the timer fired: a new one for the next batch
        await until(lambda: len(rig.pool.connection.sends) == 2, "the second linger timer")
        assert sent_ids(rig) == [(0, 2), (2, 1)]

    run_connected(body, policy=BatchPolicy(max_delay_s=0.01))


def test_stop_cancels_timers_and_leaves_the_producer_disconnected() -> None:
    async def test() -> None:
        rig = Rig(FakePool(), policy=BatchPolicy(max_delay_s=0.01))
        rig.driver.start()
        await rig.connected()
        rig.producer.batch.append(b"", 0, b"a", 0, 64)
        rig.driver.arm_linger()
        await rig.driver.stop()
        assert not rig.producer.ready
        assert rig.pool.connection.producers == {}
        # The loop runs due timers in deadline order: a linger timer left armed by stop
        # (due in 10 ms) would seal the open batch before this one (due in 50 ms) fires.
        loop = asyncio.get_running_loop()
        fired = asyncio.Event()
        loop.call_later(0.05, fired.set)
        await fired.wait()
        assert rig.producer.batch.count == 1
        assert rig.pool.connection.sends == []

    run(test)


def test_a_broker_still_persisting_an_earlier_write_spends_no_attempt_and_is_waited_for() -> None:
    """``MessageDupUnknownException`` for a batch written before (a bookie stalled past the
    receipt timeout, issue 36 point 5): not one of ``--max-send-attempts``, and the producer
    is re-created after a growing wait, not at once (each re-creation succeeds)."""

    async def body(rig: Rig) -> None:
        rig.seal(1)
        head = rig.producer.pending[0]
        head.send_attempts += 1  # an earlier write of it, lost with its connection
        unknown = pb.CommandSendError(producer_id=PRODUCER_ID, sequence_id=0,
                                      error=pb.PersistenceError, message=DUP_UNKNOWN)  # fmt: skip
        rig.driver.on_send_error(unknown)
        assert rig.producer.closing and head.failed_sends == 0
        assert rig.listener.discarded == []
        waits = [rig.driver._retry_delay() for _ in range(1)]
        for _ in range(4):
            rig.driver._riding_out = True  # as on_send_error sets it, each time again
            waits.append(rig.driver._retry_delay())
        assert 0.4 <= waits[0] <= 0.5 and waits == sorted(waits) and 4.0 <= waits[-1] <= 5.0
        assert rig.driver._retry_delay() <= 0.1  # anything else: the usual short wait

    run_connected(body, delivery=DeliveryPolicy(max_send_attempts=1))


def test_a_broker_that_closes_the_producer_again_before_any_receipt_is_retried_less_often() -> None:
    """A fenced topic while its bookie stalls: the broker registers the producer and closes it
    again.  The backoff starts over only once a receipt shows the broker takes the batches,
    not at each registration (it resent everything every 0.1 s: 600 re-creations in 45 s)."""

    async def body(rig: Rig) -> None:
        rig.seal(1)
        connection = rig.pool.connection
        def created(times: int) -> Callable[[], bool]:
            kinds = lambda: [r.type for r in connection.requests]  # noqa: E731
            return lambda: kinds().count(pb.BaseCommand.PRODUCER) == times

        for times in range(2, 6):
            connection.close_producer(PRODUCER_ID)
            await until(created(times), "the producer created again")
        assert rig.driver._retry._answered._next >= 1.0  # 0.1, 0.2, 0.4, 0.8: not reset
        connection.receipt(PRODUCER_ID, 0)
        await until(lambda: rig.listener.acked, "the receipt")
        assert rig.driver._retry_delay() <= 0.1

    run_connected(body)
