"""Limits the broker imposes, and the daemon's own start-up refusals."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from tests.support.consume import consume
from tests.support.processes import ROOT, Broker, Daemon, wait_for

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


def test_stream_connections_leave_descriptors_for_metrics(tmp_path: Path, broker: Broker) -> None:
    """Under a descriptor limit of 128 the stream cap is lowered (one line says so), and
    with more connections than that attempted, /metrics and datagrams keep working."""
    daemon = Daemon(tmp_path / "d", broker.url, [], wrapper=["prlimit", "--nofile=128:128"])
    try:
        wait_for(lambda: "stream socket: at most" in daemon.log(), 10, "the cap to be logged")
        cap = int(daemon.log().split("stream socket: at most ", 1)[1].split()[0])
        assert 1 <= cap <= 128 - 64
        clients = []
        for _ in range(cap + 40):
            client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            client.connect(str(daemon.stream_path))
            clients.append(client)
        wait_for(lambda: "refused" in daemon.log(), 10, "the refusals to be logged")
        assert daemon.metrics()["pulsar_bruce_received_total"] == 0  # /metrics answers
        daemon.send_raw(b"\x00")  # and the datagram socket reads (a malformed one, counted)
        wait_for(lambda: daemon.counters().received == 1, 10, "the datagram")
        for client in clients:
            client.close()
    finally:
        daemon.kill()
