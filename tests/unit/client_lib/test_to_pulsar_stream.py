"""to_pulsar.stream.StreamSender and the flush protocol, against a fake stream daemon."""

from __future__ import annotations

import os
import socket
import struct
import sys
import threading
import time
from pathlib import Path

import pytest
import to_pulsar
from to_pulsar import (
    DaemonUnavailableError,
    FlushResult,
    SendTimeoutError,
    StreamClosedError,
    StreamProtocolError,
    StreamSender,
    ToPulsarError,
    encode_any_partition,
    encode_partition_key,
)
from to_pulsar.paths import (
    SOCKET_ENV_VAR,
    STREAM_SOCKET_ENV_VAR,
    confirm_socket_path,
    resolve_stream_socket_path,
)
from to_pulsar.protocol import (
    StreamState,
    decode_flush_response,
    encode_flush_request,
    encode_flush_response,
)

from tests.support.fakestream import FakeStreamDaemon, Flush, flush_response

# -- protocol -----------------------------------------------------------------------------------


def test_flush_request_bytes() -> None:
    assert encode_flush_request(7) == struct.pack(">ihhhq", 18, 258, 0, 0, 7)
    assert len(encode_flush_request(2**63 - 1)) == 18


def test_flush_response_decodes_counts() -> None:
    raw = flush_response(42, 1000, {"too_large": 3, "bad_topic": 1})
    request_id, result = decode_flush_response(raw)
    assert request_id == 42
    assert result == FlushResult(1000, {"too_large": 3, "bad_topic": 1})
    assert result.total == 1004 and result.discarded_total == 4 and not result.ok
    assert result.describe_discards() == "bad_topic 1, too_large 3"
    assert encode_flush_response(42, 1000, {"too_large": 3, "bad_topic": 1}) == flush_response(
        42, 1000, {"bad_topic": 1, "too_large": 3}
    )
    _, empty = decode_flush_response(flush_response(1, 5))
    assert empty.ok and empty.total == 5 and empty.describe_discards() == ""


def test_flush_results_add_up() -> None:
    total = FlushResult(2, {"too_large": 1}) + FlushResult(3, {"too_large": 2, "malformed": 1})
    assert total == FlushResult(5, {"too_large": 3, "malformed": 1})


@pytest.mark.parametrize(
    ("raw", "needle"),
    [
        (flush_response(1, 1)[:20], "too short"),
        (struct.pack(">ihhhqqh", 29, 259, 0, 0, 1, 1, 0), "Size 29"),
        (struct.pack(">ihhhqqh", 28, 256, 0, 0, 1, 1, 0), "ApiKey 256"),
        (struct.pack(">ihhhqqh", 28, 259, 1, 0, 1, 1, 0), "version 1"),
        (struct.pack(">ihhhqqh", 28, 259, 0, 4, 1, 1, 0), "flags"),
        (struct.pack(">ihhhqqh", 28, 259, 0, 0, 1, -1, 0), "negative"),
        (struct.pack(">ihhhqqh", 28, 259, 0, 0, 1, 1, 1), "malformed"),
        (flush_response(1, 1) + b"x", "Size 28"),
        (
            struct.pack(">ihhhqqhh", 30 + 8, 259, 0, 0, 1, 1, 1, 0) + struct.pack(">q", 1),
            "reason size 0",
        ),
        (
            struct.pack(">ihhhqqhh", 28 + 2 + 1 + 8, 259, 0, 0, 1, 1, 1, 1)
            + b"\xff"
            + struct.pack(">q", 1),
            "malformed",
        ),
    ],
)
def test_malformed_flush_responses_are_protocol_errors(raw: bytes, needle: str) -> None:
    with pytest.raises(StreamProtocolError, match=needle):
        decode_flush_response(raw)


def test_state_checks_order_and_counts() -> None:
    state = StreamState()
    state.append(b"r1")
    first = state.request_flush()
    state.append(b"r2")
    state.append(b"r3")
    second = state.request_flush()
    assert (first, second) == (1, 2) and state.unconfirmed_total == 3
    # Split across reads, two responses in one read.
    both = flush_response(1, 1) + flush_response(2, 1, {"too_large": 1})
    state.received(both[:5])
    assert not state.is_answered(1)
    state.received(both[5:])
    assert state.is_answered(1) and state.is_answered(2) and state.unconfirmed_total == 0
    assert state.take(2) == FlushResult(1, {"too_large": 1})
    assert state.take(1) == FlushResult(1, {})

    state.append(b"r4")
    state.request_flush()
    with pytest.raises(StreamProtocolError, match="out of order"):
        state.received(flush_response(9, 1))
    state = StreamState()
    state.append(b"r1")
    state.request_flush()
    with pytest.raises(StreamProtocolError, match="accounts for 2 records, 1 were sent"):
        state.received(flush_response(1, 2))
    with pytest.raises(StreamProtocolError, match="unrequested"):
        StreamState().received(flush_response(1, 0))
    with pytest.raises(StreamProtocolError, match="Size 5"):
        StreamState().received(struct.pack(">i", 5))


def test_state_gives_abandoned_counts_to_the_next_result() -> None:
    state = StreamState()
    state.append(b"a")
    state.request_flush()
    state.abandon(1)  # timed out before its answer came
    state.append(b"b")
    state.append(b"c")
    state.request_flush()
    state.request_flush()
    state.received(flush_response(1, 0, {"too_large": 1}) + flush_response(2, 2))
    state.abandon(2)  # timed out after its answer came, before it was taken
    state.received(flush_response(3, 0))
    assert state.take(3) == FlushResult(2, {"too_large": 1})


# -- StreamSender against the fake ------------------------------------------------------------


def test_missing_socket_is_daemon_unavailable(sock_path: Path) -> None:
    with pytest.raises(DaemonUnavailableError, match="no daemon listening on stream socket"):
        StreamSender(sock_path)
    # A socket file nobody listens on: refused.
    dead = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    dead.bind(str(sock_path))
    dead.close()
    with pytest.raises(DaemonUnavailableError):
        StreamSender(sock_path)


def test_default_path_from_environment(
    fake: FakeStreamDaemon, sock_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(STREAM_SOCKET_ENV_VAR, raising=False)
    monkeypatch.delenv(SOCKET_ENV_VAR, raising=False)
    assert resolve_stream_socket_path() == "/run/pulsar-bruce/bruce.stream.sock"
    monkeypatch.setenv(STREAM_SOCKET_ENV_VAR, "")
    assert resolve_stream_socket_path() == "/run/pulsar-bruce/bruce.stream.sock"
    monkeypatch.setenv(STREAM_SOCKET_ENV_VAR, str(sock_path))
    with StreamSender() as sender:
        assert sender.socket_path == str(sock_path)
        sender.send("t", b"v")
        assert sender.flush().acked == 1


def test_the_stream_socket_beside_the_datagram_socket_variable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """$TO_PULSAR_SOCKET alone names the daemon: its stream socket is beside it, by the
    daemon's own --stream-socket auto rule; $TO_PULSAR_STREAM_SOCKET still wins."""
    monkeypatch.delenv(STREAM_SOCKET_ENV_VAR, raising=False)
    monkeypatch.setenv(SOCKET_ENV_VAR, "./run/bruce.sock")
    assert resolve_stream_socket_path() == "./run/bruce.stream.sock"
    monkeypatch.setenv(STREAM_SOCKET_ENV_VAR, "/elsewhere/s.sock")
    assert resolve_stream_socket_path() == "/elsewhere/s.sock"
    assert resolve_stream_socket_path("/given.sock") == "/given.sock"


def test_confirm_socket_order(monkeypatch: pytest.MonkeyPatch) -> None:
    """--stream-socket-path, then beside --socket-path, then the variables, then the default."""
    monkeypatch.setenv(STREAM_SOCKET_ENV_VAR, "/env/stream.sock")
    monkeypatch.setenv(SOCKET_ENV_VAR, "/env/bruce.sock")
    assert confirm_socket_path("/opt/s", "/opt/bruce.sock") == "/opt/s"
    assert confirm_socket_path(None, "/opt/bruce.sock") == "/opt/bruce.stream.sock"
    assert confirm_socket_path(None, None) == "/env/stream.sock"
    monkeypatch.delenv(STREAM_SOCKET_ENV_VAR)
    assert confirm_socket_path(None, None) == "/env/bruce.stream.sock"
    monkeypatch.delenv(SOCKET_ENV_VAR)
    assert confirm_socket_path(None, None) == "/run/pulsar-bruce/bruce.stream.sock"


def test_records_arrive_byte_exact(fake: FakeStreamDaemon) -> None:
    expected = [
        encode_any_partition("clicks", b'{"user": 42}', b"user-42", 1_700_000_000_000),
        encode_partition_key(42, "clicks", b"\x00\xff" * 10, b"", 5),
        encode_partition_key(0xFFFF_FFFF, "persistent://a/b/c", "é", "k", 0),
        encode_any_partition("big", b"x" * 1_000_000, b"", 1),
        encode_any_partition("t", b"raw", b"", 9),
    ]
    with StreamSender(fake.path, timeout=10) as sender:
        sender.send("clicks", b'{"user": 42}', key=b"user-42", timestamp_ms=1_700_000_000_000)
        sender.send("clicks", b"\x00\xff" * 10, partition_key=42, timestamp_ms=5)
        sender.send("persistent://a/b/c", "é", key="k", partition_key=-1, timestamp_ms=0)
        sender.send("big", b"x" * 1_000_000, timestamp_ms=1)
        sender.send_raw(encode_any_partition("t", b"raw", b"", 9))
        assert sender.unconfirmed == 5
        result = sender.flush()
        assert sender.unconfirmed == 0
    assert result == FlushResult(5, {}) and result.ok
    assert fake.message_records() == expected
    [flush] = fake.flushes
    assert flush.raw == struct.pack(">ihhhq", 18, 258, 0, 0, 1)
    assert flush.records == expected


def test_default_timestamp_is_now(fake: FakeStreamDaemon) -> None:
    before = time.time_ns() // 1_000_000
    with StreamSender(fake.path) as sender:
        sender.send("t", b"v")
        sender.flush()
    after = time.time_ns() // 1_000_000
    assert before <= _ts(fake.records[0]) <= after


def test_flush_round_trips_with_counts(fake: FakeStreamDaemon) -> None:
    def policy(flush: Flush) -> bytes:
        too_large = sum(len(r) > 100 for r in flush.records)
        acked = len(flush.records) - too_large
        discarded = {"too_large": too_large} if too_large else {}
        return flush_response(flush.request_id, acked, discarded)

    fake.policy = policy
    with StreamSender(fake.path) as sender:
        for i in range(3):
            sender.send("t", f"v{i}")
        sender.send("t", b"x" * 200)
        first = sender.flush()
        sender.send("t", b"ok")
        second = sender.flush()
        third = sender.flush()  # nothing sent since: an empty confirmation
    assert first == FlushResult(3, {"too_large": 1})
    assert not first.ok and first.total == 4
    assert second == FlushResult(1, {}) and third == FlushResult(0, {})
    assert [f.request_id for f in fake.flushes] == [1, 2, 3]


def test_flush_timeout_then_later_flush_gets_both_counts(fake: FakeStreamDaemon) -> None:
    withheld: list[Flush] = []

    def policy(flush: Flush) -> bytes:
        if flush.request_id == 1:
            withheld.append(flush)
            return b""  # answer nothing (yet)
        return flush_response(flush.request_id, len(flush.records))

    fake.policy = policy
    with StreamSender(fake.path, timeout=5) as sender:
        sender.send("t", b"a")
        sender.send("t", b"b")
        started = time.monotonic()
        with pytest.raises(SendTimeoutError, match=r"within 0.2s \(2 messages unconfirmed"):
            sender.flush(timeout=0.2)
        assert 0.15 < time.monotonic() - started < 2
        assert sender.unconfirmed == 2
        sender.send("t", b"c")  # still usable
        fake.answer_later(0, flush_response(1, 1, {"rate_limited": 1}))
        result = sender.flush()
    assert result == FlushResult(2, {"rate_limited": 1})
    assert [r[-1:] for r in fake.message_records()] == [b"a", b"b", b"c"]


def test_connection_closed_mid_flush(fake: FakeStreamDaemon) -> None:
    fake.policy = lambda flush: None  # close instead of answering
    sender = StreamSender(fake.path)
    sender.send("t", b"a")
    with pytest.raises(StreamClosedError, match="before answering a flush") as info:
        sender.flush()
    assert isinstance(info.value, ToPulsarError)
    assert "(1 message unconfirmed)" in str(info.value)
    assert sender.closed
    with pytest.raises(StreamClosedError, match="unusable"):
        sender.send("t", b"b")
    with pytest.raises(StreamClosedError):
        sender.flush()
    sender.close()  # idempotent


def test_writes_fail_cleanly_once_the_daemon_is_gone(sock_path: Path) -> None:
    """The peer vanishes while the client writes: EPIPE/ECONNRESET (never SIGPIPE)."""
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(sock_path))
    listener.listen(1)
    sender = StreamSender(sock_path, chunk_bytes=1024)
    conn, _ = listener.accept()
    conn.close()
    listener.close()
    with pytest.raises(StreamClosedError, match="while writing"):
        for _ in range(1000):
            sender.send("t", b"x" * 1000)
        sender.flush()
    assert sender.closed


def test_protocol_error_closes_the_connection(fake: FakeStreamDaemon) -> None:
    fake.policy = lambda flush: flush_response(flush.request_id + 5, len(flush.records))
    sender = StreamSender(fake.path)
    sender.send("t", b"a")
    with pytest.raises(StreamProtocolError, match="out of order"):
        sender.flush()
    with pytest.raises(StreamClosedError, match="unusable"):
        sender.send("t", b"b")


def test_backpressure_blocks_then_times_out_without_breaking_framing(
    fake: FakeStreamDaemon,
) -> None:
    fake.stop_reading()
    value = b"v" * 10_000
    sent = 0
    with StreamSender(fake.path, timeout=0.3, chunk_bytes=64 * 1024) as sender:
        started = time.monotonic()
        with pytest.raises(SendTimeoutError, match="took no data"):
            for _ in range(10_000):  # ~100 MB: far more than the socket buffers hold
                sender.send("t", value, key=str(sent))
                sent += 1
        assert time.monotonic() - started < 10
        assert sent > 5  # the socket buffers took some
        fake.resume_reading()
        result = sender.flush(timeout=30)
    # The send that timed out was not taken; every other one arrived whole and in order.
    assert result == FlushResult(sent, {})
    records = fake.message_records()
    assert len(records) == sent
    assert records == [
        encode_any_partition("t", value, str(i), _ts(r)) for i, r in enumerate(records)
    ]


def test_close_writes_out_the_buffer_exception_drops_it(fake: FakeStreamDaemon) -> None:
    with StreamSender(fake.path) as sender:
        sender.send("t", b"kept")
    deadline = time.monotonic() + 5
    while not fake.message_records() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert [r[-4:] for r in fake.message_records()] == [b"kept"]
    with pytest.raises(RuntimeError), StreamSender(fake.path) as sender:
        sender.send("t", b"dropped")
        raise RuntimeError
    time.sleep(0.1)
    assert len(fake.message_records()) == 1
    with pytest.raises(ToPulsarError, match="closed"):
        sender.send("t", b"x")


def test_send_raw_refuses_what_would_break_the_stream(fake: FakeStreamDaemon) -> None:
    with StreamSender(fake.path) as sender:
        with pytest.raises(ToPulsarError, match="at least 8 bytes"):
            sender.send_raw(b"abc")
        with pytest.raises(ToPulsarError, match="Size field"):
            sender.send_raw(struct.pack(">ihh", 9, 256, 0))
        with pytest.raises(ToPulsarError, match="flush"):
            sender.send_raw(encode_flush_request(1))
        with pytest.raises(to_pulsar.InvalidMessageError):
            sender.send("", b"no topic")
        assert sender.unconfirmed == 0


def test_threads_share_one_sender(fake: FakeStreamDaemon) -> None:
    with StreamSender(fake.path, chunk_bytes=4096) as sender:

        def work(n: int) -> None:
            for i in range(500):
                sender.send("t", f"{n}:{i}".encode())

        threads = [threading.Thread(target=work, args=(n,)) for n in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert sender.flush() == FlushResult(2000, {})
    assert len(fake.message_records()) == 2000
    per_thread: dict[int, list[int]] = {}
    for record in fake.message_records():
        n, i = _value(record).decode().split(":")
        per_thread.setdefault(int(n), []).append(int(i))
    assert per_thread == {n: list(range(500)) for n in range(4)}


def test_timeout_validation(fake: FakeStreamDaemon) -> None:
    with pytest.raises(ValueError):
        StreamSender(fake.path, timeout=-1)
    with pytest.raises(ValueError):
        StreamSender(fake.path, timeout=float("nan"))
    with StreamSender(fake.path, timeout=float("inf")) as sender:
        assert sender.timeout is None
        assert "open" in repr(sender)


def test_import_stays_light() -> None:
    """``import to_pulsar`` does not load the stream client, asyncio or click."""
    code = (
        "import sys, to_pulsar; "
        "assert 'to_pulsar.stream' not in sys.modules; "
        "assert 'asyncio' not in sys.modules; "
        "assert 'pyspark' not in sys.modules; "
        "assert to_pulsar.StreamSender.__module__ == 'to_pulsar.stream'"
    )
    import subprocess

    client_lib = str(Path(to_pulsar.__file__).resolve().parents[1])
    env = {**os.environ, "PYTHONPATH": client_lib}
    subprocess.run([sys.executable, "-c", code], check=True, env=env)


def _ts(record: bytes) -> int:
    """Timestamp of an AnyPartition record."""
    (topic_size,) = struct.unpack_from(">h", record, 10)
    return int(struct.unpack_from(">q", record, 12 + topic_size)[0])


def _value(record: bytes) -> bytes:
    """Value of an AnyPartition record."""
    (topic_size,) = struct.unpack_from(">h", record, 10)
    (key_size,) = struct.unpack_from(">i", record, 12 + topic_size + 8)
    offset = 12 + topic_size + 8 + 4 + key_size
    (value_size,) = struct.unpack_from(">i", record, offset)
    return record[offset + 4 : offset + 4 + value_size]


def test_sends_go_on_while_a_flush_waits_and_each_flush_gets_its_own_counts(
    fake: FakeStreamDaemon,
) -> None:
    withheld: list[bytes] = []

    def policy(flush: Flush) -> bytes:  # answer nothing until the test says so
        withheld.append(flush_response(flush.request_id, len(flush.records)))
        return b""

    fake.policy = policy
    results: dict[str, FlushResult] = {}
    with StreamSender(fake.path, timeout=10, chunk_bytes=512) as sender:
        sender.send("t", b"first")
        waiting = threading.Thread(target=lambda: results.update(first=sender.flush()))
        waiting.start()
        fake.wait_flushes(1)
        started = time.monotonic()
        for i in range(1000):  # many chunk writes: none waits for the pending flush
            sender.send("t", b"x%d" % i)
        assert time.monotonic() - started < 5
        assert waiting.is_alive()
        second = threading.Thread(target=lambda: results.update(second=sender.flush()))
        second.start()
        fake.wait_flushes(2)
        fake.answer_later(0, withheld[0] + withheld[1])
        waiting.join(10)
        second.join(10)
    assert results == {"first": FlushResult(1, {}), "second": FlushResult(1000, {})}
