"""Where the daemon's sockets live; one place so the library and the CLI agree."""

from __future__ import annotations

import os

SOCKET_ENV_VAR = "TO_PULSAR_SOCKET"
DEFAULT_SOCKET_PATH = "/run/pulsar-bruce/bruce.sock"


def resolve_socket_path(socket_path: str | os.PathLike[str] | None = None) -> str:
    """Return the explicit path, else ``$TO_PULSAR_SOCKET``, else the packaged default.

    An empty environment variable counts as unset, so ``TO_PULSAR_SOCKET=`` cannot
    silently point the client at the current directory.
    """
    if socket_path is not None:
        return os.fspath(socket_path)
    return os.environ.get(SOCKET_ENV_VAR) or DEFAULT_SOCKET_PATH


STREAM_SOCKET_ENV_VAR = "TO_PULSAR_STREAM_SOCKET"
DEFAULT_STREAM_SOCKET_PATH = "/run/pulsar-bruce/bruce.stream.sock"


def resolve_stream_socket_path(socket_path: str | os.PathLike[str] | None = None) -> str:
    """The daemon's stream socket (confirmed delivery): the explicit path, else
    ``$TO_PULSAR_STREAM_SOCKET``, else the packaged default (an empty variable counts as unset).
    """
    if socket_path is not None:
        return os.fspath(socket_path)
    return os.environ.get(STREAM_SOCKET_ENV_VAR) or DEFAULT_STREAM_SOCKET_PATH
