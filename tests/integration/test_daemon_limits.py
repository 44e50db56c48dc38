"""Limits the broker imposes, and the daemon's own start-up refusals."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from tests.support.consume import consume
from tests.support.processes import ROOT, Broker

pytestmark = pytest.mark.broker


def test_message_the_broker_refuses_as_too_large_is_discarded(tmp_path: Path, start_daemon) -> None:
    """pulsar-lite enforces ``max_message_size_bytes`` with a SendError (NotAllowed, "Exceed
    maximum message size", as the Java broker words a topic's own limit): a single message
    over it cannot be cut, so it is discarded as ``too_large``."""
    small = Broker(tmp_path / "small", partitions=0, extra_config="max_message_size_bytes = 65536")
    small.start()
    try:
        daemon = start_daemon(small.url, "--compression", "none", "--batch-max-bytes", "64KiB")
        topic = f"limit-{uuid.uuid4().hex[:8]}"
        with daemon.sender() as sender:
            sender.send(topic, b"x" * 100_000)
            sender.send(topic, b"fits")
        counters = daemon.wait_settled(2)
        assert counters.discarded["too_large"] == 1
        assert counters.acked == 1
        [message] = consume(small.url, f"persistent://public/default/{topic}", 1)
        assert message.value == b"fits"
    finally:
        small.stop()


def _run_daemon(*args: str, timeout: float = 30) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=f"{ROOT / 'daemon'}{os.pathsep}{ROOT / 'client_lib'}")
    return subprocess.run(
        [sys.executable, "-m", "pulsar_bruce", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        stdin=subprocess.DEVNULL,
    )


def test_refuses_a_socket_another_daemon_is_receiving_on(broker: Broker, start_daemon) -> None:
    first = start_daemon(broker.url)
    result = _run_daemon(
        "--socket", first.socket_path, "--service-url", broker.url, "--metrics-listen", "off"
    )
    assert result.returncode != 0
    assert "another process is receiving" in result.stderr
    assert "Traceback" not in result.stderr
    assert first.process.poll() is None  # the first one is untouched


def test_replaces_a_stale_socket_file(tmp_path: Path, broker: Broker) -> None:
    import socket

    path = tmp_path / "stale.sock"
    stale = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    stale.bind(str(path))
    stale.close()  # the file stays, nobody receives
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "pulsar_bruce",
            "--socket",
            str(path),
            "--service-url",
            broker.url,
            "--metrics-listen",
            "off",
        ],
        env=dict(os.environ, PYTHONPATH=f"{ROOT / 'daemon'}{os.pathsep}{ROOT / 'client_lib'}"),
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        from tests.support.processes import wait_for

        def receiving() -> bool:
            probe = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
            try:
                probe.connect(str(path))
                return True
            except OSError:
                return process.poll() is None and False
            finally:
                probe.close()

        wait_for(receiving, 30, "daemon to take over the stale socket")
        assert oct(path.stat().st_mode & 0o777) == oct(0o660)
    finally:
        process.terminate()
        assert process.wait(30) == 0


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["--buffer-max-bytes", "lots"], "--buffer-max-bytes"),
        (["--service-url", "http://x"], "--service-url"),
        (["--socket-mode", "999"], "--socket-mode"),
        (["--metrics-listen", "nowhere"], "--metrics-listen"),
        (["--compression", "brotli"], "--compression"),
    ],
)
def test_invalid_option_is_one_clear_line(args: list[str], named: str) -> None:
    result = _run_daemon(*args)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and named in lines[0], result.stderr


def test_invalid_environment_value_names_the_variable() -> None:
    env_name = "PULSAR_BRUCE_BATCH_MAX_MESSAGES"
    os.environ[env_name] = "-3"
    try:
        result = _run_daemon()
    finally:
        del os.environ[env_name]
    assert result.returncode == 2
    assert env_name in result.stderr and "Traceback" not in result.stderr
