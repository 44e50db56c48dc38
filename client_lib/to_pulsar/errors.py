"""Exceptions raised by the client, all under one base so callers can catch them together."""

from __future__ import annotations


class ToPulsarError(Exception):
    """Base class: anything the client raises on purpose derives from this."""


class DaemonUnavailableError(ToPulsarError):
    """No daemon is listening on the socket (file missing or connection refused).

    Kept separate because callers usually want to retry or degrade, not crash.
    """


class MessageTooLargeError(ToPulsarError):
    """The datagram exceeds what the OS (or the daemon's socket) accepts in one send.

    Retrying cannot help, so this is distinct from transient send failures.
    """

    def __init__(self, size: int, limit: int | None = None) -> None:
        self.size = size
        self.limit = limit
        here = f"{limit} bytes here" if limit is not None else "the socket send buffer"
        super().__init__(
            f"message of {size} bytes is too large to send as one datagram (the OS takes "
            f"{here}); the daemon's stream socket takes it, up to its max_message_bytes "
            "(64MiB by default): StreamSender, or to_pulsar --confirm"
        )


class SendTimeoutError(ToPulsarError):
    """The daemon's socket queue stayed full for longer than the sender's timeout.

    Signals back-pressure: the daemon is not keeping up (or is stuck).
    """


class InvalidMessageError(ToPulsarError, ValueError):
    """The message cannot be encoded (bad topic, partition key, timestamp or size).

    Also a ValueError so generic argument-checking code catches it.
    """


class StreamClosedError(ToPulsarError):
    """The daemon closed the stream connection (it restarted, or lost the framing).

    Whatever was sent since the last answered flush has no confirmation: resend it
    on a new connection if it must arrive (at-least-once).
    """


class StreamProtocolError(ToPulsarError):
    """The daemon answered something the stream protocol does not allow.

    The connection cannot be trusted any more and is closed.
    """
