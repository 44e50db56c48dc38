"""The daemon with OAuth2 client credentials: a local HTTPS issuer and a TLS token broker.

As Java's ``AuthenticationOAuth2`` (pulsar-client-java ``ClientCredentialsFlow``):
the access token from the issuer's token endpoint goes in ``Connect`` under the
"token" method, and again in ``AuthResponse`` when the broker challenges.  The
broker here accepts exactly the tokens the issuer has issued.  The client
secret and the tokens never show in the log (at debug level), ``/metrics``,
``/status`` or ``--check-config``.  Every test runs the real daemon process.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.fake_issuer import TOKEN_PATH, FakeIssuer
from tests.support.fakebroker import FakeBroker
from tests.support.pki import Pki, make_pki, server_context
from tests.support.processes import ROOT, Daemon, wait_for

pytestmark = pytest.mark.timeout(90)

CLIENT_SECRET = "client-s3cret-Zx81-never-shown"
FAST = ("--batch-max-delay-ms", "5")


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture
def setup(pki: Pki) -> Iterator[Callable[..., tuple[FakeIssuer, FakeBroker]]]:
    """``setup(**issuer_options)`` -> a started issuer and a TLS broker accepting its tokens."""
    started: list[tuple[FakeIssuer, FakeBroker]] = []

    def start(**options: Any) -> tuple[FakeIssuer, FakeBroker]:
        accepted: set[bytes] = set()
        broker = FakeBroker(
            ssl_context=server_context(pki.server_cert, pki.server_key),
            tokens=accepted,
            challenge=options.pop("challenge", False),
        ).start()
        issuer = FakeIssuer(
            server_context(pki.server_cert, pki.server_key),
            client_secret=CLIENT_SECRET,
            on_issue=lambda token: accepted.add(token.encode()),
            **options,
        ).start()
        started.append((issuer, broker))
        return issuer, broker

    yield start
    for issuer, broker in started:
        issuer.stop()
        assert broker.errors() == [], broker.errors()
        broker.stop()


def oauth2_args(tmp_path: Path, pki: Pki, issuer: FakeIssuer) -> tuple[str, ...]:
    credentials = tmp_path / "oauth2.json"
    credentials.write_text(
        json.dumps({"type": "client_credentials", "client_id": "bruce-client",
                    "client_secret": CLIENT_SECRET})
    )  # fmt: skip
    return (
        "--tls-ca-file", str(pki.ca),
        "--oauth2-issuer-url", issuer.url,
        "--oauth2-credentials-file", str(credentials),
        "--oauth2-audience", "urn:pulsar:bruce-test",
        "--oauth2-ca-file", str(pki.ca),
    )  # fmt: skip


def send_and_deliver(daemon: Daemon, broker: FakeBroker, topic: str, value: bytes) -> None:
    acked = daemon.counters().acked
    with daemon.sender() as sender:
        sender.send(topic, value)
    wait_for(lambda: daemon.counters().acked > acked, 30, f"{value!r} acked")
    assert broker.values()[-1] == value


def number(token: bytes) -> int:
    """The issue number of ``oauth-token-N``."""
    return int(token.rsplit(b"-", 1)[1])


def get(daemon: Daemon, path: str) -> str:
    url = f"http://127.0.0.1:{daemon.metrics_port}{path}"
    with urllib.request.urlopen(url, timeout=5) as response:
        return str(response.read().decode())


def test_the_issuers_token_goes_in_connect(
    tmp_path: Path,
    pki: Pki,
    setup: Callable[..., tuple[FakeIssuer, FakeBroker]],
    start_daemon: Callable[..., Daemon],
) -> None:
    issuer, broker = setup()
    daemon = start_daemon(broker.url, *oauth2_args(tmp_path, pki, issuer), *FAST)
    send_and_deliver(daemon, broker, f"oauth2-{uuid.uuid4().hex[:8]}", b"with oauth2")
    assert {(c.method, c.data, c.how) for c in broker.credentials()} == {
        ("token", b"oauth-token-1", "connect")
    }
    assert broker.rejected() == 0
    post = next(r for r in issuer.requests() if r.path == TOKEN_PATH)
    assert post.form["audience"] == "urn:pulsar:bruce-test"
    assert post.form["grant_type"] == "client_credentials"
    assert daemon.terminate() == 0  # the token refresher does not hold up a clean stop
    assert "Traceback" not in daemon.log()


def test_an_unreachable_issuer_is_retried_and_connections_wait(
    tmp_path: Path,
    pki: Pki,
    setup: Callable[..., tuple[FakeIssuer, FakeBroker]],
    start_daemon: Callable[..., Daemon],
) -> None:
    issuer, broker = setup()
    issuer.down()
    daemon = start_daemon(broker.url, *oauth2_args(tmp_path, pki, issuer), *FAST)
    with daemon.sender() as sender:
        sender.send(f"oauth2-wait-{uuid.uuid4().hex[:8]}", b"waited")
    wait_for(lambda: daemon.log().count("oauth2: no token from") >= 2, 30, "two retries logged")
    assert broker.connects() == []  # no connection without a token
    assert "HTTP 503: temporarily_unavailable" in daemon.log()
    issuer.up()
    wait_for(lambda: daemon.counters().acked == 1, 30, "delivery once the issuer answers")
    assert broker.values() == [b"waited"]
    assert CLIENT_SECRET not in daemon.log()


def test_tokens_are_refreshed_and_challenges_get_the_fresh_one_and_nothing_shows(
    tmp_path: Path,
    pki: Pki,
    setup: Callable[..., tuple[FakeIssuer, FakeBroker]],
    start_daemon: Callable[..., Daemon],
) -> None:
    """A token living 2 s is replaced at 1.8 s; the broker's "refresh" challenge gets the
    newest one (Java broker: ``ServerCnx.refreshAuthenticationCredentials``)."""
    issuer, broker = setup(expires_in=2, challenge=True)
    args = oauth2_args(tmp_path, pki, issuer)
    daemon = start_daemon(broker.url, *args, "--log-level", "debug", *FAST)
    topic = f"oauth2-refresh-{uuid.uuid4().hex[:8]}"
    send_and_deliver(daemon, broker, topic, b"first")
    wait_for(lambda: len(issuer.issued()) >= 3, 30, "two refreshes")
    newest = number(issuer.issued()[-1].encode())
    assert broker.challenge_all() >= 1

    def answered_fresh() -> bool:
        if any(c.how == "auth_response" and number(c.data) >= newest for c in broker.credentials()):
            return True
        broker.challenge_all()  # the newest token may still have been on its way: ask again
        return False

    wait_for(answered_fresh, 10, "the challenge answered with a fresh token")
    broker.drop_connections()
    send_and_deliver(daemon, broker, topic, b"second")
    assert broker.rejected() == 0

    log = daemon.log()
    assert "DEBUG" in log and "oauth2: access token from" in log
    metrics, status = get(daemon, "/metrics"), get(daemon, "/status")
    for where, text in (("log", log), ("/metrics", metrics), ("/status", status)):
        assert CLIENT_SECRET not in text, f"the client secret shows in {where}"
        assert "oauth-token-" not in text, f"a token shows in {where}"

    check = run_cli("--service-url", broker.url, "--check-config", *args)
    assert check.returncode == 0, check.stderr
    assert f'oauth2_issuer_url = "{issuer.url}"' in check.stdout
    assert CLIENT_SECRET not in check.stdout + check.stderr


def test_an_unreadable_credentials_file_stops_the_daemon_with_one_line(tmp_path: Path) -> None:
    result = run_cli(
        "--service-url", "pulsar+ssl://127.0.0.1:1",
        "--oauth2-issuer-url", "https://127.0.0.1:1",
        "--oauth2-credentials-file", str(tmp_path / "missing.json"),
        "--socket", str(tmp_path / "bruce.sock"),
        "--metrics-listen", "off",
    )  # fmt: skip
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1, result.stderr
    assert "--oauth2-credentials-file: cannot read" in result.stderr
    assert not (tmp_path / "bruce.sock").exists()


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("PULSAR_BRUCE_")}
    environ["PYTHONPATH"] = os.pathsep.join([str(ROOT / "daemon"), str(ROOT / "client_lib")])
    return subprocess.run(
        [sys.executable, "-m", "pulsar_bruce", *args],
        capture_output=True,
        text=True,
        env=environ,
        timeout=30,
        check=False,
    )
