"""Fixtures of the sender tests: a bound UNIX datagram socket, or a fake stream daemon,
standing in for the daemon."""

from __future__ import annotations

import socket
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.fakestream import FakeStreamDaemon


@pytest.fixture
def sock_path(tmp_path: Path) -> Iterator[Path]:
    """A socket path short enough for sun_path (108 bytes) even with a deep tmp_path."""
    if len(str(tmp_path)) < 90:
        yield tmp_path / "d.sock"
        return
    with tempfile.TemporaryDirectory(prefix="tp") as short:
        yield Path(short) / "d.sock"


def bind(path: Path) -> socket.socket:
    receiver = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    receiver.bind(str(path))
    receiver.settimeout(5)
    return receiver


@pytest.fixture
def receiver(sock_path: Path) -> Iterator[socket.socket]:
    sock = bind(sock_path)
    yield sock
    sock.close()


@pytest.fixture
def fake(sock_path: Path) -> Iterator[FakeStreamDaemon]:
    """A fake daemon stream socket at ``sock_path`` (scripted flush answers)."""
    daemon = FakeStreamDaemon(sock_path)
    yield daemon
    daemon.close()
