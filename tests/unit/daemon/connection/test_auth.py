"""Token authentication: the token source, Connect, and answering the broker's AuthChallenge."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from pulsar_bruce.config import load_config
from pulsar_bruce.connection.auth import AuthSetupError, TokenAuth
from pulsar_bruce.connection.protocol import ConnectionCore, ConnectionState, HandshakeError
from pulsar_bruce.frame import pulsar_api_pb2 as pb
from pulsar_bruce.frame.codec import FrameDecoder, encode_command
from pulsar_bruce.model.secret import Secret
from pulsar_bruce.service.connection_options import connection_security

_T = pb.BaseCommand
TOKEN = "eyJhbGciOiJIUzI1NiJ9.dGVzdA.SIGNATURE-never-logged"


# -- wire format (upstream PulsarApi.proto) -------------------------------------------------------


@pytest.mark.parametrize(
    ("message", "field", "number"),
    [
        ("BaseCommand", "authChallenge", 36),
        ("BaseCommand", "authResponse", 37),
        ("CommandAuthChallenge", "server_version", 1),
        ("CommandAuthChallenge", "challenge", 2),
        ("CommandAuthChallenge", "protocol_version", 3),
        ("CommandAuthResponse", "client_version", 1),
        ("CommandAuthResponse", "response", 2),
        ("CommandAuthResponse", "protocol_version", 3),
        ("AuthData", "auth_method_name", 1),
        ("AuthData", "auth_data", 2),
    ],
)
def test_auth_messages_match_upstream_field_numbers(message: str, field: str, number: int) -> None:
    descriptor = pb.DESCRIPTOR.message_types_by_name[message]
    assert descriptor.fields_by_name[field].number == number
    assert not descriptor.fields_by_name[field].is_required


def test_auth_command_types() -> None:
    assert _T.AUTH_CHALLENGE == 36
    assert _T.AUTH_RESPONSE == 37


# -- where the token comes from -------------------------------------------------------------------


def test_a_token_file_is_stripped_and_re_read_on_every_use(tmp_path: Path) -> None:
    path = tmp_path / "token"
    path.write_text("first-token\n")
    auth = TokenAuth(path=str(path))
    assert auth.method_name == "token"
    assert auth.auth_data() == b"first-token"
    path.write_text("second-token\r\n")
    assert auth.auth_data() == b"second-token"


def test_a_token_file_unreadable_at_start_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(AuthSetupError, match=r"cannot read .*missing"):
        TokenAuth(path=str(tmp_path / "missing"))
    empty = tmp_path / "empty"
    empty.write_text("\n")
    with pytest.raises(AuthSetupError, match=r"is empty"):
        TokenAuth(path=str(empty))


def test_a_token_file_that_vanishes_later_keeps_the_last_token(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "token"
    path.write_text(TOKEN)
    auth = TokenAuth(path=str(path))
    path.unlink()
    with caplog.at_level(logging.DEBUG):
        assert auth.auth_data() == TOKEN.encode()
        assert auth.auth_data() == TOKEN.encode()
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "using the last token read" in warnings[0].getMessage()
    assert TOKEN not in caplog.text
    path.write_text("new-token")
    assert auth.auth_data() == b"new-token"


def test_a_token_from_the_environment() -> None:
    auth = TokenAuth(token=Secret(TOKEN))
    assert auth.auth_data() == TOKEN.encode()
    assert TOKEN not in repr(auth)


def test_the_security_helper_picks_the_configured_source(tmp_path: Path) -> None:
    path = tmp_path / "token"
    path.write_text(TOKEN)
    from_file = connection_security(load_config({"auth_token_file": str(path)}, {}))
    assert from_file.auth is not None and from_file.auth.auth_data() == TOKEN.encode()
    from_env = connection_security(load_config({}, {"PULSAR_BRUCE_AUTH_TOKEN": TOKEN}))
    assert from_env.auth is not None and from_env.auth.auth_data() == TOKEN.encode()
    assert any("unencrypted connection" in w for w in from_env.warnings)
    assert connection_security(load_config({}, {})).auth is None


# -- the connection core --------------------------------------------------------------------------


def sent_commands(core: ConnectionCore) -> list[pb.BaseCommand]:
    return [frame.command for frame in FrameDecoder().feed(core.data_to_send())]


def challenge() -> bytes:
    command = _T(type=_T.AUTH_CHALLENGE)
    command.authChallenge.challenge.auth_method_name = "token"
    command.authChallenge.challenge.auth_data = b"refresh"
    return encode_command(command)


def connected() -> bytes:
    command = _T(type=_T.CONNECTED)
    command.connected.server_version = "test"
    return encode_command(command)


def test_connect_carries_the_token() -> None:
    core = ConnectionCore(0.0, auth_method_name="token", auth_data=TOKEN.encode())
    [connect] = sent_commands(core)
    assert connect.type == _T.CONNECT
    assert connect.connect.auth_method_name == "token"
    assert connect.connect.auth_data == TOKEN.encode()
    assert connect.connect.feature_flags.supports_auth_refresh


def test_a_challenge_in_the_handshake_is_answered_then_connected() -> None:
    tokens = iter([b"fresh-1", b"fresh-2"])
    core = ConnectionCore(
        0.0, auth_method_name="token", auth_data=b"initial", auth_refresh=lambda: next(tokens)
    )
    sent_commands(core)  # Connect
    assert core.receive(challenge(), 1.0) == []
    assert core.state is ConnectionState.HANDSHAKE
    [response] = sent_commands(core)
    assert response.type == _T.AUTH_RESPONSE
    assert response.authResponse.response.auth_method_name == "token"
    assert response.authResponse.response.auth_data == b"fresh-1"
    assert response.authResponse.client_version.startswith("pulsar-bruce-")
    assert response.authResponse.protocol_version == pb.v20
    core.receive(connected(), 2.0)
    assert core.state is ConnectionState.READY
    # Later, the broker asks for fresh credentials: answered, not passed on.
    assert core.receive(challenge(), 3.0) == []
    [refresh] = sent_commands(core)
    assert refresh.authResponse.response.auth_data == b"fresh-2"
    assert core.state is ConnectionState.READY


def test_without_refresh_the_challenge_gets_the_connect_token() -> None:
    core = ConnectionCore(0.0, auth_method_name="token", auth_data=b"static")
    sent_commands(core)
    core.receive(challenge(), 1.0)
    [response] = sent_commands(core)
    assert response.authResponse.response.auth_data == b"static"


def test_a_challenge_without_credentials_fails_the_handshake() -> None:
    core = ConnectionCore(0.0)
    sent_commands(core)
    with pytest.raises(HandshakeError, match="no credentials are configured"):
        core.receive(challenge(), 1.0)
    assert core.state is ConnectionState.CLOSED


def test_an_authentication_error_fails_the_handshake_without_the_token() -> None:
    core = ConnectionCore(0.0, auth_method_name="token", auth_data=TOKEN.encode())
    sent_commands(core)
    error = _T(type=_T.ERROR)
    error.error.request_id = 0
    error.error.error = pb.AuthenticationError
    error.error.message = "Failed to authenticate"
    with pytest.raises(HandshakeError) as caught:
        core.receive(encode_command(error), 1.0)
    assert str(caught.value) == "AuthenticationError: Failed to authenticate"
