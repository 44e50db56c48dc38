"""Client library for pulsar-bruce: send Bruce-format messages to the local daemon.

Standard library only, so any Python process can log to Pulsar without new dependencies.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .client import Sender
from .encoding import (
    API_KEY_ANY_PARTITION,
    API_KEY_PARTITION_KEY,
    API_VERSION,
    encode_any_partition,
    encode_partition_key,
)
from .errors import (
    DaemonUnavailableError,
    InvalidMessageError,
    MessageTooLargeError,
    SendTimeoutError,
    StreamClosedError,
    StreamProtocolError,
    ToPulsarError,
)
from .paths import (
    DEFAULT_SOCKET_PATH,
    DEFAULT_STREAM_SOCKET_PATH,
    SOCKET_ENV_VAR,
    STREAM_SOCKET_ENV_VAR,
    resolve_socket_path,
    resolve_stream_socket_path,
)

if TYPE_CHECKING:
    from .aio import AsyncSender, AsyncStreamSender
    from .protocol import FlushResult
    from .stream import StreamSender

# Loaded on first use, so a plain datagram sender doesn't pay for importing them.
_LAZY = {
    "AsyncSender": "aio",
    "AsyncStreamSender": "aio",
    "FlushResult": "protocol",
    "StreamSender": "stream",
}

__all__ = [
    "API_KEY_ANY_PARTITION",
    "API_KEY_PARTITION_KEY",
    "API_VERSION",
    "DEFAULT_SOCKET_PATH",
    "DEFAULT_STREAM_SOCKET_PATH",
    "SOCKET_ENV_VAR",
    "STREAM_SOCKET_ENV_VAR",
    "AsyncSender",
    "AsyncStreamSender",
    "DaemonUnavailableError",
    "FlushResult",
    "InvalidMessageError",
    "MessageTooLargeError",
    "SendTimeoutError",
    "Sender",
    "StreamClosedError",
    "StreamProtocolError",
    "StreamSender",
    "ToPulsarError",
    "encode_any_partition",
    "encode_partition_key",
    "resolve_socket_path",
    "resolve_stream_socket_path",
]


def __getattr__(name: str) -> object:
    """``to_pulsar.AsyncSender``, ``StreamSender``, ... on first use (see ``_LAZY``)."""
    module = _LAZY.get(name)
    if module is not None:
        from importlib import import_module

        return getattr(import_module(f".{module}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
