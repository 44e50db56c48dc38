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


def stream_socket_beside(path: str | os.PathLike[str]) -> str:
    """The daemon's ``--stream-socket auto`` rule: ``bruce.sock`` -> ``bruce.stream.sock``
    (``Config.stream_socket_path``), so naming the datagram socket is enough."""
    return f"{os.fspath(path).removesuffix('.sock')}.stream.sock"


def resolve_stream_socket_path(socket_path: str | os.PathLike[str] | None = None) -> str:
    """The daemon's stream socket (confirmed delivery): the explicit path, else
    ``$TO_PULSAR_STREAM_SOCKET``, else the one beside ``$TO_PULSAR_SOCKET``, else the
    packaged default (an empty variable counts as unset).
    """
    if socket_path is not None:
        return os.fspath(socket_path)
    stream = os.environ.get(STREAM_SOCKET_ENV_VAR)
    if stream:
        return stream
    datagram = os.environ.get(SOCKET_ENV_VAR)
    return stream_socket_beside(datagram) if datagram else DEFAULT_STREAM_SOCKET_PATH


def confirm_socket_path(
    stream_socket_path: str | os.PathLike[str] | None, socket_path: str | os.PathLike[str] | None
) -> str:
    """``to_pulsar --confirm``'s stream socket: ``--stream-socket-path``, else the one beside
    ``--socket-path``, else :func:`resolve_stream_socket_path` (the variables)."""
    if stream_socket_path is None and socket_path is not None:
        return stream_socket_beside(socket_path)
    return resolve_stream_socket_path(stream_socket_path)
