"""The daemon against a broker that demands TLS and/or a token (``tests/support/fakebroker.py``).

``pulsar+ssl://`` with a CA file, a client certificate (mutual TLS authentication)
and hostname verification; token authentication from a file (re-read: tokens
rotate) or the environment, including the broker's AuthChallenge; and the token
never showing in the daemon's log (at debug level), ``/metrics``, ``/status`` or
``--check-config``.
Every test runs the real daemon process.
"""

from __future__ import annotations

import os
import ssl
import subprocess
import sys
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.fakebroker import FakeBroker
from tests.support.pki import Pki, make_pki, server_context
from tests.support.processes import ROOT, Daemon, wait_for

pytestmark = pytest.mark.timeout(90)

FAST = ("--batch-max-delay-ms", "5")


@pytest.fixture(scope="session")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture
def secure_broker() -> Iterator[Callable[..., FakeBroker]]:
    started: list[FakeBroker] = []

    def start(**options: Any) -> FakeBroker:
        broker = FakeBroker(**options).start()
        started.append(broker)
        return broker

    yield start
    for broker in started:
        assert broker.errors() == [], broker.errors()
        broker.stop()


def unique_topic(what: str) -> str:
    return f"security-{what}-{uuid.uuid4().hex[:8]}"


def send_values(daemon: Daemon, topic: str, values: list[bytes]) -> None:
    with daemon.sender() as sender:
        for value in values:
            sender.send(topic, value)


def delivered(daemon: Daemon, broker: FakeBroker, values: list[bytes]) -> None:
    """Wait until every value is acked and the broker holds them all, in order."""
    wait_for(lambda: daemon.counters().acked >= len(values), 30, f"{len(values)} acks")
    assert broker.values()[-len(values) :] == values


def refused(daemon: Daemon, broker: FakeBroker, failures: Callable[[], int]) -> None:
    """Nothing delivered while the daemon keeps trying (at least 3 connection attempts)."""
    wait_for(lambda: failures() >= 3, 30, "3 refused connection attempts")
    counters = daemon.counters()
    assert counters.acked == 0 and counters.buffered == counters.received > 0
    assert broker.values() == []


def client_certificate(pki: Pki) -> tuple[str, ...]:
    return ("--tls-cert-file", str(pki.client_cert), "--tls-key-file", str(pki.client_key))


def get(daemon: Daemon, path: str) -> str:
    url = f"http://127.0.0.1:{daemon.metrics_port}{path}"
    with urllib.request.urlopen(url, timeout=5) as response:
        return str(response.read().decode())


# -- TLS ------------------------------------------------------------------------------------------


def test_tls_delivers_with_the_ca_file(
    pki: Pki, secure_broker: Callable[..., FakeBroker], start_daemon: Callable[..., Daemon]
) -> None:
    broker = secure_broker(ssl_context=server_context(pki.server_cert, pki.server_key))
    assert broker.url.startswith("pulsar+ssl://127.0.0.1:")
    daemon = start_daemon(broker.url, "--tls-ca-file", str(pki.ca), *FAST)
    values = [f"over-tls-{i}".encode() for i in range(20)]
    send_values(daemon, unique_topic("tls"), values)
    delivered(daemon, broker, values)
    assert broker.tls_failures() == []


def test_tls_without_the_ca_file_is_refused_and_retried(
    pki: Pki, secure_broker: Callable[..., FakeBroker], start_daemon: Callable[..., Daemon]
) -> None:
    """Default trust store = the system's, which does not know our test CA."""
    broker = secure_broker(ssl_context=server_context(pki.server_cert, pki.server_key))
    daemon = start_daemon(broker.url, *FAST)
    send_values(daemon, unique_topic("no-ca"), [b"a", b"b", b"c"])
    refused(daemon, broker, lambda: len(broker.tls_failures()))
    wait_for(lambda: "certificate verify failed" in daemon.log().lower(), 10, "a TLS error logged")


def test_hostname_verification_refuses_a_certificate_for_another_name(
    pki: Pki, secure_broker: Callable[..., FakeBroker], start_daemon: Callable[..., Daemon]
) -> None:
    broker = secure_broker(ssl_context=server_context(pki.wrong_name_cert, pki.wrong_name_key))
    daemon = start_daemon(broker.url, "--tls-ca-file", str(pki.ca), *FAST)
    send_values(daemon, unique_topic("wrong-name"), [b"a", b"b"])
    refused(daemon, broker, lambda: len(broker.tls_failures()))
    wait_for(lambda: "mismatch" in daemon.log().lower(), 10, "a hostname mismatch logged")


def test_without_hostname_verification_the_other_name_is_accepted(
    pki: Pki, secure_broker: Callable[..., FakeBroker], start_daemon: Callable[..., Daemon]
) -> None:
    broker = secure_broker(ssl_context=server_context(pki.wrong_name_cert, pki.wrong_name_key))
    daemon = start_daemon(
        broker.url, "--tls-ca-file", str(pki.ca), "--no-tls-hostname-verification", *FAST
    )
    values = [b"x", b"y"]
    send_values(daemon, unique_topic("no-verify"), values)
    delivered(daemon, broker, values)
    assert "TLS hostname verification is off" in daemon.log()


def test_a_client_certificate_the_broker_requires_is_presented(
    pki: Pki, secure_broker: Callable[..., FakeBroker], start_daemon: Callable[..., Daemon]
) -> None:
    context = server_context(pki.server_cert, pki.server_key, client_ca=pki.ca)
    broker = secure_broker(ssl_context=context)
    daemon = start_daemon(broker.url, "--tls-ca-file", str(pki.ca), *client_certificate(pki), *FAST)
    values = [b"with-client-cert"]
    send_values(daemon, unique_topic("client-cert"), values)
    delivered(daemon, broker, values)
    subjects = [dict(part[0] for part in cert["subject"]) for cert in broker.peer_certs()]
    assert subjects and all(s["commonName"] == "pulsar-bruce" for s in subjects)


def test_without_the_client_certificate_the_broker_refuses(
    pki: Pki, secure_broker: Callable[..., FakeBroker], start_daemon: Callable[..., Daemon]
) -> None:
    context = server_context(pki.server_cert, pki.server_key, client_ca=pki.ca)
    broker = secure_broker(ssl_context=context)
    daemon = start_daemon(broker.url, "--tls-ca-file", str(pki.ca), *FAST)
    send_values(daemon, unique_topic("no-client-cert"), [b"a"])
    refused(daemon, broker, lambda: len(broker.tls_failures()))


def test_a_client_certificate_without_a_token_authenticates_as_tls(
    pki: Pki, secure_broker: Callable[..., FakeBroker], start_daemon: Callable[..., Daemon]
) -> None:
    """Connect names "tls" with empty data, as the Java client's ``AuthenticationTls`` does;
    a broker whose provider is ``AuthenticationProviderTls`` requires it
    (``ServerCnx.handleConnect``)."""
    context = server_context(pki.server_cert, pki.server_key, client_ca=pki.ca)
    broker = secure_broker(ssl_context=context, tls_auth=True)
    daemon = start_daemon(broker.url, "--tls-ca-file", str(pki.ca), *client_certificate(pki), *FAST)
    values = [b"mtls-1", b"mtls-2"]
    send_values(daemon, unique_topic("mtls"), values)
    delivered(daemon, broker, values)
    assert {(c.method, c.data, c.how) for c in broker.credentials()} == {("tls", b"", "connect")}
    assert broker.rejected() == 0


def test_a_tls_auth_broker_refuses_a_connect_that_does_not_name_tls(
    pki: Pki, secure_broker: Callable[..., FakeBroker], start_daemon: Callable[..., Daemon]
) -> None:
    """Without a client certificate the Connect names no method, and the broker's TLS provider
    refuses it with AuthenticationError (the TLS layer here asks for a certificate, optionally)."""
    context = server_context(pki.server_cert, pki.server_key, client_ca=pki.ca)
    context.verify_mode = ssl.CERT_OPTIONAL
    broker = secure_broker(ssl_context=context, tls_auth=True)
    daemon = start_daemon(broker.url, "--tls-ca-file", str(pki.ca), *FAST)
    send_values(daemon, unique_topic("mtls-refused"), [b"a"])
    refused(daemon, broker, broker.rejected)
    assert {c.method for c in broker.credentials()} == {""}
    assert broker.tls_failures() == []  # refused by authentication, not by the handshake
    wait_for(lambda: "AuthenticationError" in daemon.log(), 10, "the refusal logged")


def test_an_unreadable_ca_file_stops_the_daemon_with_one_line(tmp_path: Path) -> None:
    result = run_cli(
        "--service-url", "pulsar+ssl://127.0.0.1:1",
        "--tls-ca-file", str(tmp_path / "missing.pem"),
        "--socket", str(tmp_path / "bruce.sock"),
        "--metrics-listen", "off",
    )  # fmt: skip
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1, result.stderr
    assert "--tls-ca-file" in result.stderr and "missing.pem" in result.stderr
    assert not (tmp_path / "bruce.sock").exists()


# -- token authentication ------------------------------------------------------------------------


def test_the_token_from_a_file_goes_in_connect(
    tmp_path: Path,
    secure_broker: Callable[..., FakeBroker],
    start_daemon: Callable[..., Daemon],
) -> None:
    token_file = tmp_path / "token"
    token_file.write_text("file-token-1\n")  # the trailing newline is not part of the token
    broker = secure_broker(tokens={b"file-token-1"})
    daemon = start_daemon(broker.url, "--auth-token-file", str(token_file), *FAST)
    values = [b"authenticated"]
    send_values(daemon, unique_topic("token"), values)
    delivered(daemon, broker, values)
    credentials = broker.credentials()
    assert credentials and broker.rejected() == 0
    assert {(c.method, c.data, c.how) for c in credentials} == {
        ("token", b"file-token-1", "connect")
    }


def test_a_wrong_token_is_refused_retried_and_a_fixed_file_is_picked_up(
    tmp_path: Path,
    secure_broker: Callable[..., FakeBroker],
    start_daemon: Callable[..., Daemon],
) -> None:
    token_file = tmp_path / "token"
    token_file.write_text("stale-token-zq7\n")
    broker = secure_broker(tokens={b"fresh-token-k2p"})
    daemon = start_daemon(broker.url, "--auth-token-file", str(token_file), *FAST)
    values = [b"after-rotation"]
    send_values(daemon, unique_topic("wrong-token"), values)
    refused(daemon, broker, broker.rejected)
    wait_for(lambda: "AuthenticationError" in daemon.log(), 10, "the refusal logged")
    token_file.write_text("fresh-token-k2p\n")  # rotated: the next connection reads it
    delivered(daemon, broker, values)
    assert "stale-token-zq7" not in daemon.log()
    assert "fresh-token-k2p" not in daemon.log()


def test_challenges_are_answered_with_the_current_token(
    tmp_path: Path,
    secure_broker: Callable[..., FakeBroker],
    start_daemon: Callable[..., Daemon],
) -> None:
    """AuthChallenge in the handshake, and later ("refresh") after the file rotated."""
    token_file = tmp_path / "token"
    token_file.write_text("token-A")
    broker = secure_broker(tokens={b"token-A", b"token-B"}, challenge=True)
    daemon = start_daemon(broker.url, "--auth-token-file", str(token_file), *FAST)
    topic = unique_topic("challenge")
    send_values(daemon, topic, [b"one"])
    delivered(daemon, broker, [b"one"])
    responses = [c for c in broker.credentials() if c.how == "auth_response"]
    assert responses and all((c.method, c.data) == ("token", b"token-A") for c in responses)

    token_file.write_text("token-B\n")
    assert broker.challenge_all() >= 1
    wait_for(
        lambda: ("auth_response", b"token-B") in [(c.how, c.data) for c in broker.credentials()],
        10,
        "a refresh answered with the new token",
    )
    broker.drop_connections()
    send_values(daemon, topic, [b"two"])
    wait_for(lambda: daemon.counters().acked >= 2, 30, "delivery after reconnecting")
    assert broker.values()[-1] == b"two"
    last_connect = [c for c in broker.credentials() if c.how == "connect"][-1]
    assert last_connect.data == b"token-B"
    assert broker.rejected() == 0


# -- secrets never shown ------------------------------------------------------------------------


SECRET = "eyJhbGciOiJIUzI1NiJ9.c2VjcmV0LXN1YmplY3Q.s3cr3t-SIGNATURE-9f8e7d"


def test_the_token_never_appears_in_logs_metrics_or_status(
    pki: Pki,
    monkeypatch: pytest.MonkeyPatch,
    secure_broker: Callable[..., FakeBroker],
    start_daemon: Callable[..., Daemon],
) -> None:
    monkeypatch.setenv("PULSAR_BRUCE_AUTH_TOKEN", SECRET)
    broker = secure_broker(
        ssl_context=server_context(pki.server_cert, pki.server_key),
        tokens={SECRET.encode()},
        challenge=True,
    )
    daemon = start_daemon(broker.url, "--tls-ca-file", str(pki.ca), "--log-level", "debug", *FAST)
    topic = unique_topic("secret")
    send_values(daemon, topic, [b"first"])
    delivered(daemon, broker, [b"first"])
    broker.challenge_all()
    wait_for(lambda: len(broker.credentials()) >= 3, 10, "a refresh answered")
    broker.drop_connections()  # reconnect: Connect and AuthResponse again
    send_values(daemon, topic, [b"second"])
    wait_for(lambda: daemon.counters().acked >= 2, 30, "delivery after reconnecting")
    assert all(c.data == SECRET.encode() for c in broker.credentials())

    log = daemon.log()
    assert "DEBUG" in log  # debug logging really was on
    metrics, status = get(daemon, "/metrics"), get(daemon, "/status")
    assert "pulsar_bruce_acked_total" in metrics and topic in status
    for where, text in (("log", log), ("/metrics", metrics), ("/status", status)):
        for fragment in (SECRET, SECRET[:16], SECRET[-16:]):
            assert fragment not in text, f"the token shows in {where}"

    check = run_cli("--check-config", PULSAR_BRUCE_AUTH_TOKEN=SECRET)
    assert check.returncode == 0, check.stderr
    assert "PULSAR_BRUCE_AUTH_TOKEN (not shown)" in check.stdout
    assert SECRET not in check.stdout + check.stderr


def test_check_config_shows_the_token_file_path_not_the_token(tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    token_file.write_text(SECRET + "\n")
    result = run_cli("--check-config", "--auth-token-file", str(token_file))
    assert result.returncode == 0, result.stderr
    assert f'auth_token_file = "{token_file}"' in result.stdout
    assert SECRET not in result.stdout + result.stderr
    both = run_cli("--check-config", "--auth-token-file", str(token_file),
                   PULSAR_BRUCE_AUTH_TOKEN=SECRET)  # fmt: skip
    assert both.returncode == 2 and both.stderr.count("\n") == 1
    assert SECRET not in both.stdout + both.stderr


def run_cli(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("PULSAR_BRUCE_")}
    environ["PYTHONPATH"] = os.pathsep.join([str(ROOT / "daemon"), str(ROOT / "client_lib")])
    environ.update(env)
    return subprocess.run(
        [sys.executable, "-m", "pulsar_bruce", *args],
        capture_output=True,
        text=True,
        env=environ,
        timeout=60,
        check=False,
    )
