"""StreamConnection with a fake transport and intake: backpressure, flush answers, framing;
StreamServer on a real UNIX socket."""

from __future__ import annotations

import asyncio
import socket
import struct
import threading
from collections.abc import Awaitable, Callable
from pathlib import Path
from types import SimpleNamespace

from pulsar_bruce import reasons
from pulsar_bruce.input.stream_server import StreamConnection, StreamServer
from pulsar_bruce.input.stream_session import SKIP_HEAD_KEPT, RecordBudget
from pulsar_bruce.model.confirmation import Confirmation
from pulsar_bruce.route.intake import admit_each
from to_pulsar.encoding import encode_any_partition
from to_pulsar.protocol import FlushResult, decode_flush_response, encode_flush_request

from tests.support.fakes_asyncio import FakeTransport, until
from tests.unit.daemon.input.helpers import Stage

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

        self.refused: list[tuple[str, bytes, int]] = []

    def refuse_record(
        self, reason: str, head: bytes, size: int, tag: Confirmation | None, /
    ) -> None:
        self.refused.append((reason, head, size))
        if tag is not None:
            tag.discard(reason)

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
    def __init__(self, budget: RecordBudget | None = None) -> None:
        self.intake = FakeIntake()
        self.stage = Stage()
        self.transport = FakeTransport()
        self.connection = StreamConnection(self.intake, self.stage, budget)
        self.connection.connection_made(self.transport)

    @property
    def drains(self) -> int:
        return self.stage.drains


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
        stage = Stage()
        server = StreamServer(path, 0o600, intake, stage)
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
            assert stage.drains
            server.stop_reading()
            await server.stop()
            assert not Path(path).exists()
            # The server closed our connection: the client reads the end of the stream.
            assert await asyncio.wait_for(loop.sock_recv(client, 4096), 10) == b""
        finally:
            client.close()

    run(test)


# -- a client that does not read its responses ---------------------------------------------------


def test_a_blocked_writer_pauses_reading_and_resumes_when_the_client_drains() -> None:
    async def test() -> None:
        rig = Rig()
        rig.connection.pause_writing()  # the transport's write buffer passed its high-water mark
        assert rig.transport.calls == ["pause_reading"]
        rig.connection.data_received(record(b"v1") + encode_flush_request(1))
        assert rig.intake.offers == 0  # read by the kernel before the pause: kept, not taken
        rig.connection.resume_writing()
        assert rig.transport.calls == ["pause_reading", "resume_reading"]
        assert rig.intake.values == [b"v1"]

    run(test)


def test_a_client_that_never_reads_its_responses_stops_being_read(tmp_path: Path) -> None:
    """4 MiB of flush requests, never a response read: the daemon stops reading that client
    once its responses pass the write buffer's high-water mark, instead of buffering them."""
    path = str(tmp_path / "s.sock")
    requests = b"".join(encode_flush_request(index) for index in range(4096))  # 72 KiB

    async def test() -> None:
        server = StreamServer(path, 0o600, FakeIntake(), Stage())
        await server.start()
        client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        client.connect(path)
        sent = threading.Event()

        def send() -> None:
            try:
                for _ in range(58):
                    client.sendall(requests)
            except OSError:
                pass  # the server closed the connection at the end of the test
            sent.set()

        sender = threading.Thread(target=send, daemon=True)
        sender.start()
        try:
            await until(lambda: server.open_connections(), "the connection")
            (connection,) = server.open_connections()
            transport = connection.transport
            assert isinstance(transport, asyncio.Transport)
            await until(
                lambda: sent.is_set() or not transport.is_reading(),
                "the client to have sent everything or its connection to stop reading",
            )
            buffered = transport.get_write_buffer_size()
            # One read's worth of answers at most (a read is <= 256 KiB of 18-byte requests).
            assert buffered < 1 << 20, f"{buffered} response bytes buffered"
            assert not sent.is_set()
        finally:
            client.shutdown(socket.SHUT_RDWR)  # ends the sender's blocked write
            await asyncio.to_thread(sender.join, 10)
            server.stop_reading()
            await server.stop()
            client.close()

    run(test)


# -- records refused at their header and the connection cap ---------------------------------------


def budget_of(rig: Rig, buffer_max_bytes: int, buffered: int = 0) -> RecordBudget:
    return RecordBudget(
        rig.intake, buffer_max_bytes, SimpleNamespace(buffered_bytes=buffered), reserve_from=100
    )


def test_a_record_over_max_message_bytes_is_skipped_and_told_at_the_next_flush() -> None:
    """Not buffered (not a byte of it beyond its first ones), not a closed connection: the
    sender's flush says ``too_large``, and the records after it are taken as ever."""

    async def test() -> None:
        rig = Rig()
        rig.connection = StreamConnection(rig.intake, Stage(), budget_of(rig, 1 << 20))
        rig.connection.connection_made(rig.transport)
        big = record(b"x" * 4000)  # > max_message_bytes 1024
        rig.connection.data_received(record(b"v1") + big[:100])
        assert rig.intake.values == [b"v1"]
        assert rig.connection.session.buffered_bytes == 0  # nothing kept for it
        rig.connection.data_received(big[100:3000])
        assert rig.intake.refused == [] and rig.connection.session.buffered_bytes == 0
        rig.connection.data_received(big[3000:] + record(b"v2") + encode_flush_request(9))
        assert rig.intake.refused == [(reasons.TOO_LARGE, big, len(big))]
        assert rig.intake.values == [b"v1", b"v2"]
        rig.intake.settle(0)
        rig.intake.settle(1)
        await until(lambda: rig.transport.written, "the flush response")
        assert responses(rig.transport) == [(9, FlushResult(2, {reasons.TOO_LARGE: 1}))]
        assert "close" not in rig.transport.calls

    run(test)


def test_a_record_skipped_after_a_pause_for_memory_lets_reading_resume() -> None:
    async def test() -> None:
        rig = Rig()
        rig.connection = StreamConnection(rig.intake, Stage(), budget_of(rig, 1 << 20))
        rig.connection.connection_made(rig.transport)
        rig.intake.accepting = False
        big = record(b"x" * 4000)
        rig.connection.data_received(record(b"v1") + big[:100])
        assert rig.transport.calls == ["pause_reading"]
        rig.intake.accepting = True  # the retry takes v1, then meets the big record's head
        await until(lambda: rig.intake.values == [b"v1"], "v1 to be taken")
        assert rig.transport.calls == ["pause_reading", "resume_reading"]
        rig.connection.data_received(big[100:] + record(b"v2"))
        assert rig.intake.refused == [(reasons.TOO_LARGE, big, len(big))]
        assert rig.intake.values == [b"v1", b"v2"]

    run(test)


def test_a_skipped_record_keeps_only_its_first_bytes() -> None:
    async def test() -> None:
        rig = Rig()
        rig.intake.max_message_bytes = 100_000
        rig.connection = StreamConnection(rig.intake, Stage(), budget_of(rig, 1 << 30))
        rig.connection.connection_made(rig.transport)
        big = record(b"y" * 300_000)
        for start in range(0, len(big), 7000):
            rig.connection.data_received(big[start : start + 7000])
        [(reason, head, size)] = rig.intake.refused
        assert (reason, head, size) == (reasons.TOO_LARGE, big[:SKIP_HEAD_KEPT], len(big))

    run(test)


def test_records_still_arriving_cannot_reserve_more_than_the_buffer() -> None:
    async def test() -> None:
        first, second = Rig(), Rig()
        for rig in (first, second):
            rig.intake.max_message_bytes = 8000
        budget = budget_of(first, buffer_max_bytes=10000, buffered=1000)
        for rig in (first, second):
            rig.connection = StreamConnection(rig.intake, Stage(), budget)
            rig.connection.connection_made(rig.transport)
        big = record(b"v" * 5900)  # about 6000 bytes
        first.connection.data_received(big[:200])
        assert budget.reserved == len(big) and first.transport.calls == []
        second.connection.data_received(big[:200])  # 6000 more do not fit 10000 - 1000 - 6000
        assert second.intake.refused == [(reasons.BUFFER_FULL, big[:64], len(big))]
        assert second.transport.calls == ["close"]
        first.connection.data_received(big[200:])  # complete: taken, its reservation released
        assert first.intake.values == [b"vv"] and budget.reserved == 0
        first.connection.connection_lost(None)
        assert budget.reserved == 0

    run(test)


def test_connections_beyond_the_cap_are_closed_at_once(tmp_path: Path) -> None:
    path = str(tmp_path / "s.sock")

    async def test() -> None:
        intake = FakeIntake()
        server = StreamServer(path, 0o600, intake, Stage(), max_connections=1)
        await server.start()
        loop = asyncio.get_running_loop()
        clients = [socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) for _ in range(3)]
        for client in clients:
            client.setblocking(False)
        try:
            first, second, third = clients
            await loop.sock_connect(first, path)
            await until(lambda: len(server.open_connections()) == 1, "the first connection")
            await loop.sock_connect(second, path)
            assert await asyncio.wait_for(loop.sock_recv(second, 4096), 10) == b""
            assert server.refused_connections == 1
            await loop.sock_sendall(first, encode_flush_request(1))
            answer = await asyncio.wait_for(loop.sock_recv(first, 4096), 10)
            assert decode_flush_response(answer) == (1, FlushResult(0, {}))
            first.close()
            await until(lambda: not server.open_connections(), "the first connection to end")
            await loop.sock_connect(third, path)
            await loop.sock_sendall(third, encode_flush_request(2))
            answer = await asyncio.wait_for(loop.sock_recv(third, 4096), 10)
            assert decode_flush_response(answer) == (2, FlushResult(0, {}))
        finally:
            server.stop_reading()
            await server.stop()
            for client in clients:
                client.close()

    run(test)
