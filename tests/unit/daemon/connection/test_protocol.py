"""The broker connection's sans-IO core: handshake, ping/pong, keep-alive."""

from __future__ import annotations

import pytest
from pulsar_bruce.connection.protocol import (
    ConnectionCore,
    ConnectionState,
    HandshakeError,
    KeepaliveAction,
)
from pulsar_bruce.frame import pulsar_api_pb2 as pb
from pulsar_bruce.frame.codec import FrameDecoder, encode_command

_T = pb.BaseCommand


def frame(kind: int, **fields: object) -> bytes:
    command = pb.BaseCommand(type=kind)
    for name, value in fields.items():
        getattr(command, name).CopyFrom(value)
    return encode_command(command)


def sent_types(core: ConnectionCore) -> list[int]:
    return [f.command.type for f in FrameDecoder().feed(core.data_to_send())]


def connected(core: ConnectionCore, now: float = 0.0, max_size: int = 1234567) -> None:
    core.receive(frame(_T.CONNECTED, connected=pb.CommandConnected(
        server_version="test", max_message_size=max_size)), now)  # fmt: skip


def test_connect_first_then_connected_sets_the_negotiated_size() -> None:
    core = ConnectionCore(0.0)
    assert sent_types(core) == [_T.CONNECT]
    connected(core)
    assert core.state is ConnectionState.READY and core.max_message_size == 1234567


def test_an_error_instead_of_connected_is_a_handshake_error() -> None:
    core = ConnectionCore(0.0)
    error = pb.CommandError(request_id=0, error=pb.AuthenticationError, message="no")
    with pytest.raises(HandshakeError, match="AuthenticationError"):
        core.receive(frame(_T.ERROR, error=error), 0.0)


def test_broker_ping_is_answered_with_pong_and_not_passed_on() -> None:
    core = ConnectionCore(0.0)
    core.data_to_send()
    connected(core)
    assert core.receive(frame(_T.PING, ping=pb.CommandPing()), 1.0) == []
    assert sent_types(core) == [_T.PONG]


def test_keepalive_pings_when_idle_and_closes_on_two_silent_intervals() -> None:
    core = ConnectionCore(0.0)
    core.data_to_send()
    connected(core, now=0.0)
    assert core.keepalive(10.0, interval=30.0) is KeepaliveAction.NOTHING
    assert core.keepalive(30.0, interval=30.0) is KeepaliveAction.PING
    assert sent_types(core) == [_T.PING]
    core.receive(frame(_T.PONG, pong=pb.CommandPong()), 31.0)  # any frame counts as life
    assert core.keepalive(60.0, interval=30.0) is KeepaliveAction.NOTHING  # 29 s since the pong
    assert core.keepalive(61.0, interval=30.0) is KeepaliveAction.PING
    assert core.keepalive(91.0, interval=30.0) is KeepaliveAction.CLOSE
