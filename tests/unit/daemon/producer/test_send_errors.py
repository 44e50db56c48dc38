"""What the producer driver does with broker errors, on a real BrokerConnection over a fake wire.

The broker's side is played by the test (:class:`Wire`): it decodes every frame
the daemon writes and answers the way the Java broker would, at the moment the
test chooses.  Facts about the Java broker and the official clients come from
their source; each test names the file and function.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Coroutine
from typing import Any

import pytest
from pulsar_bruce.connection import broker_connection
from pulsar_bruce.connection.broker_connection import BrokerConnection
from pulsar_bruce.connection.protocol import ConnectionCore
from pulsar_bruce.frame import pulsar_api_pb2 as pb
from pulsar_bruce.frame.codec import Frame, FrameDecoder, encode_command
from pulsar_bruce.model.batch import SealedBatch
from pulsar_bruce.producer.delivery import DeliveryPolicy
from pulsar_bruce.producer.driver import ProducerDriver
from pulsar_bruce.producer.partition_producer import BatchPolicy, PartitionProducer
from pulsar_bruce.spool.journal_stage import NO_JOURNAL

_T = pb.BaseCommand
TOPIC_A = "persistent://public/default/a"
TOPIC_B = "persistent://public/default/b"


class Wire:
    """The transport under one BrokerConnection, and the broker at its far end.

    Producer and CloseProducer requests are answered on the next loop turn
    unless held; sends are only recorded: the test answers them.
    """

    def __init__(self) -> None:
        self.loop = asyncio.get_running_loop()
        self.frames: list[Frame] = []
        self.aborted = False
        self.hold_producers = False
        self.hold_closes = False
        #: topic -> ServerError answered to its Producer requests.
        self.refuse: dict[str, int] = {}
        self.held: list[Frame] = []
        self._decoder = FrameDecoder()
        self.connection = BrokerConnection("broker:6650", ConnectionCore(0.0), 3600.0)
        self.connection.connection_made(self)  # type: ignore[arg-type]
        connected = _T(type=_T.CONNECTED)
        connected.connected.server_version = "wire"
        self.connection.data_received(encode_command(connected))

    # -- the transport the connection writes to ------------------------------------------------

    def write(self, data: bytes) -> None:
        for frame in self._decoder.feed(data):
            self.frames.append(frame)
            self._auto_answer(frame)

    def writelines(self, frames: list[bytes]) -> None:
        for data in frames:
            self.write(data)

    def is_closing(self) -> bool:
        return self.aborted

    def abort(self) -> None:
        if not self.aborted:
            self.aborted = True
            self.loop.call_soon(self.connection.connection_lost, None)

    close = abort

    # -- the broker ------------------------------------------------------------------------------

    def answer(self, command: pb.BaseCommand) -> None:
        self.loop.call_soon(self.connection.data_received, encode_command(command))

    def receipt(self, producer_id: int, sequence_id: int, highest: int) -> None:
        reply = _T(type=_T.SEND_RECEIPT)
        reply.send_receipt.producer_id = producer_id
        reply.send_receipt.sequence_id = sequence_id
        reply.send_receipt.highest_sequence_id = highest
        self.answer(reply)

    def send_error(self, producer_id: int, sequence_id: int, error: int) -> None:
        reply = _T(type=_T.SEND_ERROR)
        reply.send_error.producer_id = producer_id
        reply.send_error.sequence_id = sequence_id
        reply.send_error.error = error  # type: ignore[assignment]
        reply.send_error.message = "from the wire"
        self.answer(reply)

    def release(self) -> None:
        """Answer the held Producer and CloseProducer requests."""
        self.hold_producers = self.hold_closes = False
        held, self.held = self.held, []
        for frame in held:
            self._auto_answer(frame)

    def _auto_answer(self, frame: Frame) -> None:
        command = frame.command
        if command.type == _T.PRODUCER:
            if self.hold_producers:
                self.held.append(frame)
                return
            request = command.producer
            refusal = self.refuse.get(request.topic)
            if refusal is not None:
                reply = _T(type=_T.ERROR)
                reply.error.request_id = request.request_id
                reply.error.error = refusal  # type: ignore[assignment]
                reply.error.message = "refused by the wire"
            else:
                reply = _T(type=_T.PRODUCER_SUCCESS)
                reply.producer_success.request_id = request.request_id
                reply.producer_success.producer_name = request.producer_name or "named-by-broker"
                reply.producer_success.last_sequence_id = -1
            self.answer(reply)
        elif command.type == _T.CLOSE_PRODUCER:
            if self.hold_closes:
                self.held.append(frame)
                return
            reply = _T(type=_T.SUCCESS)
            reply.success.request_id = command.close_producer.request_id
            self.answer(reply)

    # -- what the daemon wrote -----------------------------------------------------------------

    def of(self, kind: int, producer_id: int) -> list[pb.BaseCommand]:
        commands = [f.command for f in self.frames if f.command.type == kind]
        return [c for c in commands if _producer_id(c) == producer_id]

    def kinds(self, producer_id: int) -> list[str]:
        return [
            _T.Type.Name(f.command.type)
            for f in self.frames
            if _producer_id(f.command) == producer_id
        ]

    def sent_ids(self, producer_id: int) -> list[int]:
        return [c.send.sequence_id for c in self.of(_T.SEND, producer_id)]


def _producer_id(command: pb.BaseCommand) -> int | None:
    for field in ("producer", "send", "close_producer"):
        if command.HasField(field):
            return int(getattr(command, field).producer_id)
    return None


class Outcomes:
    """A DeliveryListener that records what it is told."""

    def __init__(self) -> None:
        self.acked: list[SealedBatch] = []
        self.discarded: list[tuple[SealedBatch, str]] = []
        self.resent_messages = 0

    def batches_sent(self, batches: list[SealedBatch], resent_messages: int) -> None:
        self.resent_messages += resent_messages

    def batch_acked(self, batch: SealedBatch, latency_s: float) -> None:
        self.acked.append(batch)

    def batch_discarded(self, batch: SealedBatch, reason: str) -> None:
        self.discarded.append((batch, reason))


class Pool:
    """Every topic lives on the one broker at the end of the wire."""

    def __init__(self, wire: Wire):
        self.wire = wire

    async def lookup(self, topic: str, cluster_url: str | None = None) -> str:
        return "broker"

    async def get(self, address: str) -> BrokerConnection:
        return self.wire.connection


def make_driver(
    wire: Wire, topic: str, producer_id: int, delivery: DeliveryPolicy | None = None
) -> tuple[ProducerDriver, Outcomes]:
    producer = PartitionProducer(topic, 0, producer_id, BatchPolicy(max_delay_s=3600))
    producer.name, producer.name_is_ours = f"edge-{producer_id}", True
    outcomes = Outcomes()
    driver = ProducerDriver(producer, Pool(wire), outcomes, delivery, journal=NO_JOURNAL)  # type: ignore[arg-type]
    driver.start()
    return driver, outcomes


def send_batches(driver: ProducerDriver, *counts: int) -> None:
    """Seal one batch of ``count`` messages per count and write them."""
    for count in counts:
        for i in range(count):
            driver.producer.batch.append(b"", 0, b"v%d" % i, 0, 64)
        driver.producer.seal()
    driver.flush()


async def until(condition: Callable[[], object], what: str, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.001)


def run(scenario: Callable[[], Coroutine[Any, Any, None]]) -> None:
    asyncio.run(asyncio.wait_for(scenario(), 20))


async def ready(*drivers: ProducerDriver) -> None:
    await until(lambda: all(d.producer.ready for d in drivers), "the producers to be ready")


async def finish(wire: Wire, *drivers: ProducerDriver) -> None:
    for driver in drivers:
        await driver.stop()
    wire.abort()
    await asyncio.sleep(0)


def ids(batches: list[SealedBatch]) -> list[tuple[int, int]]:
    return [(b.sequence_id, b.highest_sequence_id) for b in batches]


# -- point 1: an error names the batch whose id range holds it ----------------------------------


def test_not_allowed_names_a_batch_behind_the_head_and_discards_exactly_it() -> None:
    """pulsar-broker PersistentTopic.publishMessage fails an entry over the topic's
    max-message-size policy at once with NotAllowedException, while the batch before it is
    still being persisted; Producer.MessagePublishContext.completed names it by
    max(highest_sequence_id, sequence_id).  Like the Java client's
    ProducerImpl.recoverNotAllowedError, only that batch is failed: no re-creation, no resend."""

    async def scenario() -> None:
        wire = Wire()
        driver, outcomes = make_driver(wire, TOPIC_A, 1)
        await ready(driver)
        send_batches(driver, 2, 3, 1)  # ids 0..1, 2..4, 5
        wire.send_error(1, 4, pb.NotAllowedError)
        wire.receipt(1, 0, 1)
        wire.receipt(1, 5, 5)
        await until(lambda: len(outcomes.acked) == 2, "the other batches to be acked")
        assert [(b.sequence_id, b.count, r) for b, r in outcomes.discarded] == [
            (2, 3, "broker_rejected")
        ]
        assert ids(outcomes.acked) == [(0, 1), (5, 5)]
        assert wire.kinds(1) == ["PRODUCER", "SEND", "SEND", "SEND"]  # no close, no resend
        assert not wire.aborted and outcomes.resent_messages == 0
        await finish(wire, driver)

    run(scenario)


def test_an_error_naming_the_lowest_id_of_a_batch_also_finds_it() -> None:
    """Older brokers and single-id sends name the batch by its only (lowest) id
    (ServerCnx.handleSend's path without highest_sequence_id)."""

    async def scenario() -> None:
        wire = Wire()
        driver, outcomes = make_driver(wire, TOPIC_A, 1)
        await ready(driver)
        send_batches(driver, 3)
        wire.send_error(1, 0, pb.NotAllowedError)
        await until(lambda: outcomes.discarded, "the batch to be discarded")
        assert [(b.count, r) for b, r in outcomes.discarded] == [(3, "broker_rejected")]
        await finish(wire, driver)

    run(scenario)


def test_an_error_for_a_batch_no_longer_pending_changes_nothing() -> None:
    async def scenario() -> None:
        wire = Wire()
        driver, outcomes = make_driver(wire, TOPIC_A, 1)
        await ready(driver)
        send_batches(driver, 2)
        wire.receipt(1, 0, 1)
        await until(lambda: outcomes.acked, "the receipt")
        send_batches(driver, 1)  # id 2
        wire.send_error(1, 1, pb.PersistenceError)  # for the batch already acked
        wire.receipt(1, 2, 2)
        await until(lambda: len(outcomes.acked) == 2, "the second receipt")
        assert outcomes.discarded == [] and "CLOSE_PRODUCER" not in wire.kinds(1)
        await finish(wire, driver)

    run(scenario)


def test_checksum_error_on_a_corrupt_copy_discards_that_batch_only() -> None:
    """Producer.checkAndStartPublish answers a bad checksum with ChecksumError naming the
    batch's highest id; the Java client (ProducerImpl.recoverChecksumError) discards the batch
    if its own copy is corrupt, else resends it."""

    async def scenario() -> None:
        wire = Wire()
        driver, outcomes = make_driver(wire, TOPIC_A, 1)
        await ready(driver)
        send_batches(driver, 2, 2)  # ids 0..1, 2..3
        corrupt = driver.producer.pending[1]
        corrupt.frame = corrupt.frame[:-1] + bytes([corrupt.frame[-1] ^ 0xFF])
        wire.send_error(1, 3, pb.ChecksumError)
        wire.receipt(1, 0, 1)
        await until(lambda: outcomes.acked and outcomes.discarded, "ack and discard")
        assert [(b.sequence_id, r) for b, r in outcomes.discarded] == [(2, "broker_rejected")]
        assert "CLOSE_PRODUCER" not in wire.kinds(1)  # a checksum error is no topic error
        await finish(wire, driver)

    run(scenario)


# -- point 2: recover the producer, not the connection -------------------------------------------


def test_a_transient_send_error_recreates_only_that_producer() -> None:
    """The Java client hands a transient SendError to that producer alone
    (ClientCnx.handleSendError: "don't close this ctx, otherwise it will close all consumers
    and producers which use this ctx").  We close it (CloseProducer; the Java broker answers
    once every pending publish has its receipt or error, Producer.close) and create it again
    with the same name and the next epoch; the other producer on the connection never
    notices."""

    async def scenario() -> None:
        wire = Wire()
        a, a_out = make_driver(wire, TOPIC_A, 1)
        b, b_out = make_driver(wire, TOPIC_B, 2)
        await ready(a, b)
        send_batches(a, 2, 2)  # ids 0..1, 2..3
        send_batches(b, 3)  # ids 0..2, in flight on the same connection
        wire.hold_closes = True
        wire.send_error(1, 1, pb.PersistenceError)
        await until(lambda: wire.of(_T.CLOSE_PRODUCER, 1), "CloseProducer for a")
        send_batches(a, 1)  # sealed while closing: waits
        wire.receipt(1, 2, 3)  # behind the failed batch, confirmed before the close answer
        await until(lambda: a_out.acked, "the later batch of a to be acked")
        assert wire.sent_ids(1) == [0, 2]
        wire.release()
        await until(lambda: len(wire.of(_T.PRODUCER, 1)) == 2, "a to be re-created")
        await until(lambda: len(wire.sent_ids(1)) == 4, "a's resend")
        # The failed batch again, then the new one; under new ids, since the broker stored
        # 2..3 after it and would take 0..1 for duplicates (issue 36, point 2).
        assert wire.sent_ids(1) == [0, 2, 4, 6]
        first, again = wire.of(_T.PRODUCER, 1)
        assert (again.producer.producer_name, again.producer.epoch) == ("edge-1", 1)
        assert again.producer.request_id != first.producer.request_id
        assert a_out.resent_messages == 0  # refused when first written: nothing resent
        wire.receipt(1, 4, 5)
        wire.receipt(1, 6, 6)
        wire.receipt(2, 0, 2)
        await until(lambda: len(a_out.acked) == 3 and b_out.acked, "every receipt")
        assert ids(a_out.acked) == [(2, 3), (4, 5), (6, 6)]
        assert a_out.discarded == []
        # b: written once, never re-created, nothing resent; the connection stayed up.
        assert wire.kinds(2) == ["PRODUCER", "SEND"]
        assert b_out.resent_messages == 0 and b.connection is wire.connection
        assert not wire.aborted
        await finish(wire, a, b)

    run(scenario)


def test_a_mismatched_receipt_recreates_the_producer_not_the_connection() -> None:
    async def scenario() -> None:
        wire = Wire()
        a, a_out = make_driver(wire, TOPIC_A, 1)
        b, _ = make_driver(wire, TOPIC_B, 2)
        await ready(a, b)
        send_batches(a, 2)  # ids 0..1
        wire.receipt(1, 2, 3)  # a batch never sent
        await until(lambda: len(wire.sent_ids(1)) == 2, "the resend after re-creation")
        assert wire.kinds(1) == ["PRODUCER", "SEND", "CLOSE_PRODUCER", "PRODUCER", "SEND"]
        assert wire.kinds(2) == ["PRODUCER"] and not wire.aborted
        assert a_out.resent_messages == 2
        await finish(wire, a, b)

    run(scenario)


def test_an_overdue_receipt_recreates_the_producer() -> None:
    async def scenario() -> None:
        wire = Wire()
        a, a_out = make_driver(wire, TOPIC_A, 1, DeliveryPolicy(receipt_timeout_s=0.05))
        b, _ = make_driver(wire, TOPIC_B, 2)
        await ready(a, b)
        send_batches(a, 1)
        await until(lambda: len(wire.sent_ids(1)) == 2, "the resend after re-creation")
        assert wire.kinds(1) == ["PRODUCER", "SEND", "CLOSE_PRODUCER", "PRODUCER", "SEND"]
        assert wire.kinds(2) == ["PRODUCER"] and not wire.aborted
        wire.receipt(1, 0, 0)
        await until(lambda: a_out.acked, "the receipt for the resend")
        await finish(wire, a, b)

    run(scenario)


def test_a_close_the_broker_does_not_answer_drops_the_connection() -> None:
    """A broker that answers neither the batch nor the CloseProducer within the receipt
    timeout is not trusted with the connection: every producer on it reconnects."""

    async def scenario() -> None:
        wire = Wire()
        a, _ = make_driver(wire, TOPIC_A, 1, DeliveryPolicy(receipt_timeout_s=0.05))
        b, _ = make_driver(wire, TOPIC_B, 2)
        await ready(a, b)
        wire.hold_closes = True
        send_batches(a, 1)
        await until(lambda: wire.aborted, "the connection to be dropped")
        assert wire.kinds(1) == ["PRODUCER", "SEND", "CLOSE_PRODUCER"]
        await until(lambda: b.connection is None, "b to lose the connection too")
        await finish(wire, a, b)

    run(scenario)


def test_topic_terminated_discards_each_batch_once_and_then_the_rest() -> None:
    """Producer.MessagePublishContext.completed answers every publish on a terminated topic
    with TopicTerminatedError, and ServerCnx.handleProducer refuses a new producer with it:
    each batch in flight is discarded once, as broker_rejected, and what waited behind them
    when the refusal comes."""

    async def scenario() -> None:
        wire = Wire()
        a, a_out = make_driver(wire, TOPIC_A, 1)
        await ready(a)
        send_batches(a, 2, 2)  # ids 0..1, 2..3
        wire.hold_closes = True
        wire.refuse[TOPIC_A] = pb.TopicTerminatedError
        wire.send_error(1, 1, pb.TopicTerminatedError)
        await until(lambda: wire.of(_T.CLOSE_PRODUCER, 1), "CloseProducer")
        send_batches(a, 1)  # sealed while closing
        wire.send_error(1, 3, pb.TopicTerminatedError)  # the broker fails the rest before closing
        await until(lambda: len(a_out.discarded) == 2, "the second batch to be discarded")
        wire.release()
        await until(lambda: len(a_out.discarded) == 3, "the waiting batch to be discarded")
        assert [(b.count, r) for b, r in a_out.discarded] == [(2, "broker_rejected")] * 2 + [
            (1, "broker_rejected")
        ]
        assert a.rejected == "TopicTerminatedError"
        assert wire.sent_ids(1) == [0, 2]  # nothing written twice
        assert a_out.acked == [] and not wire.aborted
        await finish(wire, a)

    run(scenario)


# -- point 6: CloseProducer after a producer-creation timeout -----------------------------------


def test_a_producer_creation_timeout_closes_that_producer_before_retrying(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """After a timed-out Producer request the Java client (ProducerImpl.connectionOpened) and
    the Go client (producer_partition.go grabCnx) send CloseProducer for that producer id:
    otherwise the broker, still creating the first, answers the retry with ServiceNotReady
    (ServerCnx.handleProducer, "Producer is already present on the connection")."""
    monkeypatch.setattr(broker_connection, "REQUEST_TIMEOUT_S", 0.05)

    async def scenario() -> None:
        wire = Wire()
        wire.hold_producers = True
        a, _ = make_driver(wire, TOPIC_A, 7)
        await until(lambda: wire.of(_T.CLOSE_PRODUCER, 7), "CloseProducer after the timeout")
        wire.hold_producers = False
        await ready(a)
        assert wire.kinds(7)[:3] == ["PRODUCER", "CLOSE_PRODUCER", "PRODUCER"]
        (close,) = wire.of(_T.CLOSE_PRODUCER, 7)
        first = wire.of(_T.PRODUCER, 7)[0]
        assert close.close_producer.request_id > first.producer.request_id
        assert not wire.aborted
        await finish(wire, a)

    run(scenario)
