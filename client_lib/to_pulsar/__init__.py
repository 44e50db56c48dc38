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
    ToPulsarError,
)
from .paths import DEFAULT_SOCKET_PATH, SOCKET_ENV_VAR, resolve_socket_path

if TYPE_CHECKING:
    from .aio import AsyncSender

__all__ = [
    "API_KEY_ANY_PARTITION",
    "API_KEY_PARTITION_KEY",
    "API_VERSION",
    "DEFAULT_SOCKET_PATH",
    "SOCKET_ENV_VAR",
    "AsyncSender",
    "DaemonUnavailableError",
    "InvalidMessageError",
    "MessageTooLargeError",
    "SendTimeoutError",
    "Sender",
    "ToPulsarError",
    "encode_any_partition",
    "encode_partition_key",
    "resolve_socket_path",
]


def __getattr__(name: str) -> object:
    """``to_pulsar.AsyncSender`` on first use: plain senders don't pay for importing asyncio."""
    if name == "AsyncSender":
        from .aio import AsyncSender

        return AsyncSender
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
