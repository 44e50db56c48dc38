"""End-to-end tests of the ``to_pulsar`` command, run as a subprocess against a real socket."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import to_pulsar
from to_pulsar import encode_any_partition, encode_partition_key

CLIENT_LIB = Path(to_pulsar.__file__).resolve().parents[1]


@pytest.fixture
def receiver(sock_path: Path) -> Iterator[socket.socket]:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(str(sock_path))
    sock.settimeout(10)
    yield sock
    sock.close()


def run_cli(
    *args: str, stdin: bytes = b"", env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[bytes]:
    pythonpath = os.pathsep.join(filter(None, [str(CLIENT_LIB), os.environ.get("PYTHONPATH")]))
    full_env = {**os.environ, "PYTHONPATH": pythonpath, **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "to_pulsar.cli", *args],
        input=stdin,
        capture_output=True,
        env=full_env,
        timeout=60,
    )


def assert_one_line_error(result: subprocess.CompletedProcess[bytes], code: int) -> str:
    stderr = result.stderr.decode()
    assert result.returncode == code, stderr
    assert "Traceback" not in stderr
    assert stderr.startswith("to_pulsar: error: ")
    assert stderr.count("\n") == 1, stderr
    return stderr


def test_value_any_partition(sock_path: Path, receiver: socket.socket) -> None:
    result = run_cli(
        "--socket-path", str(sock_path), "--topic", "t", "--value", "hi",
        "--key", "k", "--timestamp", "42",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert result.stdout == result.stderr == b""
    assert receiver.recv(65536) == encode_any_partition("t", b"hi", b"k", 42)


def test_partition_key_and_underscore_spellings(sock_path: Path, receiver: socket.socket) -> None:
    result = run_cli(
        "--socket_path", str(sock_path), "--topic", "public/default/t", "--value", "v",
        "--partition_key", "-1", "--timestamp", "7", "--interval_us", "0",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert receiver.recv(65536) == encode_partition_key(
        0xFFFFFFFF, "public/default/t", b"v", b"", 7
    )


def test_dash_spellings(sock_path: Path, receiver: socket.socket) -> None:
    result = run_cli(
        "--socket-path", str(sock_path), "--topic", "t", "--value", "v",
        "--partition-key", "4294967295", "--timestamp", "0", "--interval-us", "0",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert receiver.recv(65536) == encode_partition_key(-1, "t", b"v")


def test_stdin_is_sent_byte_for_byte(sock_path: Path, receiver: socket.socket) -> None:
    payload = bytes(range(256)) + b"\n\x00no newline added"
    result = run_cli(
        "--socket-path", str(sock_path), "--topic", "t", "--stdin", "--timestamp", "1",
        stdin=payload,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert receiver.recv(65536) == encode_any_partition("t", payload, b"", 1)


def test_default_timestamp_is_now(sock_path: Path, receiver: socket.socket) -> None:
    before = time.time_ns() // 1_000_000
    result = run_cli("--socket-path", str(sock_path), "--topic", "t", "--value", "v")
    after = time.time_ns() // 1_000_000
    assert result.returncode == 0, result.stderr
    datagram = receiver.recv(65536)
    timestamp = int.from_bytes(datagram[13:21], "big", signed=True)  # after header+topic "t"
    assert before <= timestamp <= after
    assert datagram == encode_any_partition("t", b"v", b"", timestamp)


def test_env_var_socket_path(sock_path: Path, receiver: socket.socket) -> None:
    result = run_cli(
        "--topic", "t", "--value", "v", "--timestamp", "0",
        env={"TO_PULSAR_SOCKET": str(sock_path)},
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert receiver.recv(65536) == encode_any_partition("t", b"v")


def test_count(sock_path: Path, receiver: socket.socket) -> None:
    result = run_cli(
        "--socket-path", str(sock_path), "--topic", "t", "--value", "v",
        "--timestamp", "5", "--count", "3",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    expected = encode_any_partition("t", b"v", b"", 5)
    assert [receiver.recv(65536) for _ in range(3)] == [expected] * 3
    receiver.settimeout(0)
    with pytest.raises(BlockingIOError):
        receiver.recv(65536)


def test_interval_paces_sends(sock_path: Path, receiver: socket.socket) -> None:
    started = time.perf_counter()
    result = run_cli(
        "--socket-path", str(sock_path), "--topic", "t", "--value", "v",
        "--count", "5", "--interval-us", "25000",
    )  # fmt: skip
    elapsed = time.perf_counter() - started
    assert result.returncode == 0, result.stderr
    assert len([receiver.recv(65536) for _ in range(5)]) == 5
    assert elapsed >= 0.1  # 4 gaps of 25 ms


def test_missing_socket_is_one_line_error(sock_path: Path) -> None:
    result = run_cli("--socket-path", str(sock_path), "--topic", "t", "--value", "v")
    stderr = assert_one_line_error(result, 1)
    assert str(sock_path) in stderr


def test_too_large_is_one_line_error(sock_path: Path, receiver: socket.socket) -> None:
    result = run_cli(
        "--socket-path", str(sock_path), "--topic", "t", "--stdin", stdin=b"x" * 1_000_000
    )
    said = assert_one_line_error(result, 1)
    assert "message of 1000029 bytes is too large to send as one datagram (the OS takes " in said
    if sys.platform.startswith("linux"):  # the limit, as a number
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as probe:
            limit = probe.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF) - 32
        assert f"(the OS takes {limit} bytes here)" in said
    assert said.endswith("StreamSender, or to_pulsar --confirm\n")  # the way round it


def test_a_directory_is_not_the_socket(sock_path: Path) -> None:
    """``--socket-path ./run`` (make run's directory) said only "Connection refused"."""
    directory = sock_path.parent
    result = run_cli("--socket-path", str(directory), "--topic", "t", "--value", "v")
    assert assert_one_line_error(result, 1) == (
        f"to_pulsar: error: {directory} is a directory, not the daemon's socket: name the "
        f"socket in it ({directory}/bruce.sock where make run or systemd put it)\n"
    )


def test_the_stream_socket_is_not_the_datagram_socket(tmp_path: Path, sock_path: Path) -> None:
    """The daemon's other socket said only "Protocol wrong type for socket"."""
    stream_path = sock_path.with_name("bruce.stream.sock")
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as stream:
        stream.bind(str(stream_path))
        stream.listen()
        result = run_cli("--socket-path", str(stream_path), "--topic", "t", "--value", "v")
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as datagram:
            datagram.bind(str(sock_path))
            confirm = run_cli(
                "--confirm", "--stream-socket-path", str(sock_path), "--topic", "t", "--value", "v"
            )
    assert assert_one_line_error(result, 1) == (
        f"to_pulsar: error: {stream_path} is a stream socket (the daemon's for confirmed "
        f"delivery: StreamSender, to_pulsar --confirm); datagrams go to "
        f"{sock_path.with_name('bruce.sock')}\n"
    )
    assert assert_one_line_error(confirm, 1) == (
        f"to_pulsar: error: {sock_path} is a datagram socket (the daemon's --socket); "
        f"confirmed delivery goes to its stream socket, "
        f"{str(sock_path).removesuffix('.sock')}.stream.sock by default\n"
    )


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--topic", "t"], "exactly one of --value or --stdin"),
        (["--topic", "t", "--value", "v", "--stdin"], "exactly one of --value or --stdin"),
        (["--value", "v"], "--topic"),
        (["--topic", "", "--value", "v"], "topic"),
        (["--topic", "t", "--value", "v", "--partition-key", "4294967296"], "--partition-key"),
        (["--topic", "t", "--value", "v", "--count", "0"], "--count"),
        (["--topic", "t", "--value", "v", "--timestamp", str(2**63)], "--timestamp"),
        (["--topic", "t", "--value", "v", "--no-such-option"], "--no-such-option"),
    ],
)
def test_usage_errors_are_one_line(sock_path: Path, args: list[str], needle: str) -> None:
    result = run_cli("--socket-path", str(sock_path), *args)
    assert needle in assert_one_line_error(result, 2)


@pytest.mark.parametrize(
    ("topic", "needle"),
    [
        ("bad topic/with spaces!", "expected t, tenant/namespace/t or persistent://"),
        ("a/b/c/d", "expected t, tenant/namespace/t or persistent://"),
        ("a/b/c d", "without whitespace"),
        ("ten ant/ns/t", "the tenant must be"),
        ("kafka://a/b/c", "the domain must be"),
    ],
)
def test_a_topic_the_daemon_would_discard_is_refused_before_sending(
    sock_path: Path, receiver: socket.socket, topic: str, needle: str
) -> None:
    result = run_cli("--socket-path", str(sock_path), "--topic", topic, "--value", "v")
    stderr = assert_one_line_error(result, 2)
    assert f"invalid topic {topic!r}: " in stderr and needle in stderr
    receiver.settimeout(0)
    with pytest.raises(BlockingIOError):
        receiver.recv(65536)  # nothing was sent


@pytest.mark.parametrize("flag", ["-V", "--version"])
def test_version(flag: str) -> None:
    result = run_cli(flag)
    assert result.returncode == 0 and result.stderr == b""
    assert result.stdout.decode().startswith("to_pulsar ")


def test_help_has_example() -> None:
    result = run_cli("--help")
    assert result.returncode == 0
    out = result.stdout.decode()
    assert "Examples:" in out
    assert "--socket_path" in out
    assert "--interval_us" in out
