"""Mutual TLS authentication: with a client certificate and no token, Connect names ``"tls"``.

The Java client's ``AuthenticationTls`` returns ``"tls"`` from
``getAuthMethodName`` and its ``AuthenticationDataTls`` has no command data, so
``Connect`` carries ``auth_method_name = "tls"`` with empty ``auth_data`` (and an
``AuthChallenge`` is answered the same way).  The broker's ``ServerCnx.handleConnect``
picks the authentication provider by that name: without it (method ``"none"``) a
broker whose provider is ``AuthenticationProviderTls`` and that has no anonymous
role refuses the connection, certificate or not.  A token, when configured, is the
credential instead; the certificate then only secures the connection.
End to end against the TLS fake broker: ``tests/integration/test_security_broker.py``.
"""

from __future__ import annotations

import shutil

import pytest
from pulsar_bruce.connection.auth import TlsAuth, TokenAuth
from pulsar_bruce.connection.protocol import ConnectionCore
from pulsar_bruce.connection.security import ConnectionSecurity
from pulsar_bruce.frame import pulsar_api_pb2 as pb
from pulsar_bruce.frame.codec import FrameDecoder, encode_command
from pulsar_bruce.model.secret import Secret

from tests.support.pki import Pki, make_pki

pytestmark = pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl CLI")

_T = pb.BaseCommand
TLS_URL = "pulsar+ssl://broker.example:6651"


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


def _security(pki: Pki, service_url: str = TLS_URL, **extra: object) -> ConnectionSecurity:
    return ConnectionSecurity.build(
        service_url=service_url,
        ca_file=str(pki.ca),
        cert_file=str(pki.client_cert),
        key_file=str(pki.client_key),
        **extra,  # type: ignore[arg-type]
    )


def test_a_client_certificate_without_a_token_authenticates_with_tls(pki: Pki) -> None:
    auth = _security(pki).auth
    assert isinstance(auth, TlsAuth)
    assert (auth.method_name, auth.auth_data()) == ("tls", b"")


def test_a_token_is_the_credential_when_both_are_given(pki: Pki) -> None:
    auth = _security(pki, token=Secret("a-token")).auth
    assert isinstance(auth, TokenAuth) and auth.method_name == "token"


def test_without_a_certificate_no_method_is_named(pki: Pki) -> None:
    security = ConnectionSecurity.build(service_url=TLS_URL, ca_file=str(pki.ca))
    assert security.auth is None


def test_over_plain_pulsar_the_certificate_is_ignored_and_so_is_tls_auth(pki: Pki) -> None:
    security = _security(pki, service_url="pulsar://broker.example:6650")
    assert security.auth is None and security.ssl_context is None
    assert any("--tls-* options are ignored" in warning for warning in security.warnings)


def _sent(core: ConnectionCore) -> list[pb.BaseCommand]:
    return [frame.command for frame in FrameDecoder().feed(core.data_to_send())]


def test_connect_and_challenge_answers_name_tls_with_empty_data() -> None:
    auth = TlsAuth()
    core = ConnectionCore(
        0.0,
        auth_method_name=auth.method_name,
        auth_data=auth.auth_data(),
        auth_refresh=auth.auth_data,
    )
    (connect,) = _sent(core)
    assert connect.connect.auth_method_name == "tls"
    assert connect.connect.HasField("auth_data") and connect.connect.auth_data == b""
    challenge = _T(type=_T.AUTH_CHALLENGE)
    challenge.authChallenge.challenge.auth_method_name = "tls"
    challenge.authChallenge.challenge.auth_data = b"refresh"
    core.receive(encode_command(challenge), 1.0)
    (response,) = _sent(core)
    assert response.type == _T.AUTH_RESPONSE
    assert response.authResponse.response.auth_method_name == "tls"
    assert response.authResponse.response.auth_data == b""
