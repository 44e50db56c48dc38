"""The metrics address warning (the socket files' security: test_unix_sockets.py)."""

from __future__ import annotations

import pytest
from pulsar_bruce.connection.security import is_loopback, metrics_exposure_warning

# -- metrics address ------------------------------------------------------------------------------


@pytest.mark.parametrize("host", ["127.0.0.1", "127.0.0.2", "::1", "localhost", "LOCALHOST"])
def test_loopback_addresses(host: str) -> None:
    assert is_loopback(host)
    assert metrics_exposure_warning((host, 9090)) is None


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "", "10.1.2.3", "192.168.0.1"])
def test_non_loopback_addresses_warn(host: str) -> None:
    assert not is_loopback(host)
    warning = metrics_exposure_warning((host, 9090))
    assert warning is not None
    assert warning.startswith("metrics and status are reachable from the network")


def test_metrics_off_is_no_exposure() -> None:
    assert metrics_exposure_warning(None) is None
