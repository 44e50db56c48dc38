"""OAuth2 client credentials against a local HTTPS issuer (``tests/support/fake_issuer.py``).

The flow is Pulsar's ``AuthenticationOAuth2`` (pulsar-client-java
``ClientCredentialsFlow`` / ``TokenClient``): OpenID metadata, then a form POST
of the client credentials; the access token goes out under the "token" method.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from pulsar_bruce.connection.auth import AuthSetupError
from pulsar_bruce.connection.oauth2 import (
    AccessToken,
    ClientCredentials,
    IssuerError,
    OAuth2Auth,
    OAuth2Options,
    TokenClient,
)
from pulsar_bruce.connection.security import ConnectionSecurity, SecuritySetupError
from pulsar_bruce.connection.tls import build_ssl_context
from pulsar_bruce.model.secret import Secret

from tests.support.fake_issuer import METADATA_PATH, TOKEN_PATH, FakeIssuer
from tests.support.pki import Pki, make_pki, server_context

SECRET = "s3cret-never-logged"


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture
def issuer(pki: Pki) -> Iterator[FakeIssuer]:
    running = FakeIssuer(server_context(pki.server_cert, pki.server_key), client_secret=SECRET)
    yield running.start()
    running.stop()


def credentials_file(directory: Path, **fields: object) -> Path:
    path = directory / "credentials.json"
    path.write_text(json.dumps(fields or {"client_id": "bruce-client", "client_secret": SECRET}))
    return path


def client(pki: Pki, issuer: FakeIssuer, secret: str = SECRET, **options: str) -> TokenClient:
    return TokenClient(
        issuer.url,
        ClientCredentials("bruce-client", Secret(secret)),
        ssl_context=build_ssl_context(ca_file=str(pki.ca)),
        **options,
    )


# -- the token client -----------------------------------------------------------------------------


def test_the_metadata_names_the_endpoint_and_the_grant_is_a_form_post(
    pki: Pki, issuer: FakeIssuer
) -> None:
    tokens = client(pki, issuer, audience="urn:pulsar:test", scope="produce")
    first, second = tokens.fetch(), tokens.fetch()
    assert (first.value.reveal(), second.value.reveal()) == ("oauth-token-1", "oauth-token-2")
    assert first.lifetime_s == 3600
    requests = issuer.requests()
    assert [(r.method, r.path) for r in requests] == [
        ("GET", METADATA_PATH),  # asked once
        ("POST", TOKEN_PATH),
        ("POST", TOKEN_PATH),
    ]
    post = requests[1]
    assert post.content_type == "application/x-www-form-urlencoded"
    assert post.form == {
        "grant_type": "client_credentials",
        "client_id": "bruce-client",
        "client_secret": SECRET,
        "audience": "urn:pulsar:test",
        "scope": "produce",
    }


def test_audience_and_scope_are_left_out_when_not_configured(pki: Pki, issuer: FakeIssuer) -> None:
    client(pki, issuer).fetch()
    assert set(issuer.requests()[-1].form) == {"grant_type", "client_id", "client_secret"}


def test_a_trailing_slash_on_the_issuer_url_is_not_doubled(pki: Pki, issuer: FakeIssuer) -> None:
    tokens = TokenClient(
        issuer.url + "/",
        ClientCredentials("bruce-client", Secret(SECRET)),
        ssl_context=build_ssl_context(ca_file=str(pki.ca)),
    )
    tokens.fetch()
    assert issuer.requests()[0].path == METADATA_PATH


def test_without_expires_in_an_hour_is_assumed(pki: Pki, issuer: FakeIssuer) -> None:
    issuer.expires_in = None
    assert client(pki, issuer).fetch().lifetime_s == 3600.0


def test_wrong_credentials_name_the_oauth_error_not_the_secret(
    pki: Pki, issuer: FakeIssuer
) -> None:
    with pytest.raises(IssuerError) as caught:
        client(pki, issuer, secret="wrong-" + SECRET).fetch()
    message = str(caught.value)
    assert "HTTP 401: invalid_client (bad client credentials)" in message
    assert SECRET not in message


def test_an_issuer_signed_by_an_unknown_ca_is_refused(issuer: FakeIssuer) -> None:
    tokens = TokenClient(
        issuer.url, ClientCredentials("bruce-client", Secret(SECRET)), ssl_context=None
    )
    with pytest.raises(IssuerError, match="certificate verify failed"):
        tokens.fetch()
    assert issuer.requests() == []


# -- the credentials file -------------------------------------------------------------------------


def test_the_credentials_file_gives_id_and_secret_and_hides_the_secret(tmp_path: Path) -> None:
    path = credentials_file(
        tmp_path, type="client_credentials", client_id="c", client_secret=SECRET, issuer_url="x"
    )
    read = ClientCredentials.read(str(path))
    assert (read.client_id, read.client_secret.reveal()) == ("c", SECRET)
    assert SECRET not in repr(read)


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (None, "cannot read"),
        ("{not json", "is not a JSON object"),
        ("[1]", "is not a JSON object"),
        ('{"client_id": "c"}', "has no client_secret"),
        (f'{{"client_secret": "{SECRET}"}}', "has no client_id"),
    ],
)
def test_an_unusable_credentials_file_is_one_clear_error(
    tmp_path: Path, content: str | None, expected: str
) -> None:
    path = tmp_path / "credentials.json"
    if content is not None:
        path.write_text(content)
    with pytest.raises(AuthSetupError, match=expected) as caught:
        ClientCredentials.read(str(path))
    assert SECRET not in str(caught.value)


# -- the provider: waiting, retrying, refreshing --------------------------------------------------


class ScriptedIssuer:
    """OAuth2Auth's token source: fails ``failures`` times, then gives numbered tokens."""

    issuer_url = "https://issuer"

    def __init__(self, failures: int = 0, lifetime_s: float = 3600.0):
        self.failures = failures
        self.lifetime_s = lifetime_s
        self.calls = 0

    def fetch(self) -> AccessToken:
        self.calls += 1
        if self.calls <= self.failures:
            raise IssuerError("cannot reach the token endpoint at https://issuer: refused")
        return AccessToken(Secret(f"token-{self.calls}"), self.lifetime_s)


async def wait_until(condition: Callable[[], bool], what: str, deadline_s: float = 10.0) -> None:
    end = time.monotonic() + deadline_s
    while not condition():
        assert time.monotonic() < end, f"timed out waiting for {what}"
        await asyncio.sleep(0.01)


def test_a_connection_waits_for_the_first_token_while_the_issuer_fails(
    caplog: pytest.LogCaptureFixture,
) -> None:
    issuer = ScriptedIssuer(failures=3)
    auth = OAuth2Auth(issuer, backoff_s=(0.01, 0.02))

    async def scenario() -> bytes:
        await auth.ready()
        auth.close()
        return auth.auth_data()

    with caplog.at_level(logging.DEBUG):
        assert asyncio.run(scenario()) == b"token-4"
    assert auth.method_name == "token"
    assert issuer.calls == 4
    assert caplog.text.count("no token from https://issuer") == 3
    assert "access token from https://issuer, valid for 3600s" in caplog.text
    assert "token-4" not in caplog.text and "token-4" not in repr(auth)


def test_the_token_is_refreshed_before_it_expires() -> None:
    """At 90% of its lifetime, without a connection asking: a challenge gets a fresh one."""
    issuer = ScriptedIssuer(lifetime_s=1.0)
    auth = OAuth2Auth(issuer)

    async def scenario() -> list[bytes]:
        await auth.ready()
        seen = [auth.auth_data()]
        await wait_until(lambda: auth.fetched >= 2, "a refresh")
        seen.append(auth.auth_data())
        auth.close()
        return seen

    assert asyncio.run(scenario()) == [b"token-1", b"token-2"]


def test_an_expired_token_is_replaced_before_a_new_connection_uses_it() -> None:
    now = [0.0]
    issuer = ScriptedIssuer(lifetime_s=100.0)
    auth = OAuth2Auth(issuer, clock=lambda: now[0])

    async def scenario() -> list[bytes]:
        await auth.ready()
        first = auth.auth_data()
        await auth.ready()  # still valid: no new fetch
        now[0] = 100.0  # expired (the refresher sleeps on real time: not yet awake)
        assert not auth.has_valid_token
        await auth.ready()
        auth.close()
        return [first, auth.auth_data()]

    assert asyncio.run(scenario()) == [b"token-1", b"token-2"]
    assert issuer.calls == 2


# -- built from the options -----------------------------------------------------------------------


def options(tmp_path: Path, issuer_url: str = "https://issuer", **more: str) -> OAuth2Options:
    return OAuth2Options(issuer_url, str(credentials_file(tmp_path)), **more)


def test_connection_security_builds_the_oauth2_provider(tmp_path: Path, pki: Pki) -> None:
    security = ConnectionSecurity.build(
        service_url="pulsar+ssl://broker:6651",
        oauth2=options(tmp_path, ca_file=str(pki.ca)),
    )
    assert isinstance(security.auth, OAuth2Auth)
    assert security.warnings == ()
    assert SECRET not in repr(security)


def test_an_http_issuer_is_warned_about(tmp_path: Path) -> None:
    security = ConnectionSecurity.build(
        service_url="pulsar+ssl://broker:6651", oauth2=options(tmp_path, "http://issuer")
    )
    assert any("client secret is sent to the issuer unencrypted" in w for w in security.warnings)


def test_bad_oauth2_files_name_their_option(tmp_path: Path) -> None:
    with pytest.raises(SecuritySetupError, match=r"^--oauth2-ca-file: cannot read"):
        ConnectionSecurity.build(
            service_url="pulsar://b:6650", oauth2=options(tmp_path, ca_file=str(tmp_path / "no"))
        )
    missing = OAuth2Options("https://issuer", str(tmp_path / "missing.json"))
    with pytest.raises(SecuritySetupError, match=r"^--oauth2-credentials-file: cannot read"):
        ConnectionSecurity.build(service_url="pulsar://b:6650", oauth2=missing)
