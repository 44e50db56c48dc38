"""What the reader tests share: the readers each test runs with (the compiled ones where the
compiled intake is built), and a stage for them to tell."""

from __future__ import annotations

import pytest
from pulsar_bruce.input.socket_reader import DatagramReader, ThreadedDatagramReader
from pulsar_bruce.input.stream_server import SequencedStream
from pulsar_bruce.native import compiled


class Stage:
    """The pipeline as the readers see it (``ReadStage``, ``StreamStage``): counts the
    drains; a test with a journal or with Producer records gives its own."""

    def __init__(self) -> None:
        self.drains = 0

    def after_drain(self) -> None:
        self.drains += 1

    def after_slab(self, peeked: tuple[int, int] | None) -> None:
        raise AssertionError("no journal here: no slab is announced")

    def sequenced_sender(self, name: str, first_sequence_id: int) -> SequencedStream:
        raise AssertionError("no Producer record here")


class CompiledLoopReader(ThreadedDatagramReader):
    """The compiled reader without its thread: ``recvmmsg`` on the event loop, what a short
    kernel queue (``max_dgram_qlen`` < 128) gets."""

    def _open(self, max_datagram_bytes: int) -> None:
        super()._open(max_datagram_bytes)
        self.threaded = False


NOT_BUILT = pytest.mark.skipif(compiled is None, reason="the compiled intake is not built")
READERS = [
    pytest.param(DatagramReader, id="python"),
    pytest.param(ThreadedDatagramReader, id="threaded", marks=NOT_BUILT),
    pytest.param(CompiledLoopReader, id="compiled-loop", marks=NOT_BUILT),
]
