"""systemd notify protocol: NOTIFY_SOCKET datagrams, watchdog interval, status line."""

from __future__ import annotations

import os
import socket
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from pulsar_bruce.service.systemd import (
    STATUS_INTERVAL_S,
    Notifier,
    notify,
    notify_address,
    status_line,
    watchdog_interval_s,
)


@pytest.fixture
def notify_socket() -> Iterator[tuple[str, socket.socket]]:
    """A datagram socket standing in for systemd's (short path: sun_path is 108 bytes)."""
    directory = tempfile.mkdtemp(prefix="sd-")
    path = os.path.join(directory, "notify")
    receiver = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    receiver.bind(path)
    receiver.settimeout(5)
    yield path, receiver
    receiver.close()
    Path(path).unlink(missing_ok=True)
    os.rmdir(directory)


def test_notify_sends_the_state_to_the_given_path(notify_socket) -> None:
    path, receiver = notify_socket
    assert notify("READY=1\nSTATUS=serving", address=path) is True
    assert receiver.recv(4096) == b"READY=1\nSTATUS=serving"


def test_notify_reads_notify_socket_from_the_environment(notify_socket, monkeypatch) -> None:
    path, receiver = notify_socket
    monkeypatch.setenv("NOTIFY_SOCKET", path)
    assert notify("STOPPING=1") is True
    assert receiver.recv(4096) == b"STOPPING=1"


def test_notify_to_an_abstract_socket(monkeypatch) -> None:
    name = f"pulsar-bruce-test-{uuid.uuid4().hex}"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as receiver:
        receiver.bind(b"\0" + name.encode())
        receiver.settimeout(5)
        monkeypatch.setenv("NOTIFY_SOCKET", "@" + name)
        assert notify("WATCHDOG=1") is True
        assert receiver.recv(4096) == b"WATCHDOG=1"


def test_notify_without_notify_socket_is_false(monkeypatch) -> None:
    monkeypatch.delenv("NOTIFY_SOCKET", raising=False)
    assert notify("READY=1") is False


@pytest.mark.parametrize("address", ["", "relative/path", "vsock:2:1234"])
def test_unsupported_addresses_are_ignored(address: str) -> None:
    assert notify_address(address) is None
    assert notify("READY=1", address=address) is False


def test_notify_to_a_missing_socket_is_false_not_an_exception(tmp_path: Path) -> None:
    assert notify("READY=1", address=str(tmp_path / "nobody")) is False


def test_abstract_address_starts_with_a_nul_byte() -> None:
    assert notify_address("@sd/notify") == b"\0sd/notify"
    assert notify_address("/run/systemd/notify") == "/run/systemd/notify"


# -- watchdog --------------------------------------------------------------------------------


def test_watchdog_pings_at_half_the_interval() -> None:
    assert watchdog_interval_s({"WATCHDOG_USEC": "200000"}, pid=42) == pytest.approx(0.1)
    assert watchdog_interval_s({"WATCHDOG_USEC": "30000000"}, pid=42) == pytest.approx(15.0)


def test_watchdog_pid_must_be_ours_when_set() -> None:
    env = {"WATCHDOG_USEC": "200000", "WATCHDOG_PID": "42"}
    assert watchdog_interval_s(env, pid=42) == pytest.approx(0.1)
    assert watchdog_interval_s(env, pid=43) is None


@pytest.mark.parametrize("value", [None, "", "0", "-5", "soon"])
def test_no_watchdog_without_a_positive_watchdog_usec(value: str | None) -> None:
    env = {} if value is None else {"WATCHDOG_USEC": value}
    assert watchdog_interval_s(env, pid=42) is None


def test_tick_interval_is_the_status_interval_or_the_watchdog_interval() -> None:
    assert Notifier("/run/n", None).tick_s == STATUS_INTERVAL_S
    assert Notifier("/run/n", 0.1).tick_s == pytest.approx(0.1)
    assert Notifier("/run/n", 15.0).tick_s == STATUS_INTERVAL_S


def test_notifier_from_environ(notify_socket) -> None:
    path, _ = notify_socket
    notifier = Notifier.from_environ({"NOTIFY_SOCKET": path, "WATCHDOG_USEC": "200000"}, pid=1)
    assert notifier.enabled and notifier.watchdog_s == pytest.approx(0.1)
    other = Notifier.from_environ({"NOTIFY_SOCKET": path, "WATCHDOG_PID": "2"}, pid=1)
    assert other.enabled and other.watchdog_s is None


def test_no_watchdog_without_a_notify_socket() -> None:
    notifier = Notifier.from_environ({"WATCHDOG_USEC": "200000"}, pid=1)
    assert not notifier.enabled and notifier.watchdog_s is None


# -- Notifier messages ---------------------------------------------------------------------------


def test_notifier_messages(notify_socket) -> None:
    path, receiver = notify_socket
    notifier = Notifier(path, 0.1)
    assert notifier.ready("receiving on x")
    assert receiver.recv(4096) == b"READY=1\nSTATUS=receiving on x"
    assert notifier.tick("still here")
    assert receiver.recv(4096) == b"STATUS=still here\nWATCHDOG=1"
    assert notifier.stopping("stopping")
    assert receiver.recv(4096) == b"STOPPING=1\nSTATUS=stopping"


def test_tick_without_watchdog_is_only_status(notify_socket) -> None:
    path, receiver = notify_socket
    assert Notifier(path, None).tick("hello")
    assert receiver.recv(4096) == b"STATUS=hello"


def test_disabled_notifier_does_nothing() -> None:
    notifier = Notifier(None, None)
    assert not notifier.enabled
    assert notifier.ready("x") is False
    assert notifier.tick("x") is False
    assert notifier.stopping("x") is False


def test_status_line() -> None:
    line = status_line("receiving on /run/pulsar-bruce/bruce.sock", 3, 1, 10, 6, 1)
    assert line == (
        "receiving on /run/pulsar-bruce/bruce.sock; 3 buffered; 1 broker connection;"
        " 10 received, 6 acked, 1 discarded"
    )
    assert "; 2 broker connections;" in status_line("stopping", 0, 2, 0, 0, 0)
    assert "; 0 broker connections;" in status_line("stopping", 0, 0, 0, 0, 0)
    assert "\n" not in line


def test_a_full_notify_socket_never_stalls_a_tick(notify_socket) -> None:
    """Periodic ticks run on the event loop: when nobody reads, they are dropped at once."""
    path, _ = notify_socket
    fillers = _fill(path)
    try:
        started = time.monotonic()
        assert Notifier(path, 0.1).tick("dropped") is False
        assert time.monotonic() - started < 0.1
        started = time.monotonic()
        assert notify("READY=1", address=path, timeout=0.05) is False
        assert 0.04 < time.monotonic() - started < 1.0
    finally:
        for filler in fillers:
            filler.close()


def _fill(path: str) -> list[socket.socket]:
    """Queue datagrams on ``path`` until even a fresh sender gets EAGAIN.

    A sender also stops at its own send buffer, so it takes several when
    net.unix.max_dgram_qlen is raised (the receiver's queue limit).
    """
    fillers: list[socket.socket] = []
    for _ in range(1000):
        filler = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        filler.setblocking(False)
        fillers.append(filler)
        sent = 0
        try:
            while True:
                filler.sendto(b"x", path)
                sent += 1
        except BlockingIOError:
            if sent == 0:
                return fillers
    raise AssertionError("could not fill the socket's queue")
