"""StreamConnection with a fake transport and intake: backpressure, flush answers, framing;
StreamServer on a real UNIX socket."""

from __future__ import annotations

import asyncio
import socket
import struct
from collections.abc import Awaitable, Callable
from pathlib import Path

from pulsar_bruce import reasons
from pulsar_bruce.input.stream_server import StreamConnection, StreamServer
from pulsar_bruce.model.confirmation import Confirmation
from pulsar_bruce.route.intake import admit_each
from to_pulsar.encoding import encode_any_partition
from to_pulsar.protocol import FlushResult, decode_flush_response, encode_flush_request

from tests.support.fakes_asyncio import FakeTransport, until

BAD = b"refuse-me"


class FakeIntake:
    """Takes records while ``accepting``; otherwise answers False (no memory: try later).

    A record whose value is :data:`BAD` is refused at the door as ``bad_topic``.
    """

    max_message_bytes = 1024

    def __init__(self) -> None:
        self.accepting = True
        self.offers = 0
        self.admitted: list[tuple[bytes, Confirmation | None]] = []

    def admit(self, data: bytes, confirmation: Confirmation | None = None) -> bool:
        self.offers += 1
        if data.endswith(BAD):
            if confirmation is not None:
                confirmation.discard(reasons.BAD_TOPIC)
            return True
        if not self.accepting:
            return False
        if confirmation is not None:
            confirmation.outstanding += 1
        self.admitted.append((data, confirmation))
        return True

    def admit_records(
        self, records: list[bytes], start: int, tag: Confirmation, stop_api_key: int, /
    ) -> int:
        return admit_each(self.admit, records, start, tag, stop_api_key)

    @property
    def values(self) -> list[bytes]:
        return [data[-2:] for data, _ in self.admitted]

    def settle(self, index: int, reason: str | None = None) -> None:
        """The message admitted ``index``-th is acked (or discarded for ``reason``)."""
        confirmation = self.admitted[index][1]
        assert confirmation is not None
        confirmation.settle(1, reason)


def record(value: bytes) -> bytes:
    return encode_any_partition("t", value)


def responses(transport: FakeTransport) -> list[tuple[int, FlushResult]]:
    data = transport.data
    out = []
    while data:
        (size,) = struct.unpack_from(">i", data, 0)
        out.append(decode_flush_response(data[:size]))
        data = data[size:]
    return out


class Rig:
    def __init__(self) -> None:
        self.intake = FakeIntake()
        self.drains = 0
        self.transport = FakeTransport()
        self.connection = StreamConnection(self.intake, self._after_records)
        self.connection.connection_made(self.transport)

    def _after_records(self) -> None:
        self.drains += 1


def run(test: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(test())


# -- flushes -----------------------------------------------------------------------------------


def test_a_flush_is_answered_once_every_record_before_it_is_settled() -> None:
    async def test() -> None:
        rig = Rig()
        rig.connection.data_received(record(b"v1") + record(b"v2") + encode_flush_request(7))
        assert rig.intake.values == [b"v1", b"v2"]
        assert rig.drains == 1
        assert rig.transport.written == []
        rig.intake.settle(0)
        rig.intake.settle(1, reasons.SEND_TIMEOUT)
        await until(lambda: rig.transport.written, "the flush response")
        assert responses(rig.transport) == [(7, FlushResult(1, {reasons.SEND_TIMEOUT: 1}))]

    run(test)


def test_a_flush_with_nothing_outstanding_is_answered_at_once() -> None:
    async def test() -> None:
        rig = Rig()
        rig.connection.data_received(encode_flush_request(1) + record(BAD))
        rig.connection.data_received(encode_flush_request(2))
        assert responses(rig.transport) == [
            (1, FlushResult(0, {})),
            (2, FlushResult(0, {reasons.BAD_TOPIC: 1})),
        ]

    run(test)


def test_flushes_are_answered_in_request_order() -> None:
    async def test() -> None:
        rig = Rig()
        rig.connection.data_received(record(b"v1") + encode_flush_request(1))
        rig.connection.data_received(record(b"v2") + encode_flush_request(2))
        rig.intake.settle(1)  # the second flush's record first: its answer must wait
        await asyncio.sleep(0)  # let a (wrong) early answer be written if one was scheduled
        await asyncio.sleep(0)
        assert rig.transport.written == []
        rig.intake.settle(0)
        await until(lambda: rig.transport.written, "the flush responses")
        assert [request_id for request_id, _ in responses(rig.transport)] == [1, 2]

    run(test)


def test_a_record_split_across_reads_is_taken_once_complete() -> None:
    async def test() -> None:
        rig = Rig()
        data = record(b"v1") + encode_flush_request(3)
        for index in range(len(data)):
            rig.connection.data_received(data[index : index + 1])
        assert rig.intake.values == [b"v1"]
        rig.intake.settle(0)
        await until(lambda: rig.transport.written, "the flush response")
        assert responses(rig.transport) == [(3, FlushResult(1, {}))]

    run(test)


# -- backpressure ------------------------------------------------------------------------------


def test_a_refused_record_pauses_reading_until_the_intake_takes_it() -> None:
    async def test() -> None:
        rig = Rig()
        rig.intake.accepting = False
        rig.connection.data_received(record(b"v1") + record(b"v2"))
        assert rig.transport.calls == ["pause_reading"]
        assert rig.intake.admitted == []
        # Data the kernel had already handed over is kept, not offered while paused.
        rig.connection.data_received(record(b"v3") + encode_flush_request(9))
        offers = rig.intake.offers
        await until(lambda: rig.intake.offers >= offers + 2, "the record to be offered again")
        assert rig.transport.calls == ["pause_reading"]  # one pause, however many retries
        rig.intake.accepting = True
        await until(lambda: "resume_reading" in rig.transport.calls, "reading to resume")
        assert rig.transport.calls == ["pause_reading", "resume_reading"]
        assert rig.intake.values == [b"v1", b"v2", b"v3"]  # in order, each once
        assert rig.transport.written == []  # the flush waits for its records
        for index in range(3):
            rig.intake.settle(index)
        await until(lambda: rig.transport.written, "the flush response")
        assert responses(rig.transport) == [(9, FlushResult(3, {}))]

    run(test)


def test_stop_reading_pauses_the_connection_but_still_answers_flushes() -> None:
    async def test() -> None:
        rig = Rig()
        rig.connection.data_received(record(b"v1") + encode_flush_request(4))
        rig.connection.stop_reading()
        assert rig.transport.calls == ["pause_reading"]
        rig.connection.data_received(record(b"v2"))  # read by the kernel before the pause
        assert rig.intake.values == [b"v1"]
        rig.intake.settle(0)
        await until(lambda: rig.transport.written, "the flush response")
        assert responses(rig.transport) == [(4, FlushResult(1, {}))]
        rig.connection.close()
        assert rig.transport.calls[-1] == "close"

    run(test)


# -- framing -----------------------------------------------------------------------------------


def test_a_record_size_below_the_header_closes_the_connection() -> None:
    async def test() -> None:
        rig = Rig()
        rig.connection.data_received(record(b"v1") + struct.pack(">ihh", 4, 0, 0) + b"tail")
        assert rig.intake.values == [b"v1"]
        assert rig.transport.calls == ["close"]

    run(test)


def test_a_record_size_beyond_the_framing_limit_closes_the_connection_at_once() -> None:
    async def test() -> None:
        rig = Rig()
        # Only the header has arrived: the size alone says the stream is out of sync.
        rig.connection.data_received(struct.pack(">ihh", 64 << 20, 0, 0))
        assert rig.transport.calls == ["close"]
        assert rig.intake.offers == 0

    run(test)


def test_a_malformed_flush_request_closes_the_connection() -> None:
    async def test() -> None:
        rig = Rig()
        request = bytearray(encode_flush_request(5))
        request[6:8] = struct.pack(">h", 1)  # ApiVersion 1 does not exist
        rig.connection.data_received(bytes(request))
        assert rig.transport.calls == ["close"]

    run(test)


# -- the server on a real socket -----------------------------------------------------------------


def test_the_server_accepts_records_and_answers_flushes_over_a_real_socket(tmp_path: Path) -> None:
    path = str(tmp_path / "s.sock")

    async def test() -> None:
        intake = FakeIntake()
        drained: list[int] = []
        server = StreamServer(path, 0o600, intake, lambda: drained.append(1))
        await server.start()
        assert Path(path).exists()
        loop = asyncio.get_running_loop()
        client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        client.setblocking(False)
        try:
            await loop.sock_connect(client, path)
            await loop.sock_sendall(client, record(b"v1") + encode_flush_request(11))
            await until(lambda: intake.admitted, "the record")
            intake.settle(0)
            answer = await asyncio.wait_for(loop.sock_recv(client, 4096), 10)
            assert decode_flush_response(answer) == (11, FlushResult(1, {}))
            assert drained
            server.stop_reading()
            await server.stop()
            assert not Path(path).exists()
            # The server closed our connection: the client reads the end of the stream.
            assert await asyncio.wait_for(loop.sock_recv(client, 4096), 10) == b""
        finally:
            client.close()

    run(test)
