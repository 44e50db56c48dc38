"""The broker connection's protocol state, sans-IO (no sockets, no clocks).

The I/O edge feeds received bytes and the current time in, writes out what
:meth:`ConnectionCore.data_to_send` returns, and dispatches the frames that are
left after the core has handled the connection-level ones (Connected, Ping,
Pong).  Keep-alive follows the Pulsar clients: ping when we have been idle for
an interval, give up when nothing at all has arrived for two intervals.
"""

from __future__ import annotations

from collections.abc import Callable
from enum import Enum

from pulsar_bruce.connection.auth import auth_response_frame
from pulsar_bruce.frame import commands
from pulsar_bruce.frame import pulsar_api_pb2 as pb
from pulsar_bruce.frame.codec import (
    DEFAULT_MAX_MESSAGE_SIZE,
    FRAME_OVERHEAD_ALLOWANCE,
    Frame,
    FrameDecoder,
    FrameError,
)

_T = pb.BaseCommand


class ConnectionState(Enum):
    HANDSHAKE = "handshake"
    READY = "ready"
    CLOSED = "closed"


class KeepaliveAction(Enum):
    NOTHING = "nothing"
    PING = "ping"
    CLOSE = "close"


class HandshakeError(Exception):
    """The broker refused or botched the Connect handshake."""


class ConnectionCore:
    """Handshake, ping/pong, keep-alive and framing of one broker connection."""

    def __init__(
        self,
        now: float,
        *,
        proxy_to_broker_url: str | None = None,
        auth_method_name: str | None = None,
        auth_data: bytes | None = None,
        auth_refresh: Callable[[], bytes] | None = None,
    ):
        self.state = ConnectionState.HANDSHAKE
        self.max_message_size = DEFAULT_MAX_MESSAGE_SIZE
        self.server_version = ""
        self.last_received = now
        self._decoder = FrameDecoder()
        self._outgoing: list[bytes] = [
            commands.connect(
                proxy_to_broker_url=proxy_to_broker_url,
                auth_method_name=auth_method_name,
                auth_data=auth_data,
            )
        ]
        self._request_id = 0
        self._auth_method_name = auth_method_name
        self._auth_data = auth_data or b""
        #: Fresh credentials for an AuthChallenge (e.g. a re-read token file).
        self._auth_refresh = auth_refresh

    def next_request_id(self) -> int:
        self._request_id += 1
        return self._request_id

    def data_to_send(self) -> bytes:
        """Bytes the core wants written (Connect, Pong, Ping)."""
        if not self._outgoing:
            return b""
        data = b"".join(self._outgoing)
        self._outgoing.clear()
        return data

    def receive(self, data: bytes, now: float) -> list[Frame]:
        """Feed received bytes; returns frames for the edge to dispatch.

        Raises :class:`FrameError` on broken framing and :class:`HandshakeError`
        if the broker answers Connect with an error.
        """
        self.last_received = now
        frames = self._decoder.feed(data)
        if not frames:
            return frames
        left: list[Frame] = []
        for frame in frames:
            kind = frame.command.type
            if kind == _T.PING:
                self._outgoing.append(commands.pong())
            elif kind == _T.PONG:
                pass
            elif kind == _T.AUTH_CHALLENGE:
                self._on_auth_challenge()
            elif self.state is ConnectionState.HANDSHAKE:
                self._on_handshake_reply(frame.command)
            else:
                left.append(frame)
        return left

    def _on_handshake_reply(self, command: pb.BaseCommand) -> None:
        if command.type == _T.CONNECTED:
            connected = command.connected
            if connected.HasField("max_message_size") and connected.max_message_size > 0:
                self.max_message_size = connected.max_message_size
            self._decoder.max_frame_size = self.max_message_size + FRAME_OVERHEAD_ALLOWANCE
            self.server_version = connected.server_version
            self.state = ConnectionState.READY
        elif command.type == _T.ERROR:
            self.state = ConnectionState.CLOSED
            raise HandshakeError(
                f"{pb.ServerError.Name(command.error.error)}: {command.error.message}"
            )
        else:
            self.state = ConnectionState.CLOSED
            raise FrameError(f"unexpected {_T.Type.Name(command.type)} before Connected")

    def _on_auth_challenge(self) -> None:
        """Answer with our credentials: during the handshake (multi-stage methods) or later,
        when the broker asks for fresh ones (``auth_data`` "refresh", expiring tokens)."""
        if not self._auth_method_name:
            self.state = ConnectionState.CLOSED
            raise HandshakeError(
                "the broker asks for authentication and no credentials are configured "
                "(--auth-token-file, PULSAR_BRUCE_AUTH_TOKEN or --tls-cert-file)"
            )
        data = self._auth_refresh() if self._auth_refresh is not None else self._auth_data
        self._outgoing.append(auth_response_frame(self._auth_method_name, data))

    def keepalive(self, now: float, interval: float) -> KeepaliveAction:
        """Called every ``interval`` seconds by the edge."""
        silent_for = now - self.last_received
        if silent_for >= 2 * interval:
            return KeepaliveAction.CLOSE
        if silent_for >= interval:
            self._outgoing.append(commands.ping())
            return KeepaliveAction.PING
        return KeepaliveAction.NOTHING
