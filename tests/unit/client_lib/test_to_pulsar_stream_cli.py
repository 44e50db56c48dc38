"""``to_pulsar --confirm`` as a subprocess against a fake stream daemon."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import to_pulsar
from to_pulsar import encode_any_partition, encode_partition_key

from tests.support.fakestream import FakeStreamDaemon, Flush, flush_response

CLIENT_LIB = Path(to_pulsar.__file__).resolve().parents[1]


@pytest.fixture
def sock_path(tmp_path: Path) -> Iterator[Path]:
    if len(str(tmp_path)) < 90:
        yield tmp_path / "s.sock"
        return
    with tempfile.TemporaryDirectory(prefix="tp") as short:
        yield Path(short) / "s.sock"


def run_cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    pythonpath = os.pathsep.join(filter(None, [str(CLIENT_LIB), os.environ.get("PYTHONPATH")]))
    return subprocess.run(
        [sys.executable, "-m", "to_pulsar.cli", *args],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": pythonpath, **(env or {})},
        timeout=60,
    )


def test_confirmed_send_prints_nothing(fake: FakeStreamDaemon) -> None:
    result = run_cli(
        "--confirm", "--stream-socket-path", str(fake.path),
        "--topic", "t", "--value", "hello", "--key", "k", "--timestamp", "5",
    )  # fmt: skip
    assert (result.returncode, result.stdout, result.stderr) == (0, "", "")
    assert fake.message_records() == [encode_any_partition("t", b"hello", b"k", 5)]
    assert len(fake.flushes) == 1


def test_count_and_partition_key_and_env_path(fake: FakeStreamDaemon) -> None:
    result = run_cli(
        "--confirm", "--topic", "t", "--value", "v", "--partition_key", "3",
        "--timestamp", "1", "--count", "3",
        env={"TO_PULSAR_STREAM_SOCKET": str(fake.path)},
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert fake.message_records() == [encode_partition_key(3, "t", b"v", b"", 1)] * 3


def test_discards_exit_1_with_counts(fake: FakeStreamDaemon) -> None:
    def policy(flush: Flush) -> bytes:
        return flush_response(flush.request_id, len(flush.records) - 1, {"too_large": 1})

    fake.policy = policy
    result = run_cli(
        "--confirm", "--stream_socket_path", str(fake.path),
        "--topic", "t", "--value", "v", "--count", "3",
    )  # fmt: skip
    assert result.returncode == 1
    assert result.stderr == "to_pulsar: error: 1 of 3 messages discarded (too_large 1)\n"


def test_no_confirmation_in_time_exits_1(fake: FakeStreamDaemon) -> None:
    fake.policy = lambda flush: b""
    result = run_cli(
        "--confirm", "--stream-socket-path", str(fake.path), "--confirm-timeout-s", "0.3",
        "--topic", "t", "--value", "v",
    )  # fmt: skip
    assert result.returncode == 1
    assert result.stderr == (
        "to_pulsar: error: no confirmation from the daemon within 0.3 s "
        "(1 of 1 message unconfirmed): the broker has not acknowledged them (is it down? "
        "`pulsar-bruce status` shows the daemon's connections); the daemon keeps them and "
        "delivers them once it can, so sending them again may duplicate them\n"
    )


def test_connection_closed_exits_1(fake: FakeStreamDaemon) -> None:
    fake.policy = lambda flush: None
    result = run_cli(
        "--confirm", "--stream-socket-path", str(fake.path), "--topic", "t", "--value", "v"
    )
    assert result.returncode == 1
    assert result.stderr.startswith("to_pulsar: error: daemon closed the stream connection")
    assert result.stderr.count("\n") == 1


def test_missing_stream_socket_exits_1(sock_path: Path) -> None:
    result = run_cli(
        "--confirm", "--stream-socket-path", str(sock_path), "--topic", "t", "--value", "v"
    )
    assert result.returncode == 1
    assert result.stderr == (
        f"to_pulsar: error: no daemon listening on stream socket {sock_path} "
        "(No such file or directory)\n"
    )


@pytest.mark.parametrize("how", ["option", "variable"])
def test_confirm_finds_the_stream_socket_beside_the_datagram_socket(
    sock_path: Path, how: str
) -> None:
    """--socket-path (or $TO_PULSAR_SOCKET) names the daemon for --confirm too: the stream
    socket is the one the daemon puts beside it (bruce.sock -> bruce.stream.sock)."""
    daemon = FakeStreamDaemon(sock_path.with_name("bruce.stream.sock"))
    try:
        datagram = str(sock_path.with_name("bruce.sock"))
        given = ["--socket-path", datagram] if how == "option" else []
        result = run_cli(
            "--confirm", *given, "--topic", "t", "--value", "v", "--timestamp", "1",
            env={"TO_PULSAR_SOCKET": datagram, "TO_PULSAR_STREAM_SOCKET": ""},
        )  # fmt: skip
        assert (result.returncode, result.stderr) == (0, "")
        assert daemon.message_records() == [encode_any_partition("t", b"v", b"", 1)]
    finally:
        daemon.close()


def test_help_mentions_confirm() -> None:
    result = run_cli("--help")
    assert "--confirm" in result.stdout and "--stream-socket-path" in result.stdout
    assert "TO_PULSAR_STREAM_SOCKET" in result.stdout
