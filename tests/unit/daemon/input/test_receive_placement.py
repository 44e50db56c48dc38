"""Where the compiled reader reads: on its thread for a deep kernel queue, on the event loop
for a short one (the default 10), and ``Receiver.read_now``, the loop's ``recvmmsg``."""

from __future__ import annotations

import logging
import socket

import pytest
from pulsar_bruce.input import socket_reader
from pulsar_bruce.input.receive_policy import RECEIVE_ENV, receive_on_thread
from pulsar_bruce.input.socket_reader import DatagramReader, ThreadedDatagramReader, datagram_reader
from pulsar_bruce.native import compiled

from tests.unit.daemon.input.helpers import Stage

needs_compiled = pytest.mark.skipif(compiled is None, reason="the compiled intake is not built")


def test_the_thread_is_for_a_deep_kernel_queue_unless_forced() -> None:
    assert [receive_on_thread(qlen) for qlen in (None, 10, 127, 128, 512)] == [
        False,
        False,
        False,
        True,
        True,
    ]
    assert receive_on_thread(10, "thread") and not receive_on_thread(512, "loop")
    assert receive_on_thread(512, "bogus")  # anything else: the kernel queue decides


@needs_compiled
@pytest.mark.parametrize(
    ("qlen", "forced", "threaded"),
    [(10, None, False), (512, None, True), (512, "loop", False), (10, "thread", True)],
)
def test_the_compiled_reader_reads_where_the_kernel_queue_says(
    pair: tuple[socket.socket, socket.socket],
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    qlen: int,
    forced: str | None,
    threaded: bool,
) -> None:
    monkeypatch.setattr(socket_reader, "kernel_queue_length", lambda: qlen)
    if forced is None:
        monkeypatch.delenv(RECEIVE_ENV, raising=False)
    else:
        monkeypatch.setenv(RECEIVE_ENV, forced)
    with caplog.at_level(logging.INFO, logger="pulsar_bruce.input"):
        reader = datagram_reader(pair[1], lambda data: None, Stage(), 64)
    assert isinstance(reader, ThreadedDatagramReader) and reader.threaded is threaded
    where = "on its own thread" if threaded else "on the event loop"
    assert f"intake: compiled (recvmmsg {where})" in caplog.text


@needs_compiled
def test_read_now_reads_up_to_its_limit_in_order_then_answers_none(
    pair: tuple[socket.socket, socket.socket],
) -> None:
    assert compiled is not None
    sender, receiver = pair
    reader = compiled.Receiver(receiver.fileno(), 64)
    assert reader.read_now(8) is None  # nothing queued
    for index in range(100):
        sender.send(b"%d" % index)
    sender.send(b"x" * 200)  # oversized: one byte over the limit, for the intake to refuse
    assert reader.read_now(0) is None
    first = reader.read_now(3)
    assert first == [b"0", b"1", b"2"]
    second = reader.read_now(1000)  # at most a slab
    assert second is not None and len(second) == 64
    rest = reader.read_now(1000)
    assert rest is not None
    assert [int(data) for data in first + second + rest[:-1]] == list(range(100))
    assert rest[-1] == b"x" * 65
    assert reader.read_now(8) is None
    assert reader.stats[:2] == (3, 101)  # recvmmsg calls, datagrams


@needs_compiled
def test_read_now_refuses_while_the_thread_runs(pair: tuple[socket.socket, socket.socket]) -> None:
    assert compiled is not None
    reader = compiled.Receiver(pair[1].fileno(), 64)
    reader.start()
    try:
        with pytest.raises(RuntimeError, match="thread"):
            reader.read_now(8)
    finally:
        reader.stop()
    assert reader.read_now(8) is None


def test_without_the_compiled_intake_the_python_reader_reads_on_the_loop(
    pair: tuple[socket.socket, socket.socket], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(socket_reader, "compiled", None)
    reader = datagram_reader(pair[1], lambda data: None, Stage(), 64)
    assert type(reader) is DatagramReader
