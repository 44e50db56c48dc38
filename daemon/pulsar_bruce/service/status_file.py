"""Where a running daemon's status page is: a file beside its socket, for ``pulsar-bruce status``.

The configuration names the metrics address the daemon *will* listen on; a SIGHUP does
not move the listener (a restart does), and ``--metrics-listen 127.0.0.1:0`` takes a port
the file cannot know. So the daemon writes the URL it serves ``/status`` on to
``<socket without .sock>.status-url`` (``/run/pulsar-bruce/bruce.status-url``,
``./run/bruce.status-url``) once it listens, and removes it when it stops; ``status``
reads that first and falls back to the configured address.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

SUFFIX = ".status-url"


def path_beside(socket_path: str) -> Path:
    """``bruce.sock`` -> ``bruce.status-url``, as the stream socket's ``auto`` rule."""
    return Path(f"{socket_path.removesuffix('.sock')}{SUFFIX}")


def status_url(host: str, port: int) -> str:
    """The URL of ``/status`` on a listen address (a wildcard address is read locally)."""
    if host in ("0.0.0.0", ""):
        host = "127.0.0.1"
    elif host == "::":
        host = "::1"
    if ":" in host:
        host = f"[{host}]"
    return f"http://{host}:{port}/status"


def write(socket_path: str, url: str) -> bool:
    """Write ``url`` beside the socket, whole or not at all; False if the directory does
    not take it (``status`` then falls back to the configured address)."""
    path = path_beside(socket_path)
    temporary = path.with_name(f".{path.name}.{os.getpid()}")
    try:
        temporary.write_text(f"{url}\n")
        temporary.replace(path)
    except OSError:
        with contextlib.suppress(OSError):
            temporary.unlink()
        return False
    return True


def remove(socket_path: str, url: str) -> None:
    """Remove the file if it still names ``url`` (a later daemon's is left alone)."""
    path = path_beside(socket_path)
    if read(socket_path) == url:
        with contextlib.suppress(OSError):
            path.unlink()


def read(socket_path: str) -> str | None:
    """The URL a running daemon on ``socket_path`` wrote, or None."""
    try:
        text = path_beside(socket_path).read_text().strip()
    except (OSError, UnicodeDecodeError):
        return None
    return text if text.startswith("http://") else None
