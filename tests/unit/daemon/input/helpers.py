"""What the reader tests share: the readers each test runs with (the compiled ones where the
compiled intake is built)."""

from __future__ import annotations

import pytest
from pulsar_bruce.input.socket_reader import DatagramReader, ThreadedDatagramReader
from pulsar_bruce.native import compiled


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
