"""AsyncSender against a real UNIX datagram socket bound in a temp dir."""

from __future__ import annotations

import asyncio
import socket
import time
from pathlib import Path

import pytest
import to_pulsar
from to_pulsar import (
    AsyncSender,
    DaemonUnavailableError,
    MessageTooLargeError,
    SendTimeoutError,
    ToPulsarError,
    encode_any_partition,
    encode_partition_key,
)
from to_pulsar.paths import SOCKET_ENV_VAR

from tests.unit.client_lib.conftest import bind


def drain(receiver: socket.socket) -> list[bytes]:
    received = []
    receiver.setblocking(False)
    try:
        while True:
            received.append(receiver.recv(65536))
    except BlockingIOError:
        return received
    finally:
        receiver.settimeout(5)


async def fill_queue(sender: AsyncSender) -> int:
    """Send until the socket queue is full; return how many datagrams went out."""
    filler = encode_any_partition("t", b"x" * 100)
    for sent in range(100_000):
        try:
            await asyncio.wait_for(sender.send_raw(filler), 0.2)
        except (SendTimeoutError, TimeoutError):
            return sent
    pytest.fail("queue never filled up")


def test_exported_lazily_and_stdlib_only() -> None:
    assert to_pulsar.AsyncSender is AsyncSender
    assert "AsyncSender" in to_pulsar.__all__
    with pytest.raises(AttributeError):
        _ = to_pulsar.NoSuchThing


def test_send_exact_bytes(sock_path: Path, receiver: socket.socket) -> None:
    async def main() -> None:
        async with AsyncSender(sock_path) as sender:
            await sender.send("t", b"value", key=b"k", timestamp_ms=123)
            await sender.send("a/b/c", "välue", partition_key=-1, timestamp_ms=0)
            await sender.send_raw(encode_any_partition("raw", b"r"))

    asyncio.run(main())
    assert receiver.recv(65536) == encode_any_partition("t", b"value", b"k", 123)
    assert receiver.recv(65536) == encode_partition_key(0xFFFFFFFF, "a/b/c", "välue".encode())
    assert receiver.recv(65536) == encode_any_partition("raw", b"r")


def test_default_timestamp_is_now_and_env_socket(
    sock_path: Path, receiver: socket.socket, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(SOCKET_ENV_VAR, str(sock_path))
    before = time.time_ns() // 1_000_000

    async def main() -> None:
        async with AsyncSender() as sender:
            assert sender.socket_path == str(sock_path)
            await sender.send("t", b"v")

    asyncio.run(main())
    after = time.time_ns() // 1_000_000
    datagram = receiver.recv(65536)
    timestamp = int.from_bytes(datagram[13:21], "big", signed=True)
    assert before <= timestamp <= after
    assert datagram == encode_any_partition("t", b"v", timestamp_ms=timestamp)


def test_errors_like_the_sync_client(sock_path: Path) -> None:
    with pytest.raises(DaemonUnavailableError, match="no daemon listening"):
        AsyncSender(sock_path)
    with pytest.raises(ValueError, match="timeout"):
        AsyncSender(sock_path, timeout=-1)
    receiver = bind(sock_path)
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as probe:
        limit = probe.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF)
    value = b"x" * max(300_000, 2 * limit)

    async def main() -> None:
        sender = AsyncSender(sock_path)
        with pytest.raises(MessageTooLargeError) as info:
            await sender.send("t", value)
        assert info.value.size == len(value) + 28 + 1
        with pytest.raises(to_pulsar.InvalidMessageError):
            await sender.send("", b"v")
        await sender.send("t", b"small", timestamp_ms=0)  # still usable
        sender.close()
        sender.close()  # idempotent
        assert "closed" in repr(sender)
        with pytest.raises(ToPulsarError, match="closed"):
            await sender.send("t", b"v")

    try:
        asyncio.run(main())
        assert receiver.recv(65536) == encode_any_partition("t", b"small")
    finally:
        receiver.close()


def test_reconnects_after_daemon_restart(sock_path: Path) -> None:
    first = bind(sock_path)

    async def main() -> None:
        async with AsyncSender(sock_path) as sender:
            await sender.send("t", b"one", timestamp_ms=0)
            assert first.recv(65536) == encode_any_partition("t", b"one")
            first.close()
            sock_path.unlink()
            with pytest.raises(DaemonUnavailableError, match=str(sock_path)):
                await sender.send("t", b"lost")
            second = bind(sock_path)  # the restarted daemon
            try:
                await sender.send("t", b"two", timestamp_ms=0)
                assert second.recv(65536) == encode_any_partition("t", b"two")
            finally:
                second.close()

    asyncio.run(main())


def test_full_queue_times_out_without_busy_looping(
    sock_path: Path, receiver: socket.socket
) -> None:
    """A receiver that never reads: the send waits on add_writer, then SendTimeoutError."""

    async def main() -> None:
        async with AsyncSender(sock_path, timeout=0.3) as sender:
            assert await fill_queue(sender) > 0
            cpu_before = time.process_time()
            started = time.monotonic()
            with pytest.raises(SendTimeoutError, match=r"longer than the 0\.3s timeout"):
                await sender.send("t", b"x", timestamp_ms=0)
            waited = time.monotonic() - started
            cpu = time.process_time() - cpu_before
            assert 0.25 <= waited < 3
            # Sleeping in the selector, not spinning on EAGAIN: far less CPU than wall time.
            assert cpu < waited / 3, f"{cpu:.3f}s CPU in {waited:.3f}s of waiting"
            # The loop has no writer left behind for the socket.
            assert not asyncio.get_running_loop().remove_writer(sender._sock.fileno())

    asyncio.run(main())


def test_non_blocking_sender(sock_path: Path, receiver: socket.socket) -> None:
    async def main() -> None:
        async with AsyncSender(sock_path, timeout=0) as sender:
            filler = encode_any_partition("t", b"x" * 100)
            for _ in range(100_000):
                try:
                    await sender.send_raw(filler)
                except SendTimeoutError as exc:
                    assert "queue is full (timeout=0)" in str(exc)
                    return
            pytest.fail("queue never filled up")

    asyncio.run(main())


def test_reader_unblocks_waiting_sends_in_order(sock_path: Path, receiver: socket.socket) -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        async with AsyncSender(sock_path, timeout=None) as sender:
            queued = await fill_queue(sender)
            waiting = [
                asyncio.create_task(sender.send("t", f"late-{i}".encode(), timestamp_ms=0))
                for i in range(3)
            ]
            # Plenty of loop iterations: the sends stay blocked while nobody reads.
            for _ in range(50):
                await asyncio.sleep(0)
            await asyncio.sleep(0.05)
            assert not any(task.done() for task in waiting)

            # Now the receiver starts reading, from the loop, as a daemon would.
            received: list[bytes] = []

            def on_readable() -> None:
                received.extend(drain(receiver))

            receiver.setblocking(False)
            loop.add_reader(receiver.fileno(), on_readable)
            try:
                await asyncio.wait_for(asyncio.gather(*waiting), 5)
                late = [encode_any_partition("t", f"late-{i}".encode()) for i in range(3)]

                def all_in() -> bool:
                    return len(received) >= queued + 3

                while not all_in():
                    await asyncio.sleep(0.01)
            finally:
                loop.remove_reader(receiver.fileno())
            assert received[queued:] == late  # waiting sends went out in order
            # Back to the fast path: nobody is waiting any more.
            assert sender._waiting == 0
            await sender.send("t", b"after", timestamp_ms=0)

    asyncio.run(main())


def test_close_wakes_a_waiting_send(sock_path: Path, receiver: socket.socket) -> None:
    async def main() -> None:
        sender = AsyncSender(sock_path, timeout=None)
        await fill_queue(sender)
        task = asyncio.create_task(sender.send("t", b"stuck", timestamp_ms=0))
        await asyncio.sleep(0.05)
        assert not task.done()
        sender.close()
        with pytest.raises(ToPulsarError, match="closed"):
            await asyncio.wait_for(task, 5)

    asyncio.run(main())


def test_cancelled_send_leaves_no_writer(sock_path: Path, receiver: socket.socket) -> None:
    async def main() -> None:
        async with AsyncSender(sock_path, timeout=None) as sender:
            await fill_queue(sender)
            with pytest.raises(TimeoutError):
                await asyncio.wait_for(sender.send("t", b"x", timestamp_ms=0), 0.05)
            assert sender._waiting == 0
            assert not asyncio.get_running_loop().remove_writer(sender._sock.fileno())
            drain(receiver)
            await sender.send("t", b"after", timestamp_ms=0)
        assert receiver.recv(65536) == encode_any_partition("t", b"after")

    asyncio.run(main())
