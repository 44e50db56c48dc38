"""to_pulsar.aio.AsyncStreamSender against a fake stream daemon."""

from __future__ import annotations

import asyncio
import struct
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import to_pulsar
from to_pulsar import (
    AsyncStreamSender,
    DaemonUnavailableError,
    FlushResult,
    SendTimeoutError,
    StreamClosedError,
    ToPulsarError,
    encode_any_partition,
    encode_partition_key,
)

from tests.support.fakestream import FakeStreamDaemon, Flush, flush_response


@pytest.fixture
def sock_path(tmp_path: Path) -> Iterator[Path]:
    if len(str(tmp_path)) < 90:
        yield tmp_path / "s.sock"
        return
    with tempfile.TemporaryDirectory(prefix="tp") as short:
        yield Path(short) / "s.sock"


def value_of(record: bytes) -> bytes:
    """Value of an AnyPartition record."""
    (topic_size,) = struct.unpack_from(">h", record, 10)
    (key_size,) = struct.unpack_from(">i", record, 12 + topic_size + 8)
    offset = 12 + topic_size + 8 + 4 + key_size
    (value_size,) = struct.unpack_from(">i", record, offset)
    return record[offset + 4 : offset + 4 + value_size]


def test_missing_socket(sock_path: Path) -> None:
    with pytest.raises(DaemonUnavailableError, match="no daemon listening"):
        AsyncStreamSender(sock_path)
    assert to_pulsar.AsyncStreamSender is AsyncStreamSender


def test_send_and_flush_byte_exact(fake: FakeStreamDaemon) -> None:
    fake.policy = lambda flush: flush_response(
        flush.request_id, len(flush.records) - 1, {"bad_topic": 1}
    )

    async def main() -> FlushResult:
        async with AsyncStreamSender(fake.path) as sender:
            await sender.send("clicks", b"v1", key=b"k", timestamp_ms=17)
            await sender.send("clicks", "v2", partition_key=7, timestamp_ms=18)
            await sender.send_raw(encode_any_partition("x", b"raw", b"", 1))
            assert sender.unconfirmed == 3
            result = await sender.flush()
            assert sender.unconfirmed == 0
            return result

    result = asyncio.run(main())
    assert result == FlushResult(2, {"bad_topic": 1}) and not result.ok
    assert fake.message_records() == [
        encode_any_partition("clicks", b"v1", b"k", 17),
        encode_partition_key(7, "clicks", b"v2", b"", 18),
        encode_any_partition("x", b"raw", b"", 1),
    ]
    assert fake.flushes[0].raw == struct.pack(">ihhhq", 18, 258, 0, 0, 1)


def test_concurrent_sends_keep_their_order_through_backpressure(fake: FakeStreamDaemon) -> None:
    fake.stop_reading()
    threading.Timer(0.3, fake.resume_reading).start()
    n = 2000

    async def main() -> FlushResult:
        async with AsyncStreamSender(fake.path, timeout=20, chunk_bytes=64 * 1024) as sender:
            await asyncio.gather(*(sender.send("t", f"{i}:".encode() * 2000) for i in range(n)))
            return await sender.flush()

    started = time.monotonic()
    assert asyncio.run(main()) == FlushResult(n, {})
    assert time.monotonic() - started >= 0.25  # it did have to wait for the reader
    values = [value_of(r) for r in fake.message_records()]
    assert values == [f"{i}:".encode() * 2000 for i in range(n)]


def test_write_timeout_and_cancellation_keep_the_framing(fake: FakeStreamDaemon) -> None:
    fake.stop_reading()

    async def main() -> tuple[int, FlushResult]:
        sender = AsyncStreamSender(fake.path, timeout=0.2, chunk_bytes=16 * 1024)
        taken = 0
        with pytest.raises(SendTimeoutError, match="took no data"):
            for i in range(100_000):
                await sender.send("t", f"{i}-".encode() * 1000)
                taken += 1
        # A send cancelled while waiting does not take its message either.
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(sender.send("t", b"cancelled"), 0.05)
        fake.resume_reading()
        result = await sender.flush(timeout=30)
        await sender.aclose()
        return taken, result

    taken, result = asyncio.run(main())
    assert taken > 3 and result == FlushResult(taken, {})
    values = [value_of(r) for r in fake.message_records()]
    assert values == [f"{i}-".encode() * 1000 for i in range(taken)]


def test_flush_timeout_then_carry_over(fake: FakeStreamDaemon) -> None:
    def policy(flush: Flush) -> bytes:
        if flush.request_id == 1:
            return b""
        return flush_response(flush.request_id, len(flush.records))

    fake.policy = policy

    async def main() -> FlushResult:
        async with AsyncStreamSender(fake.path) as sender:
            await sender.send("t", b"a")
            with pytest.raises(SendTimeoutError, match=r"within 0\.1s"):
                await sender.flush(timeout=0.1)
            await sender.send("t", b"b")
            fake.answer_later(0, flush_response(1, 1))
            return await sender.flush()

    assert asyncio.run(main()) == FlushResult(2, {})


def test_connection_closed_mid_flush(fake: FakeStreamDaemon) -> None:
    fake.policy = lambda flush: None

    async def main() -> None:
        sender = AsyncStreamSender(fake.path)
        await sender.send("t", b"a")
        with pytest.raises(StreamClosedError, match="before answering a flush"):
            await sender.flush()
        with pytest.raises(StreamClosedError, match="unusable"):
            await sender.send("t", b"b")
        await sender.aclose()

    asyncio.run(main())


def test_close_wakes_a_waiting_flush(fake: FakeStreamDaemon) -> None:
    fake.policy = lambda flush: b""  # never answers

    async def main() -> None:
        sender = AsyncStreamSender(fake.path, timeout=None)
        await sender.send("t", b"a")
        task = asyncio.ensure_future(sender.flush())
        await asyncio.sleep(0.1)
        sender.close()
        with pytest.raises(ToPulsarError, match="closed"):
            await asyncio.wait_for(task, 2)

    asyncio.run(main())


def test_aclose_writes_out_exception_drops(fake: FakeStreamDaemon) -> None:
    async def main() -> None:
        async with AsyncStreamSender(fake.path) as sender:
            await sender.send("t", b"kept")
        with pytest.raises(RuntimeError):
            async with AsyncStreamSender(fake.path) as sender:
                await sender.send("t", b"dropped")
                raise RuntimeError

    asyncio.run(main())
    deadline = time.monotonic() + 5
    while not fake.message_records() and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.1)
    assert [value_of(r) for r in fake.message_records()] == [b"kept"]


def test_sends_go_on_while_a_flush_waits(fake: FakeStreamDaemon) -> None:
    withheld: list[bytes] = []

    def policy(flush: Flush) -> bytes:  # answer nothing until the test says so
        withheld.append(flush_response(flush.request_id, len(flush.records)))
        return b""

    fake.policy = policy

    async def main() -> tuple[FlushResult, FlushResult]:
        async with AsyncStreamSender(fake.path, timeout=2, chunk_bytes=512) as sender:
            await sender.send("t", b"first")
            first = asyncio.ensure_future(sender.flush())
            await asyncio.sleep(0.05)
            for i in range(1000):  # many chunk writes, none behind the waiting flush
                await sender.send("t", b"x%d" % i)
            assert not first.done()
            second = asyncio.ensure_future(sender.flush())
            while len(withheld) < 2:
                await asyncio.sleep(0.01)
            fake.answer_later(0, withheld[0] + withheld[1])
            return await first, await second

    assert asyncio.run(main()) == (FlushResult(1, {}), FlushResult(1000, {}))
