"""DatagramReader on a real socketpair: drains, the per-wake-up cap, empty and oversized
datagrams, the event-loop reader, and the final drain at shutdown."""

from __future__ import annotations

import asyncio
import errno
import socket
from collections.abc import Callable, Iterator

import pytest
from pulsar_bruce.input import socket_reader
from pulsar_bruce.input.socket_reader import DatagramReader

from tests.support.fakes_asyncio import until

MAX = 64


class Rig:
    """A reader whose intake records each datagram (then calls ``also``, if given)."""

    def __init__(
        self, receiver: socket.socket, also: Callable[[bytes], None] | None = None
    ) -> None:
        self.handled: list[bytes] = []
        self.drains = 0
        self._also = also
        self.reader = DatagramReader(receiver, self._handle, self._after_drain, MAX)

    def _handle(self, data: bytes) -> None:
        self.handled.append(data)
        if self._also is not None:
            self._also(data)

    def _after_drain(self) -> None:
        self.drains += 1


@pytest.fixture
def pair() -> Iterator[tuple[socket.socket, socket.socket]]:
    sender, receiver = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
    receiver.setblocking(False)
    yield sender, receiver
    sender.close()
    receiver.close()


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
