"""Fakes for unit tests of the daemon's asyncio edges: a condition wait with a deadline, a
recording transport, a broker connection and a connection pool that answer like a broker,
a recording delivery listener and a clock the tests move by hand.

Nothing here sleeps to synchronise: :func:`until` polls a condition, yielding to the event
loop, and fails once its deadline has passed.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections import deque
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

from pulsar_bruce.connection.broker_connection import ConnectionClosedError
from pulsar_bruce.connection.pool import BrokerAddress
from pulsar_bruce.frame import pulsar_api_pb2 as pb
from pulsar_bruce.frame.codec import DEFAULT_MAX_MESSAGE_SIZE, Frame, FrameDecoder
from pulsar_bruce.model.batch import SealedBatch

_T = pb.BaseCommand

#: Generous: a deadline only ends a test that has already failed.
DEADLINE_S = 10.0


async def until(condition: Callable[[], object], what: str, timeout: float = DEADLINE_S) -> None:
    """Wait until ``condition()`` is true; fail the test after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.001)


def decode_frames(data: bytes) -> list[Frame]:
    return FrameDecoder().feed(data)


class FakeClock:
    """Stands in for the ``time`` module of the module under test: ``monotonic`` moves only
    when the test says so (timers still run on the event loop's own clock)."""

    def __init__(self, start: float = 1000.0) -> None:
        self.now = start

    def monotonic(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds

    @staticmethod
    def time_ns() -> int:
        return time.time_ns()


class FakeTransport(asyncio.Transport):
    """Records what a protocol does with its transport."""

    def __init__(self) -> None:
        super().__init__()
        self.written: list[bytes] = []
        self.calls: list[str] = []
        self.closing = False

    @property
    def data(self) -> bytes:
        return b"".join(self.written)

    def write(self, data: bytes | bytearray | memoryview) -> None:
        assert not self.closing, "write after close"
        self.written.append(bytes(data))

    def pause_reading(self) -> None:
        self.calls.append("pause_reading")

    def resume_reading(self) -> None:
        self.calls.append("resume_reading")

    def close(self) -> None:
        self.calls.append("close")
        self.closing = True

    def abort(self) -> None:
        self.calls.append("abort")
        self.closing = True

    def is_closing(self) -> bool:
        return self.closing


class FakeBrokerConnection:
    """What :class:`~pulsar_bruce.producer.driver.ProducerDriver` uses of a BrokerConnection.

    ``request`` answers a Producer command with a ``ProducerSuccess`` (or raises the next of
    ``errors``); ``abort`` and :meth:`lose` end the connection as the real one does: on a
    later turn of the loop, every registered producer hears ``on_connection_lost``.
    """

    def __init__(
        self,
        address: BrokerAddress,
        *,
        last_sequence_id: int = -1,
        max_message_size: int = DEFAULT_MAX_MESSAGE_SIZE,
        errors: deque[BaseException] | None = None,
    ) -> None:
        self.address = address
        self.core = SimpleNamespace(max_message_size=max_message_size)
        self.last_sequence_id = last_sequence_id
        self.errors: deque[BaseException] = deque() if errors is None else errors
        self.producers: dict[int, Any] = {}
        self.requests: list[pb.BaseCommand] = []
        self.frames: list[Frame] = []
        self.aborted: list[str] = []
        self.closed = False
        self._request_ids = itertools.count(1)

    @property
    def is_usable(self) -> bool:
        return not self.closed

    def next_request_id(self) -> int:
        return next(self._request_ids)

    async def request(
        self,
        request_id: int,
        frame: bytes,
        *,
        producer_id: int | None = None,
        timeout: float | None = None,
    ) -> pb.BaseCommand:
        if self.closed:
            raise ConnectionClosedError("fake connection is closed")
        (decoded,) = decode_frames(frame)
        command = decoded.command
        self.requests.append(command)
        await asyncio.sleep(0)  # the answer comes on a later turn, as from a broker
        if self.errors:
            raise self.errors.popleft()
        if command.type == _T.CLOSE_PRODUCER:  # the broker closes it and says so
            closed = pb.BaseCommand(type=_T.SUCCESS)
            closed.success.request_id = request_id
            return closed
        assert command.type == _T.PRODUCER, command
        response = pb.BaseCommand(type=_T.PRODUCER_SUCCESS)
        success = response.producer_success
        success.request_id = request_id
        success.producer_name = command.producer.producer_name or "broker-named-1"
        success.last_sequence_id = self.last_sequence_id
        success.producer_ready = True
        return response

    def register_producer(self, producer_id: int, listener: Any) -> None:
        self.producers[producer_id] = listener

    def unregister_producer(self, producer_id: int) -> None:
        self.producers.pop(producer_id, None)

    def writelines(self, frames: list[bytes]) -> None:
        assert not self.closed, "write on a closed connection"
        for frame in frames:
            self.frames.extend(decode_frames(frame))

    @property
    def sends(self) -> list[pb.CommandSend]:
        return [frame.command.send for frame in self.frames if frame.command.type == _T.SEND]

    def abort(self, reason: str) -> None:
        self.aborted.append(reason)
        self.lose()

    def lose(self) -> None:
        """The TCP connection ends; its producers hear of it on the next turn of the loop."""
        if self.closed:
            return
        self.closed = True
        asyncio.get_running_loop().call_soon(self._fail)

    def _fail(self) -> None:
        producers, self.producers = list(self.producers.values()), {}
        for listener in producers:
            listener.on_connection_lost()

    # -- what the broker sends ----------------------------------------------------------

    def receipt(self, producer_id: int, sequence_id: int) -> None:
        receipt = pb.CommandSendReceipt(producer_id=producer_id, sequence_id=sequence_id)
        self.producers[producer_id].on_receipt(receipt)

    def send_error(self, producer_id: int, sequence_id: int, error: int) -> None:
        command = pb.CommandSendError(
            producer_id=producer_id, sequence_id=sequence_id, error=error, message="fake"
        )
        self.producers[producer_id].on_send_error(command)

    def close_producer(self, producer_id: int) -> None:
        self.producers.pop(producer_id).on_close_producer()


class FakePool:
    """A ConnectionPool that looks every topic up on one fake broker.

    ``get`` hands out the current connection, or a new one when the last one was lost.
    ``lookup_errors`` are raised by the next lookups, ``request_errors`` by the next
    producer requests on any connection; with ``lookups_hang`` no lookup ever completes
    (a broker that never answers).  ``partition_count`` takes its answers
    (a count, or an exception to raise) from ``partition_answers``, waiting for each.
    """

    def __init__(self, *, lookups_hang: bool = False, **connection_options: Any) -> None:
        self.lookups: list[str] = []
        self.lookup_errors: deque[BaseException] = deque()
        self.request_errors: deque[BaseException] = deque()
        self.lookups_hang = lookups_hang
        self.opened: list[FakeBrokerConnection] = []
        self.partition_answers: asyncio.Queue[int | BaseException] = asyncio.Queue()
        self.partition_requests: list[str] = []
        self._connection_options = connection_options

    @property
    def connection(self) -> FakeBrokerConnection:
        return self.opened[-1]

    async def lookup(self, topic: str, cluster_url: str | None = None) -> BrokerAddress:
        self.lookups.append(topic)
        if self.lookups_hang:
            await asyncio.Event().wait()
        await asyncio.sleep(0)
        if self.lookup_errors:
            raise self.lookup_errors.popleft()
        return BrokerAddress("pulsar://broker-1:6650")

    async def get(self, address: BrokerAddress) -> FakeBrokerConnection:
        if not self.opened or self.opened[-1].closed:
            connection = FakeBrokerConnection(
                address, errors=self.request_errors, **self._connection_options
            )
            self.opened.append(connection)
        return self.opened[-1]

    async def partition_count(self, topic: str) -> int:
        self.partition_requests.append(topic)
        answer = await self.partition_answers.get()
        if isinstance(answer, BaseException):
            raise answer
        return answer


class RecordingListener:
    """A DeliveryListener that keeps every report, in order."""

    def __init__(self) -> None:
        self.sent: list[tuple[list[SealedBatch], int]] = []
        self.acked: list[SealedBatch] = []
        self.discarded: list[tuple[SealedBatch, str]] = []

    def batches_sent(self, batches: list[SealedBatch], resent_messages: int) -> None:
        self.sent.append((list(batches), resent_messages))

    def batch_acked(self, batch: SealedBatch, latency_s: float) -> None:
        assert latency_s >= 0
        self.acked.append(batch)

    def batch_discarded(self, batch: SealedBatch, reason: str) -> None:
        self.discarded.append((batch, reason))

    def discarded_for(self, reason: str) -> list[SealedBatch]:
        return [batch for batch, why in self.discarded if why == reason]
