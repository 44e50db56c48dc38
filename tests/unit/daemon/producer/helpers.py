"""What the driver tests share: a driver for one partition on a fake pool, run connected, and
the broker answers they script."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

from pulsar_bruce.frame import pulsar_api_pb2 as pb
from pulsar_bruce.producer.delivery import DeliveryPolicy
from pulsar_bruce.producer.driver import ProducerDriver
from pulsar_bruce.producer.partition_producer import BatchPolicy, PartitionProducer
from pulsar_bruce.spool.journal_stage import NO_JOURNAL

from tests.support.fakes_asyncio import FakePool, RecordingListener, until

TOPIC = "persistent://public/default/t-partition-0"
PRODUCER_ID = 7
#: Timers that must not fire during a test unless it moves the clock.
LONG = DeliveryPolicy(receipt_timeout_s=3600.0, send_timeout_s=3600.0, max_send_attempts=10)


class Rig:
    """A driver for one partition with a fake pool and a recording listener."""

    def __init__(
        self,
        pool: FakePool,
        delivery: DeliveryPolicy = LONG,
        policy: BatchPolicy | None = None,
        name: str | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.pool = pool
        self.listener = RecordingListener()
        self.producer = PartitionProducer(TOPIC, 0, PRODUCER_ID, policy or BatchPolicy())
        if name is not None:
            self.producer.name, self.producer.name_is_ours = name, True
        self.driver = ProducerDriver(
            self.producer, pool, self.listener, delivery, journal=NO_JOURNAL, clock=clock
        )
        self._values = 0

    def seal(self, count: int = 1) -> None:
        """A batch of ``count`` messages is sealed and the edge asks the driver to write it."""
        for _ in range(count):
            self._values += 1
            self.producer.batch.append(b"", 0, b"value-%d" % self._values, 0, 64)
        assert self.producer.seal() is not None
        self.driver.flush()

    async def connected(self, number: int = 1) -> None:
        """Wait until the driver is ready on the pool's ``number``-th connection."""
        await until(
            lambda: (
                len(self.pool.opened) >= number
                and self.driver.connection is self.pool.opened[number - 1]
            ),
            f"connection {number}",
        )


def run_connected(
    body: Callable[[Rig], Awaitable[None]],
    pool: Callable[[], FakePool] = FakePool,
    delivery: DeliveryPolicy = LONG,
    policy: BatchPolicy | None = None,
    name: str | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> None:
    """Run ``body`` with a driver ready on its first connection, and stop it afterwards."""

    async def test() -> None:
        rig = Rig(pool(), delivery, policy, name, clock)
        rig.driver.start()
        await rig.connected()
        await body(rig)
        await rig.driver.stop()

    asyncio.run(test())


def sent_ids(rig: Rig, connection: int = 1) -> list[tuple[int, int]]:
    """(sequence id, message count) of every Send written on the ``connection``-th connection."""
    sends = rig.pool.opened[connection - 1].sends
    return [(send.sequence_id, send.num_messages) for send in sends]

MINUS_ONE = 2**64 - 1  # -1 as the Java broker writes it into the uint64 message id fields


def receipt(sequence_id: int, ledger: int, entry: int) -> pb.CommandSendReceipt:
    return pb.CommandSendReceipt(
        producer_id=PRODUCER_ID,
        sequence_id=sequence_id,
        message_id=pb.MessageIdData(ledgerId=ledger, entryId=entry),
    )


async def driver_for(topic: str, pool: FakePool) -> tuple[ProducerDriver, RecordingListener]:
    listener = RecordingListener()
    producer = PartitionProducer(topic, 0, PRODUCER_ID, BatchPolicy())
    driver = ProducerDriver(producer, pool, listener, LONG, journal=NO_JOURNAL)
    driver.start()
    await until(lambda: driver.connection is not None, "the connection")
    return driver, listener


def seal(driver: ProducerDriver, count: int) -> None:
    for i in range(count):
        driver.producer.batch.append(b"", 0, b"v%d" % i, 0, 64)
    driver.producer.seal()
    driver.flush()
