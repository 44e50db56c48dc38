"""The datagram readers on a real socketpair (Python; compiled with its thread; compiled on
the loop): drains, the per-wake-up cap, empty and oversized datagrams, the event-loop
reader, and the final drain at shutdown; the compiled intake's receive thread: order
across slabs, backpressure, nothing lost; where the compiled reader reads."""

from __future__ import annotations

import asyncio
import errno
import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from pulsar_bruce.input import receive_policy, socket_reader
from pulsar_bruce.input.socket_reader import DatagramReader, ThreadedDatagramReader
from pulsar_bruce.native import compiled

from tests.support.fakes_asyncio import FakeClock, run_on_clock, until, until_soon
from tests.unit.daemon.input.helpers import READERS

MAX = 64


class Rig:
    """A reader whose intake records each datagram (then calls ``also``, if given), and
    which is the reader's stage: it counts the drains."""

    #: The reader under test (the ``reader_class`` fixture sets it for each run).
    reader_class: type[DatagramReader] = DatagramReader

    def __init__(
        self,
        receiver: socket.socket,
        also: Callable[[bytes], None] | None = None,
        linger_us: int = 0,
        max_bytes: int = MAX,
    ) -> None:
        self.handled: list[bytes] = []
        self.drains = 0
        self._also = also
        self.reader = self.reader_class(
            receiver, self._handle, self, max_bytes, linger_us=linger_us
        )

    def _handle(self, data: bytes) -> None:
        self.handled.append(data)
        if self._also is not None:
            self._also(data)

    def after_drain(self) -> None:
        self.drains += 1

    def after_slab(self, peeked: tuple[int, int] | None) -> None:
        raise AssertionError("no journal: no slab is announced")


@pytest.fixture(autouse=True, params=READERS)
def reader_class(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> type[DatagramReader]:
    monkeypatch.setattr(Rig, "reader_class", request.param)
    monkeypatch.setenv(receive_policy.RECEIVE_ENV, "thread")  # whatever this kernel's qlen
    return request.param  # type: ignore[no-any-return]


def test_a_drain_handles_every_queued_datagram_in_order_then_reports_once(
    pair: tuple[socket.socket, socket.socket],
) -> None:
    sender, receiver = pair
    rig = Rig(receiver)
    for index in range(5):
        sender.send(b"d%d" % index)
    assert rig.reader.drain() == 5
    assert rig.handled == [b"d0", b"d1", b"d2", b"d3", b"d4"]
    assert rig.drains == 1
    assert rig.reader.drain() == 0  # nothing queued: still one report per drain
    assert rig.drains == 2


def test_an_empty_datagram_is_handled_not_taken_for_the_end(
    pair: tuple[socket.socket, socket.socket],
) -> None:
    sender, receiver = pair
    rig = Rig(receiver)
    sender.send(b"first")
    sender.send(b"")
    sender.send(b"last")
    assert rig.reader.drain() == 3
    assert rig.handled == [b"first", b"", b"last"]


def test_an_oversized_datagram_arrives_one_byte_over_the_limit_not_cut_to_it(
    pair: tuple[socket.socket, socket.socket],
) -> None:
    sender, receiver = pair
    rig = Rig(receiver)
    sender.send(b"x" * MAX)
    sender.send(b"y" * (MAX + 50))
    rig.reader.drain()
    assert [len(data) for data in rig.handled] == [MAX, MAX + 1]  # the intake sees too_large


def test_one_wake_up_handles_at_most_the_cap(
    pair: tuple[socket.socket, socket.socket], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(socket_reader, "_MAX_PER_WAKEUP", 3)
    sender, receiver = pair
    rig = Rig(receiver)
    for index in range(5):
        sender.send(b"d%d" % index)
    assert rig.reader.drain() == 3
    assert rig.drains == 1  # what was handled is flushed before yielding
    assert rig.reader.drain() == 2
    assert rig.handled == [b"d0", b"d1", b"d2", b"d3", b"d4"]
    assert rig.drains == 2


def test_the_event_loop_drains_when_datagrams_arrive_until_stopped(
    pair: tuple[socket.socket, socket.socket],
) -> None:
    sender, receiver = pair

    async def test() -> None:
        rig = Rig(receiver)
        rig.reader.start()
        sender.send(b"one")
        sender.send(b"two")
        await until(lambda: len(rig.handled) == 2, "the datagrams")
        assert rig.handled == [b"one", b"two"]
        rig.reader.stop()
        sender.send(b"three")  # queued in the kernel, for a later drain
        assert rig.reader.drain() == 1
        assert rig.handled[-1] == b"three"

    asyncio.run(test())


def test_the_final_drain_takes_what_is_queued_and_refuses_the_rest(
    pair: tuple[socket.socket, socket.socket], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(socket_reader, "_MAX_PER_WAKEUP", 2)  # several drains in the final one
    sender, receiver = pair
    refused: list[int] = []

    def write_late(data: bytes) -> None:
        if data == b"d0":  # a sender still writing while the daemon shuts down
            try:
                sender.send(b"late")
            except OSError as exc:
                refused.append(exc.errno or 0)

    rig = Rig(receiver, write_late)
    for index in range(5):
        sender.send(b"d%d" % index)
    rig.reader.close_after_final_drain(refuse_new=True)
    assert rig.handled == [b"d0", b"d1", b"d2", b"d3", b"d4"]
    assert refused == [errno.EPIPE]  # told at once, not queued and silently dropped
    assert receiver.fileno() == -1
    with pytest.raises(OSError) as closed:
        sender.send(b"after")
    assert closed.value.errno in (errno.ECONNREFUSED, errno.ENOTCONN, errno.EPIPE)


def test_a_socket_systemd_owns_is_drained_but_not_shut(
    pair: tuple[socket.socket, socket.socket],
) -> None:
    sender, receiver = pair

    def write_late(data: bytes) -> None:
        if data == b"d0":
            sender.send(b"late")  # accepted: the socket is not shut for reading

    rig = Rig(receiver, write_late)
    sender.send(b"d0")
    rig.reader.close_after_final_drain(refuse_new=False)
    assert rig.handled == [b"d0", b"late"]  # the same final drain took it
    assert receiver.fileno() == -1


def test_readers_linger_only_for_a_deep_kernel_queue_and_within_the_batch_delay(
    tmp_path: Path,
) -> None:
    linger = receive_policy.read_linger_us
    assert linger(None, 10) == 0
    assert linger(10, 10) == 0  # the kernel's default: senders would block
    assert linger(512, 10) == receive_policy.LINGER_MAX_US == 2000  # 10 ms / 5, capped
    assert linger(512, 5) == 1000
    assert linger(512, 0) == receive_policy.LINGER_MIN_US
    qlen = tmp_path / "max_dgram_qlen"
    qlen.write_text("512\n")
    assert receive_policy.kernel_queue_length(str(qlen)) == 512
    assert receive_policy.kernel_queue_length(str(tmp_path / "absent")) is None
    if compiled is not None:
        with pytest.raises(ValueError):
            compiled.Receiver(0, 64, nap_us=-1)


def test_a_reader_that_took_a_few_datagrams_lingers_before_it_watches_again(
    pair: tuple[socket.socket, socket.socket], monkeypatch: pytest.MonkeyPatch
) -> None:
    """At a moderate rate each datagram would be a wake-up of its own: after a drain that
    took a few, the reader on the loop leaves the socket alone for ``linger_us``, then
    takes what came meanwhile in one drain; after an empty drain it watches at once (an
    idle daemon does not wake every linger); a stop during a linger ends it."""
    monkeypatch.setenv(receive_policy.RECEIVE_ENV, "loop")
    sender, receiver = pair
    clock = FakeClock()
    rig = Rig(receiver, linger_us=2000)
    reader = rig.reader

    async def turns(count: int) -> None:
        for _ in range(count):
            await asyncio.sleep(0)  # ready callbacks only: the fake clock stands still

    async def test() -> None:
        reader.start()
        for data in (b"a", b"b", b"c"):
            sender.send(data)
        await until_soon(lambda: rig.handled == [b"a", b"b", b"c"], "the first drain")
        assert reader.lingering
        began = clock.now
        sender.send(b"d")
        sender.send(b"e")
        await turns(50)
        assert rig.handled == [b"a", b"b", b"c"]  # queued in the kernel meanwhile
        await until(lambda: rig.handled[3:] == [b"d", b"e"], "the datagrams after the linger")
        assert clock.now - began >= 0.002 - 1e-9
        drains = rig.drains
        await until(lambda: not reader.lingering, "the empty drain after the second linger")
        assert rig.drains == drains + 1  # one drain found nothing: watching, not lingering
        await turns(50)
        assert not reader.lingering and rig.drains == drains + 1
        sender.send(b"f")
        await until_soon(lambda: rig.handled[-1:] == [b"f"], "a datagram after idling")
        assert reader.lingering
        reader.stop()
        assert not reader.lingering
        sender.send(b"g")
        await asyncio.sleep(0.01)
        assert rig.handled[-1:] == [b"f"]  # stopped: nothing read after the linger either

    run_on_clock(test(), clock)


def test_the_linger_shortens_for_a_fast_sender_and_grows_back_for_a_slow_one(
    pair: tuple[socket.socket, socket.socket], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A slab or more arriving during a linger halves the next (a fast sender must not
    find the kernel queue full while the reader waits); fewer than ``LINGER_TARGET``
    (three quarters of a slab: one wake-up a slab at a steady moderate rate) lengthen it
    towards them, at most doubled, up to ``linger_us``.  A drain that did not fill a slab
    lingers."""
    monkeypatch.setenv(receive_policy.RECEIVE_ENV, "loop")
    sender, receiver = pair
    clock = FakeClock()
    rig = Rig(receiver, linger_us=2000)
    reader = rig.reader

    async def test() -> None:
        reader.start()
        sender.send(b"first")
        await until_soon(lambda: reader.lingering, "a linger after one datagram")
        for i in range(socket_reader.SLAB + 6):
            sender.send(b"%d" % i)
        await until(lambda: len(rig.handled) == socket_reader.SLAB + 7, "the fast burst")
        assert reader.next_linger_s == pytest.approx(0.001)  # halved
        assert not reader.lingering  # a full drain: read on at once
        assert socket_reader.LINGER_TARGET == 48
        for i in range(40):  # more than half a slab, not a slab
            sender.send(b"%d" % i)
        await until_soon(lambda: reader.lingering, "a linger after 40 datagrams")
        for i in range(30):
            sender.send(b"%d" % i)
        await until(lambda: len(rig.handled) == socket_reader.SLAB + 77, "the 30")
        assert reader.next_linger_s == pytest.approx(0.001 * 48 / 30)  # towards 48
        await until(lambda: not reader.lingering, "the next linger's end")
        assert reader.next_linger_s == pytest.approx(0.002)  # nothing came: doubled, capped
        sender.send(b"slow")
        await until_soon(lambda: reader.lingering, "a linger after one datagram")
        began = clock.now
        await until(lambda: not reader.lingering, "the linger's end")
        assert clock.now - began == pytest.approx(0.002)
        reader.stop()

    run_on_clock(test(), clock)


#: Two of these are a large slab by bytes (``LINGER_BYTES``), however few.
LARGE = 20_000


def test_a_few_large_datagrams_are_no_small_slab_and_end_a_linger_early(
    pair: tuple[socket.socket, socket.socket], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A slab is small by bytes too: a sender's send buffer holds only about fifteen
    10 KB datagrams, so a reader that lingered after a few large ones would stall a fast
    sender long before the kernel queue is full.  Two 20 KB datagrams end no linger
    after them, and arriving during one halve the next."""
    monkeypatch.setenv(receive_policy.RECEIVE_ENV, "loop")
    sender, receiver = pair
    clock = FakeClock()
    rig = Rig(receiver, linger_us=2000, max_bytes=2 * LARGE)
    reader = rig.reader

    async def test() -> None:
        reader.start()
        sender.send(b"a" * LARGE)
        sender.send(b"b" * LARGE)
        await until(lambda: len(rig.handled) == 2, "the two large datagrams")
        assert reader.drained_bytes == 2 * LARGE
        assert not reader.lingering  # two datagrams, but 40 KB: read on at once
        sender.send(b"small")
        await until_soon(lambda: reader.lingering, "a linger after one small datagram")
        sender.send(b"c" * LARGE)
        sender.send(b"d" * LARGE)
        await until(lambda: len(rig.handled) == 5, "the large datagrams after the linger")
        assert reader.next_linger_s == pytest.approx(0.001)  # 40 KB came: halved
        assert not reader.lingering
        reader.stop()

    run_on_clock(test(), clock)


@pytest.mark.skipif(compiled is None, reason="the compiled intake is not built")
@pytest.mark.parametrize(
    ("size", "naps"), [(100, True), (LARGE, False)], ids=["small-naps", "large-reads-on"]
)
def test_the_thread_naps_after_a_slab_small_in_count_and_in_bytes_only(
    pair: tuple[socket.socket, socket.socket],
    size: int,
    naps: bool,
    reader_class: type[DatagramReader],
) -> None:
    """Three datagrams queued before the thread starts: 300 bytes make a small slab, which
    naps once for more before it is published; 60 KB do not, whatever their count (a
    fast sender of large values blocks on its send buffer first)."""
    assert compiled is not None
    if reader_class is not ThreadedDatagramReader:
        pytest.skip("the receive thread itself: once")
    sender, receiver = pair
    for _ in range(3):
        sender.send(b"x" * size)
    thread = compiled.Receiver(receiver.fileno(), 2 * LARGE, nap_us=100_000)
    thread.start()
    try:
        taken: list[bytes] = []
        deadline = time.monotonic() + 10
        while len(taken) < 3 and time.monotonic() < deadline:
            taken += thread.take() or []
            time.sleep(0.001)
        assert [len(data) for data in taken] == [size] * 3
        assert (thread.naps > 0) is naps  # a small slab naps (then the next one first)
    finally:
        thread.stop()


@pytest.mark.skipif(compiled is None, reason="the compiled intake is not built")
def test_the_thread_naps_first_after_a_slab_that_did_not_fill(
    pair: tuple[socket.socket, socket.socket], reader_class: type[DatagramReader]
) -> None:
    """40 datagrams queued before the thread starts: more than half a slab, so the slab
    is published without a nap, but it did not fill, so the next one naps first (at a
    steady moderate rate one wake-up a slab, not a poll and a nap)."""
    assert compiled is not None
    if reader_class is not ThreadedDatagramReader:
        pytest.skip("the receive thread itself: once")
    sender, receiver = pair
    for _ in range(40):
        sender.send(b"x" * 100)
    thread = compiled.Receiver(receiver.fileno(), 1024, nap_us=1000)
    thread.start()
    try:
        taken: list[bytes] = []
        deadline = time.monotonic() + 10
        while (len(taken) < 40 or not thread.naps) and time.monotonic() < deadline:
            taken += thread.take() or []
            time.sleep(0.001)
        assert len(taken) == 40
        assert thread.naps > 0  # the next slab napped first, with nothing queued
    finally:
        thread.stop()


@pytest.mark.parametrize("qlen", [10, 512], ids=["no-naps", "naps"])
def test_many_datagrams_sent_while_the_loop_drains_all_arrive_in_order(
    pair: tuple[socket.socket, socket.socket], qlen: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """More datagrams than the thread's slabs hold (4 x 64), sent as fast as the
    socket takes them: every one is handled, in the order sent (with the thread's
    naps for a fuller slab too, and the loop reader's lingers)."""
    monkeypatch.setattr(socket_reader, "kernel_queue_length", lambda: qlen)
    sender, receiver = pair
    sender.setblocking(False)
    total = 3000
    rig = Rig(receiver, linger_us=receive_policy.read_linger_us(qlen, 10.0))

    async def test() -> None:
        rig.reader.start()
        sent = 0
        while sent < total:
            try:
                sender.send(b"%d" % sent)
                sent += 1
            except BlockingIOError:  # the kernel queue is full: let the loop drain
                await asyncio.sleep(0)
        await until(lambda: len(rig.handled) == total, "every datagram")
        rig.reader.stop()

    asyncio.run(test())
    assert [int(data) for data in rig.handled] == list(range(total))


@pytest.mark.skipif(compiled is None, reason="the compiled intake is not built")
def test_a_loop_that_falls_behind_stops_the_thread_and_the_sender_waits(
    pair: tuple[socket.socket, socket.socket], reader_class: type[DatagramReader]
) -> None:
    """With every slab filled and untaken the thread stops reading: the kernel queue
    fills and a non-blocking sender gets EAGAIN.  Nothing is dropped: once the loop
    runs again every datagram is handled, in order."""
    if reader_class is not ThreadedDatagramReader:
        pytest.skip("the receive thread only")
    sender, receiver = pair
    sender.setblocking(False)
    rig = Rig(receiver)
    assert isinstance(rig.reader, ThreadedDatagramReader)
    thread = rig.reader._receiver

    async def test() -> None:
        rig.reader.start()
        sent = 0
        deadline = time.monotonic() + 10
        while thread.stats[2] < 4:  # the loop does not run: the thread's 4 slabs fill up
            assert time.monotonic() < deadline, "the thread did not fill its slabs"
            try:
                sender.send(b"%d" % sent)
                sent += 1
            except BlockingIOError:
                time.sleep(0.001)
        with pytest.raises(BlockingIOError):  # the thread reads no more: the queue is full
            while True:
                sender.send(b"%d" % sent)
                sent += 1
        held = thread.stats[1]
        assert thread.stats[2] == 4 and held <= 4 * 64  # the thread read nothing more
        await until(lambda: len(rig.handled) == sent, "every datagram after the loop ran")
        rig.reader.stop()
        assert [int(data) for data in rig.handled] == list(range(sent))

    asyncio.run(test())


@pytest.mark.skipif(compiled is None, reason="the compiled intake is not built")
def test_what_the_thread_holds_while_the_loop_is_busy_is_taken_when_the_loop_is_free(
    pair: tuple[socket.socket, socket.socket], reader_class: type[DatagramReader]
) -> None:
    """The loop is busy with the first datagram while more arrive: the thread holds
    them in a partial slab (no wake-up per datagram), and the loop takes that slab
    itself once it is free, though nothing more arrives to make the thread publish."""
    if reader_class is not ThreadedDatagramReader:
        pytest.skip("the receive thread only")
    sender, receiver = pair
    busy = threading.Event()
    release = threading.Event()

    def hold_the_loop(data: bytes) -> None:
        if data == b"0":
            busy.set()
            assert release.wait(10), "the sender thread never released the loop"

    rig = Rig(receiver, hold_the_loop)
    assert isinstance(rig.reader, ThreadedDatagramReader)
    thread = rig.reader._receiver
    held: list[int] = []

    def send() -> None:
        sender.send(b"0")
        assert busy.wait(10)
        for index in range(1, 10):
            sender.send(b"%d" % index)
        deadline = time.monotonic() + 10
        while thread.stats[3] < 9 and time.monotonic() < deadline:
            time.sleep(0.001)
        held.append(thread.stats[3])
        release.set()

    async def test() -> None:
        rig.reader.start()
        sending = threading.Thread(target=send)
        sending.start()
        await until(lambda: len(rig.handled) == 10, "all ten datagrams")
        sending.join()
        rig.reader.stop()

    asyncio.run(test())
    assert held == [9]  # the thread held them, and did not wake the busy loop for each
    assert rig.handled == [b"%d" % index for index in range(10)]
