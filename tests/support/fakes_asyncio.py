"""Fakes for unit tests of the daemon's asyncio edges: a condition wait with a deadline, a
recording transport, a broker connection and a connection pool that answer like a broker,
a recording delivery listener and a clock the tests move by hand.

Nothing here sleeps to synchronise: :func:`until` polls a condition, yielding to the event
loop, and fails once its deadline has passed; :func:`until_soon` lets only ready callbacks
run.  :func:`run_on_clock` runs a test on a :class:`FakeClockLoop`, whose time is a
:class:`FakeClock` that jumps to the next timer whenever the loop would wait: a 30 s
keep-alive or request timeout passes at once, in order, the same way every run.
"""

from __future__ import annotations

import asyncio
import itertools
import selectors
import time
from collections import deque
from collections.abc import Callable, Coroutine
from types import SimpleNamespace
from typing import Any, TypeVar

from pulsar_bruce.connection.broker_connection import ConnectionClosedError
from pulsar_bruce.connection.pool import BrokerAddress
from pulsar_bruce.frame import pulsar_api_pb2 as pb
from pulsar_bruce.frame.codec import DEFAULT_MAX_MESSAGE_SIZE, Frame, FrameDecoder
from pulsar_bruce.model.batch import SealedBatch

_T = pb.BaseCommand
_R = TypeVar("_R")

#: Generous: a deadline only ends a test that has already failed.
DEADLINE_S = 10.0


async def until(condition: Callable[[], object], what: str, timeout: float = DEADLINE_S) -> None:
    """Wait until ``condition()`` is true; fail the test after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.001)


async def until_soon(condition: Callable[[], object], what: str, steps: int = 1000) -> None:
    """Let the loop run what is ready (no timer fires, no time passes on a
    :class:`FakeClockLoop`) until ``condition()`` holds; fail after ``steps`` turns."""
    for _ in range(steps):
        if condition():
            return
        await asyncio.sleep(0)
    raise AssertionError(f"{what}: not after {steps} loop turns")


def decode_frames(data: bytes) -> list[Frame]:
    return FrameDecoder().feed(data)


class FakeClock:
    """A clock to pass where the code under test takes one (``clock=``): it moves only when
    the test says so (timers still run on the event loop's own clock, unless that loop is a
    :class:`FakeClockLoop` on this clock)."""

    def __init__(self, start: float = 1000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


class Deadlock(AssertionError):
    """A :class:`FakeClockLoop` would wait forever: nothing ready, no timer scheduled."""


class _JumpingSelector(selectors.DefaultSelector):
    """Never sleeps: where the loop would wait ``timeout`` seconds, the clock jumps instead."""

    def __init__(self, clock: FakeClock) -> None:
        super().__init__()
        self._clock = clock

    def select(self, timeout: float | None = None) -> list[Any]:
        ready: list[Any] = super().select(0)
        if ready or (timeout is not None and timeout <= 0):
            return ready
        if timeout is None:
            raise Deadlock("the event loop would wait forever: nothing ready or scheduled")
        self._clock.advance(timeout)
        return []


class FakeClockLoop(asyncio.SelectorEventLoop):
    """An event loop whose time is ``clock`` (see the module docstring).  No real sockets:
    with nothing ready it never waits for one."""

    def __init__(self, clock: FakeClock) -> None:
        super().__init__(selector=_JumpingSelector(clock))
        self.clock = clock
        #: Errors raised in callbacks (which a loop only logs); :func:`run_on_clock` fails on them.
        self.errors: list[dict[str, Any]] = []
        self.set_exception_handler(lambda _, context: self.errors.append(context))

    def time(self) -> float:
        return self.clock.now


def run_on_clock(main: Coroutine[Any, Any, _R], clock: FakeClock) -> _R:
    """Run ``main`` to completion on a fresh :class:`FakeClockLoop` driven by ``clock``;
    an error raised in any callback meanwhile fails the test too."""
    loop = FakeClockLoop(clock)
    with asyncio.Runner(loop_factory=lambda: loop) as runner:
        result = runner.run(main)
    assert not loop.errors, f"errors in loop callbacks: {loop.errors}"
    return result


class FakeTransport(asyncio.Transport):
    """Records what a protocol does with its transport.

    Given the ``protocol``, it also plays the peer as a socket transport would: what the
    test feeds (:meth:`feed`) reaches ``data_received`` one loop turn later, and ``close``,
    ``abort`` or :meth:`lose` end in one ``connection_lost`` one turn later.
    """

    def __init__(self, protocol: asyncio.Protocol | None = None) -> None:
        super().__init__()
        self.written: list[bytes] = []
        self.calls: list[str] = []
        self.closing = False
        self.protocol = protocol
        #: Closed by the protocol with ``abort()`` (not by the peer, not by ``close()``).
        self.aborted = False
        self._undelivered = 0

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
        self._shut()

    def abort(self) -> None:
        self.calls.append("abort")
        if not self.closing:
            self.aborted = True
        self._shut()

    def is_closing(self) -> bool:
        return self.closing

    def _shut(self) -> None:
        if self.closing:
            return
        self.closing = True
        if self.protocol is not None:
            asyncio.get_running_loop().call_soon(self.protocol.connection_lost, None)

    # -- the peer's side (with a protocol) ---------------------------------------------

    def feed(self, data: bytes) -> None:
        """Bytes from the peer, handed to the protocol one loop turn later."""
        assert self.protocol is not None, "feed needs the protocol"
        self._undelivered += 1
        asyncio.get_running_loop().call_soon(self._deliver, self.protocol, data)

    def delivered(self) -> bool:
        """Everything fed so far has reached the protocol (or was dropped: closed)."""
        return self._undelivered == 0

    def lose(self, exc: Exception | None = None) -> None:
        """The peer ends the connection (``exc``: it was reset), one loop turn later."""
        assert self.protocol is not None, "lose needs the protocol"
        asyncio.get_running_loop().call_soon(self._lost, self.protocol, exc)

    def commands(self) -> list[pb.BaseCommand]:
        """Every command written so far, decoded."""
        return [frame.command for frame in decode_frames(self.data)]

    def command_types(self) -> list[str]:
        return [_T.Type.Name(command.type) for command in self.commands()]

    def _deliver(self, protocol: asyncio.Protocol, data: bytes) -> None:
        self._undelivered -= 1
        if not self.closing:
            protocol.data_received(data)

    def _lost(self, protocol: asyncio.Protocol, exc: Exception | None) -> None:
        if not self.closing:
            self.closing = True
            protocol.connection_lost(exc)


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
        unanswered: frozenset[int] = frozenset(),
    ) -> None:
        """``unanswered``: command types the broker never answers (a request of one times out
        after its ``timeout``, or waits for ever without one)."""
        self.address = address
        self.unanswered = unanswered
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
        if command.type in self.unanswered:
            await asyncio.wait_for(asyncio.Event().wait(), timeout)
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

    ``get`` hands out the current connection, or a new one when the last one was lost
    (or raises the next of ``get_errors``: the looked-up broker cannot be reached).
    ``lookup_errors`` are raised by the next lookups, ``request_errors`` by the next
    producer requests on any connection; with ``lookups_hang`` no lookup ever completes
    (a broker that never answers).  ``partition_count`` takes its answers
    (a count, or an exception to raise) from ``partition_answers``, waiting for each.
    """

    def __init__(self, *, lookups_hang: bool = False, **connection_options: Any) -> None:
        self.lookups: list[str] = []
        self.lookup_errors: deque[BaseException] = deque()
        self.get_errors: deque[BaseException] = deque()
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
        if self.get_errors:
            raise self.get_errors.popleft()
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
        self.possibly_stored: list[SealedBatch] = []

    def batches_sent(self, batches: list[SealedBatch], resent_messages: int) -> None:
        self.sent.append((list(batches), resent_messages))

    def batches_possibly_stored(self, batches: list[SealedBatch]) -> None:
        self.possibly_stored.extend(batches)

    def batch_acked(self, batch: SealedBatch, latency_s: float) -> None:
        assert latency_s >= 0
        self.acked.append(batch)

    def batch_discarded(self, batch: SealedBatch, reason: str) -> None:
        self.discarded.append((batch, reason))

    def discarded_for(self, reason: str) -> list[SealedBatch]:
        return [batch for batch, why in self.discarded if why == reason]
