"""Reading for the write-ahead journal, on a real socketpair, both readers: a slab is
peeked, so until the journal has written it the datagrams stay in the kernel's queue (a
process killed meanwhile leaves them to its successor on the held socket), and
``write_then_consume`` (C, and its Python twin) writes then takes exactly the slab off."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest
from pulsar_bruce.input.socket_reader import SO_PEEK_OFF
from pulsar_bruce.spool import journal_files

from tests.unit.daemon.input.helpers import READERS

MAX = 64


class Slabs:
    """The reader's stage: records each slab's size; consumes nothing."""

    def __init__(self, slabs: list[int]) -> None:
        self.slabs = slabs

    def after_slab(self, peeked: tuple[int, int] | None) -> None:
        assert peeked is not None
        self.slabs.append(peeked[1])

    def after_drain(self) -> None:
        pass


def reader_on(reader_class: type, receiver: socket.socket, slabs: list[int]) -> tuple:
    handled: list[bytes] = []
    reader = reader_class(receiver, handled.append, Slabs(slabs), MAX, journalled=True)
    assert reader.peek
    return reader, handled


@pytest.fixture(params=READERS)
def reader_class(request: pytest.FixtureRequest) -> type:
    return request.param  # type: ignore[no-any-return]


def queued(receiver: socket.socket) -> list[bytes]:
    """What the kernel still holds (read for real, so the queue is empty afterwards)."""
    receiver.setsockopt(socket.SOL_SOCKET, SO_PEEK_OFF, -1)  # plain reads from now on
    out = []
    while True:
        try:
            out.append(receiver.recv(MAX + 1))
        except BlockingIOError:
            return out


def test_a_peeked_slab_stays_queued_until_the_journal_consumes_it(
    pair: tuple[socket.socket, socket.socket], reader_class: type
) -> None:
    sender, receiver = pair
    for i in range(5):
        sender.send(b"m%d" % i)
    slabs: list[int] = []
    reader, handled = reader_on(reader_class, receiver, slabs)
    assert reader.drain() == 5
    assert handled == [b"m0", b"m1", b"m2", b"m3", b"m4"]
    assert sum(slabs) == 5  # every datagram was announced as peeked ...
    sender.send(b"m5")
    assert reader.drain() == 1 and handled[-1] == b"m5"  # ... and the next read goes on after
    assert queued(receiver) == [b"m0", b"m1", b"m2", b"m3", b"m4", b"m5"]  # ... all still there


def test_a_successor_on_the_held_socket_reads_what_was_peeked_but_not_journalled(
    pair: tuple[socket.socket, socket.socket], reader_class: type
) -> None:
    sender, receiver = pair
    for i in range(3):
        sender.send(b"m%d" % i)
    first, _ = reader_on(reader_class, receiver, [])
    first.drain()  # "killed" before its journal write: nothing consumed
    second, handled = reader_on(reader_class, receiver, [])  # resets the peek offset
    second.drain()
    assert handled == [b"m0", b"m1", b"m2"]


@pytest.mark.parametrize(
    "write_then_consume",
    [
        pytest.param(journal_files._write_then_consume_py, id="python"),
        pytest.param(journal_files.write_then_consume, id="compiled"),
    ],
)
def test_write_then_consume_writes_whole_then_takes_exactly_the_slab(
    pair: tuple[socket.socket, socket.socket], tmp_path: Path, write_then_consume: object
) -> None:
    sender, receiver = pair
    for i in range(4):
        sender.send(b"d%d" % i)
    fd = os.open(tmp_path / "journal", os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    try:
        assert write_then_consume(fd, b"records" * 1000, receiver.fileno(), 3) == (7000, 0)  # type: ignore[operator]
        assert write_then_consume(-1, b"x", receiver.fileno(), 0)[1] != 0  # type: ignore[operator]
    finally:
        os.close(fd)
    assert (tmp_path / "journal").read_bytes() == b"records" * 1000
    assert receiver.recv(MAX) == b"d3"  # the three before it were taken, the rest stays
