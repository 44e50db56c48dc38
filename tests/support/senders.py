"""What the sender tests (C, Perl, shell, CLI) share: a short socket path and a receiver.

``tests/conftest.py`` offers both as the fixtures ``sock_path`` and ``receiver``.
"""

from __future__ import annotations

import socket
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def short_socket_path(tmp_path: Path) -> Iterator[Path]:
    """A socket path short enough for sun_path (108 bytes) even with a deep tmp_path."""
    if len(str(tmp_path)) < 90:
        yield tmp_path / "d.sock"
        return
    with tempfile.TemporaryDirectory(prefix="tp") as short:
        yield Path(short) / "d.sock"


@contextmanager
def datagram_receiver(path: Path, timeout: float = 5.0) -> Iterator[socket.socket]:
    """A datagram socket bound at ``path``, standing in for the daemon."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(str(path))
    sock.settimeout(timeout)
    try:
        yield sock
    finally:
        sock.close()
