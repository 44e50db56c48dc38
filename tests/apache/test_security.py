"""Token authentication, authorization, TLS and mutual TLS on Apache Pulsar itself.

Each test runs a Java broker of its own with the security settings under test
(``start_apache``), the real daemon against it, and reads back with the official
client, authenticated and over TLS as the broker demands.  JWTs are made here
with the standard library (HS256: HMAC-SHA256 over base64url JSON), so any
role's token, and a forged one, is one function call.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.support.apache_pulsar import ApachePulsar
from tests.support.consume import consume
from tests.support.pki import Pki, make_pki
from tests.support.processes import Counters, Daemon, free_port, port_open, wait_for

pytestmark = [pytest.mark.apache, pytest.mark.timeout(120)]

FAST = ("--batch-max-delay-ms", "5")
#: A send timeout far beyond the bounds the tests wait: a discard within those bounds
#: is the daemon's decision, not the send timeout's.
LONG_SEND_TIMEOUT = ("--send-timeout-s", "120")
#: How long a refusal may take to be counted (the lookup and the producer are refused at once).
PROMPT_S = 20.0
BROKER_AUTH = "org.apache.pulsar.broker.authentication"
CLIENT_AUTH = "org.apache.pulsar.client.impl.auth"


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def jwt(role: str, key: bytes) -> str:
    """An HS256 JWT with ``sub`` = ``role``, as ``pulsar tokens create --secret-key`` makes."""
    header = b64url(json.dumps({"alg": "HS256"}).encode())
    claims = b64url(json.dumps({"sub": role}).encode())
    signature = hmac.new(key, f"{header}.{claims}".encode(), hashlib.sha256).digest()
    return f"{header}.{claims}.{b64url(signature)}"


def token_config(key: bytes, admin_token: str) -> dict[str, str]:
    """Token authentication (HS256 with ``key``) and authorization; ``admin`` is the superuser,
    and the broker's own clients (and the admin helper) use ``admin_token``."""
    return {
        "authenticationEnabled": "true",
        "authenticationProviders": f"{BROKER_AUTH}.AuthenticationProviderToken",
        "tokenSecretKey": "data:;base64," + base64.b64encode(key).decode(),
        "authorizationEnabled": "true",
        "superUserRoles": "admin",
        "brokerClientAuthenticationPlugin": f"{CLIENT_AUTH}.AuthenticationToken",
        "brokerClientAuthenticationParameters": f"token:{admin_token}",
    }


def tls_config(pki: Pki, require_client_cert: bool) -> dict[str, str]:
    """TLS ports beside the plain ones (the admin helper and the broker's own clients stay on
    those), the server certificate for 127.0.0.1, and the CA that client certificates need."""
    return {
        "brokerServicePortTls": str(free_port()),
        "webServicePortTls": str(free_port()),
        "tlsCertificateFilePath": str(pki.server_cert),
        "tlsKeyFilePath": str(pki.server_key),
        "tlsTrustCertsFilePath": str(pki.ca),
        "tlsRequireTrustedClientCertOnConnect": "true" if require_client_cert else "false",
    }


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


def send_values(daemon: Daemon, topic: str, values: list[bytes]) -> None:
    with daemon.sender() as sender:
        for value in values:
            sender.send(topic, value)


def settled(daemon: Daemon, received: int, timeout: float = PROMPT_S) -> Counters:
    counters = daemon.wait_settled(received, timeout=timeout)
    assert counters.identity_holds(), counters
    return counters


def discards(counters: Counters) -> dict[str, int]:
    return {reason: n for reason, n in counters.discarded.items() if n}


def refused_and_kept(daemon: Daemon, sent: int, refusal: str) -> Counters:
    """The broker refuses the connection, the daemon keeps retrying (the token file may be
    rotated, the certificate fixed): wait for 3 logged refusals, then every message is counted
    as received and still buffered, none acked, none lost from the accounting."""
    wait_for(lambda: len(lines_with(daemon.log(), refusal)) >= 3, 30, f"3 refusals ({refusal})")
    counters = daemon.counters()
    assert counters.received == counters.buffered == sent, counters
    assert counters.acked == 0 and counters.identity_holds(), counters
    return counters


def lines_with(log: str, *needles: str) -> list[str]:
    return [line for line in log.splitlines() if all(needle in line for needle in needles)]


def assert_no_traceback(daemon: Daemon) -> None:
    daemon.check_alive()
    log = daemon.log()
    assert "Traceback" not in log, log[-3000:]


# -- token authentication and authorization ---------------------------------------------------


def start_token_broker(
    start_apache: Callable[..., ApachePulsar],
) -> tuple[ApachePulsar, bytes]:
    key = os.urandom(32)
    return start_apache(token_config(key, jwt("admin", key))), key


def token_file(directory: Path, token: str) -> str:
    path = directory / f"token-{uuid.uuid4().hex[:6]}"
    path.write_text(token + "\n")
    path.chmod(0o600)
    return str(path)


def token_auth(token: str) -> Any:
    import pulsar

    return pulsar.AuthenticationToken(token)


def test_a_granted_namespace_flows_and_a_forbidden_one_is_rejected_promptly(
    tmp_path: Path, start_apache: Callable[..., ApachePulsar], start_daemon: Callable[..., Daemon]
) -> None:
    apache, key = start_token_broker(start_apache)
    tenant = unique("sec")
    apache.admin.create_tenant(tenant)
    apache.admin.create_namespace(f"{tenant}/open")
    apache.admin.create_namespace(f"{tenant}/closed")
    apache.admin.grant(f"{tenant}/open", "writer", ["produce"])
    allowed = f"persistent://{tenant}/open/{unique('ok')}"
    forbidden = f"persistent://{tenant}/closed/{unique('no')}"
    writer = jwt("writer", key)
    daemon = start_daemon(
        apache.url, "--auth-token-file", token_file(tmp_path, writer), *FAST, *LONG_SEND_TIMEOUT
    )

    # Interleaved: the refusal of one topic does not hold up the other.
    first = [(b"ok-a%d" % i, b"no-a%d" % i) for i in range(20)]
    with daemon.sender() as sender:
        for ok, no in first:
            sender.send(allowed, ok)
            sender.send(forbidden, no)
    counters = settled(daemon, 40)
    assert (counters.acked, discards(counters)) == (20, {"broker_rejected": 20}), counters

    # Refused for good: new messages for it are discarded at once, the other keeps flowing.
    second = [(b"ok-b%d" % i, b"no-b%d" % i) for i in range(20)]
    with daemon.sender() as sender:
        for ok, no in second:
            sender.send(forbidden, no)
            sender.send(allowed, ok)
    counters = settled(daemon, 80)
    assert (counters.acked, discards(counters)) == (40, {"broker_rejected": 40}), counters

    admin = {"authentication": token_auth(jwt("admin", key))}
    values = [m.value for m in consume(apache.url, allowed, 40, **admin)]
    assert sorted(values) == sorted(ok for ok, _ in first + second)
    topics = apache.admin.get_json(f"/admin/v2/persistent/{tenant}/closed")
    assert forbidden not in topics  # refused at lookup: never created

    # One line says why and what it cost (later retries repeat the reason, rate-limited).
    refusals = lines_with(daemon.log(), forbidden, "AuthorizationError")
    assert refusals, daemon.log()[-3000:]
    assert "waiting messages discarded as broker_rejected" in refusals[0], refusals[0]
    assert not lines_with(daemon.log(), allowed, "Error")
    assert_no_traceback(daemon)
    assert writer not in daemon.log()


def test_a_token_with_a_wrong_signature_is_refused_counted_and_a_fixed_one_picked_up(
    tmp_path: Path, start_apache: Callable[..., ApachePulsar], start_daemon: Callable[..., Daemon]
) -> None:
    apache, key = start_token_broker(start_apache)
    forged = jwt("admin", os.urandom(32))  # the superuser's name, signed with another key
    path = token_file(tmp_path, forged)
    daemon = start_daemon(apache.url, "--auth-token-file", path, *FAST)
    topic = f"persistent://public/default/{unique('forged')}"
    values = [b"held-%d" % i for i in range(10)]
    send_values(daemon, topic, values)
    refused_and_kept(daemon, 10, "AuthenticationError")
    [first, *_] = lines_with(daemon.log(), "AuthenticationError")
    assert topic in first, first
    assert_no_traceback(daemon)

    admin = jwt("admin", key)
    Path(path).write_text(admin + "\n")  # fixed: the next connection reads it
    counters = settled(daemon, 10)
    assert (counters.acked, discards(counters)) == (10, {}), counters
    received = consume(apache.url, topic, 10, authentication=token_auth(admin))
    assert sorted(m.value for m in received) == sorted(values)
    assert forged not in daemon.log() and admin not in daemon.log()
    assert_no_traceback(daemon)


# -- TLS and mutual TLS -----------------------------------------------------------------------


def start_tls_broker(
    start_apache: Callable[..., ApachePulsar], pki: Pki, require_client_cert: bool
) -> ApachePulsar:
    apache = start_apache(tls_config(pki, require_client_cert))
    port = int(apache.settings["brokerServicePortTls"])
    wait_for(lambda: port_open(port), 30, "the TLS listener")
    return apache


def client_certificate(pki: Pki) -> tuple[str, ...]:
    return ("--tls-cert-file", str(pki.client_cert), "--tls-key-file", str(pki.client_key))


def tls_client(pki: Pki, with_certificate: bool) -> dict[str, Any]:
    import pulsar

    options: dict[str, Any] = {
        "tls_trust_certs_file_path": str(pki.ca),
        "tls_validate_hostname": True,
    }
    if with_certificate:
        options["authentication"] = pulsar.AuthenticationTLS(
            str(pki.client_cert), str(pki.client_key)
        )
    return options


def assert_over_tls(daemon: Daemon) -> None:
    """Lookups answered with the TLS URL, and the daemon went there (not to the plain port)."""
    log = daemon.log()
    assert "connected to pulsar+ssl://" in log and "connected to pulsar://" not in log, log


def test_tls_listener_with_the_ca_file(
    pki: Pki, start_apache: Callable[..., ApachePulsar], start_daemon: Callable[..., Daemon]
) -> None:
    apache = start_tls_broker(start_apache, pki, require_client_cert=False)
    assert apache.tls_url.startswith("pulsar+ssl://127.0.0.1:")
    daemon = start_daemon(apache.tls_url, "--tls-ca-file", str(pki.ca), *FAST)
    topic = f"persistent://public/default/{unique('tls')}"
    values = [b"over-tls-%d" % i for i in range(30)]
    send_values(daemon, topic, values)
    counters = settled(daemon, len(values), timeout=60)
    assert counters.acked == len(values), counters
    received = consume(apache.tls_url, topic, len(values), **tls_client(pki, False))
    assert sorted(m.value for m in received) == sorted(values)
    assert_over_tls(daemon)
    assert_no_traceback(daemon)


def test_mutual_tls_presents_the_client_certificate_and_without_one_is_refused(
    pki: Pki, start_apache: Callable[..., ApachePulsar], start_daemon: Callable[..., Daemon]
) -> None:
    apache = start_tls_broker(start_apache, pki, require_client_cert=True)
    with_cert = start_daemon(
        apache.tls_url, "--tls-ca-file", str(pki.ca), *client_certificate(pki), *FAST
    )
    without = start_daemon(apache.tls_url, "--tls-ca-file", str(pki.ca), *FAST)
    topic = f"persistent://public/default/{unique('mtls')}"
    refused_topic = f"persistent://public/default/{unique('mtls-no-cert')}"
    values = [b"mtls-%d" % i for i in range(30)]
    send_values(without, refused_topic, [b"refused-%d" % i for i in range(5)])
    send_values(with_cert, topic, values)

    counters = settled(with_cert, len(values), timeout=60)
    assert counters.acked == len(values), counters
    received = consume(apache.tls_url, topic, len(values), **tls_client(pki, True))
    assert sorted(m.value for m in received) == sorted(values)

    # Refused in the TLS handshake (TLS 1.3: the broker's alert comes after the client's
    # Finished); the daemon keeps the messages and retries.
    refused_and_kept(without, 5, "certificate required")
    assert_no_traceback(without)
    assert_over_tls(with_cert)
    assert_no_traceback(with_cert)
    assert apache.process is not None and apache.process.poll() is None
