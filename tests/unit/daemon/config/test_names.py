"""Producer names: one per daemon, so that broker deduplication never mixes two daemons."""

from __future__ import annotations

import hashlib

import pytest
from pulsar_bruce.config import names
from pulsar_bruce.config.names import stable_producer_name

SOCKET = "/run/bruce/bruce.sock"
DIGEST = hashlib.sha1(SOCKET.encode(), usedforsecurity=False).hexdigest()[:6]


@pytest.fixture(autouse=True)
def host(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(names.socket, "gethostname", lambda: "web-7")


def test_a_configured_prefix_gets_the_host_and_socket_hash() -> None:
    assert stable_producer_name("edge", SOCKET) == f"edge-web-7-{DIGEST}"


def test_two_hosts_with_one_configuration_get_different_names(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    first = stable_producer_name("edge", SOCKET)
    monkeypatch.setattr(names.socket, "gethostname", lambda: "web-8")
    assert stable_producer_name("edge", SOCKET) != first


def test_two_daemons_on_one_host_differ_by_socket() -> None:
    assert stable_producer_name("edge", SOCKET) != stable_producer_name("edge", "/tmp/b.sock")


def test_auto_and_empty() -> None:
    assert stable_producer_name("auto", SOCKET) == f"pulsar-bruce-web-7-{DIGEST}"
    assert stable_producer_name("", SOCKET) is None
