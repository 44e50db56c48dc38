"""Sender.send_many against a real UNIX datagram socket: order, bytes, partial sends,
the fallback without sendmmsg, and the errors send() has. No sleeps: socket timeouts."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
from to_pulsar import (
    DaemonUnavailableError,
    InvalidMessageError,
    MessageTooLargeError,
    Sender,
    SendTimeoutError,
    ToPulsarError,
    encode_any_partition,
    encode_partition_key,
    mmsg,
)
from to_pulsar.core import encode_message

from tests.unit.client_lib.conftest import bind


@pytest.fixture(params=["sendmmsg", "fallback"])
def path_kind(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Every test runs twice: through sendmmsg, and with it forced missing."""
    if request.param == "sendmmsg":
        if mmsg.load() is None:
            pytest.skip("no sendmmsg on this platform")
    else:
        monkeypatch.setattr(mmsg, "load", lambda: None)
    return str(request.param)


def drain(receiver: socket.socket, count: int) -> list[bytes]:
    return [receiver.recv(1 << 20) for _ in range(count)]


def test_all_arrive_in_order_byte_for_byte(
    path_kind: str, sock_path: Path, receiver: socket.socket
) -> None:
    messages = [
        ("t", b"plain"),
        ("a/b/c", "välue", b"k"),
        ("t", b"keyed", None, -1),
        (b"raw-topic", bytearray(b"ba"), "key", 7),
        ("t", b""),
    ]
    with Sender(sock_path) as sender:
        sender.send_many(messages, timestamp_ms=42)
    assert drain(receiver, len(messages)) == [
        encode_any_partition("t", b"plain", b"", 42),
        encode_any_partition("a/b/c", "välue".encode(), b"k", 42),
        encode_partition_key(0xFFFF_FFFF, "t", b"keyed", b"", 42),
        encode_partition_key(7, b"raw-topic", b"ba", b"key", 42),
        encode_any_partition("t", b"", b"", 42),
    ]


def test_more_than_one_system_call_and_sizes(
    path_kind: str, sock_path: Path, receiver: socket.socket
) -> None:
    """2,500 datagrams of varied sizes: more than one sendmmsg batch (1024), and the
    kernel's queue fills many times, so sendmmsg returns partial counts and resumes."""
    import threading

    values = [bytes([i % 256]) * (i % 700) for i in range(2500)]
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.extend(drain(receiver, len(values))))
    reader.start()
    with Sender(sock_path, timeout=10) as sender:
        sender.send_many((("topic", v, None, i) for i, v in enumerate(values)), timestamp_ms=1)
    reader.join(30)
    assert not reader.is_alive()
    assert got == [encode_partition_key(i, "topic", v, b"", 1) for i, v in enumerate(values)]


def test_default_timestamp_is_one_now_for_the_call(
    path_kind: str, sock_path: Path, receiver: socket.socket
) -> None:
    with Sender(sock_path) as sender:
        sender.send_many([("t", b"1"), ("t", b"2")])
    first, second = drain(receiver, 2)
    assert first[13:21] == second[13:21] != bytes(8)


def test_invalid_message_sends_nothing(
    path_kind: str, sock_path: Path, receiver: socket.socket
) -> None:
    with Sender(sock_path) as sender:
        with pytest.raises(InvalidMessageError):
            sender.send_many([("t", b"ok"), ("", b"no topic")])
        sender.send("t", b"after", timestamp_ms=0)
    assert drain(receiver, 1) == [encode_any_partition("t", b"after")]


def test_full_queue_partial_send_then_timeout(
    path_kind: str, sock_path: Path, receiver: socket.socket
) -> None:
    """The queue takes some, then stays full: SendTimeoutError, its note says how many
    went, and exactly those arrived, in order."""
    messages = [("t", i.to_bytes(4, "big")) for i in range(5000)]
    with Sender(sock_path, timeout=0.05) as sender, pytest.raises(SendTimeoutError) as info:
        sender.send_many(messages, timestamp_ms=0)
    notes = getattr(info.value, "__notes__", [])
    assert len(notes) == 1
    sent = int(notes[0].split()[0])
    assert 0 < sent < len(messages)
    receiver.settimeout(0)
    assert drain(receiver, sent) == [
        encode_message(t, v, None, None, 0) for t, v in messages[:sent]
    ]
    with pytest.raises(BlockingIOError):
        receiver.recv(1 << 20)


def test_message_too_large_names_the_count(
    path_kind: str, sock_path: Path, receiver: socket.socket
) -> None:
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as probe:
        limit = probe.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF)
    big = b"x" * max(300_000, 2 * limit)
    with Sender(sock_path) as sender:
        with pytest.raises(MessageTooLargeError) as info:
            sender.send_many([("t", b"a"), ("t", b"b"), ("t", big), ("t", b"c")], timestamp_ms=0)
        assert info.value.__notes__ == ["2 of 4 messages were sent before this error"]
        sender.send_many([("t", b"d")], timestamp_ms=0)  # still usable
    assert drain(receiver, 3) == [encode_any_partition("t", v) for v in (b"a", b"b", b"d")]


def test_reconnects_after_daemon_restart(path_kind: str, sock_path: Path) -> None:
    first = bind(sock_path)
    sender = Sender(sock_path)
    sender.send_many([("t", b"one")], timestamp_ms=0)
    assert first.recv(100) == encode_any_partition("t", b"one")
    first.close()
    sock_path.unlink()
    with bind(sock_path) as second:
        sender.send_many([("t", b"two"), ("t", b"three")], timestamp_ms=0)
        assert drain(second, 2) == [encode_any_partition("t", v) for v in (b"two", b"three")]
    sender.close()


def test_daemon_gone_for_good(path_kind: str, sock_path: Path) -> None:
    first = bind(sock_path)
    sender = Sender(sock_path)
    first.close()
    sock_path.unlink()
    with pytest.raises(DaemonUnavailableError):
        sender.send_many([("t", b"x")])
    sender.close()


def test_closed_sender(path_kind: str, sock_path: Path, receiver: socket.socket) -> None:
    sender = Sender(sock_path)
    sender.close()
    with pytest.raises(ToPulsarError, match="closed"):
        sender.send_many([("t", b"x")])
    sender.send_many([])  # nothing to send: nothing to complain about


def test_send_many_raw(path_kind: str, sock_path: Path, receiver: socket.socket) -> None:
    datagrams = [encode_any_partition("t", bytes([i])) for i in range(3)]
    with Sender(sock_path) as sender:
        sender.send_many_raw(datagrams)
    assert drain(receiver, 3) == datagrams
