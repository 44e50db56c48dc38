"""ServiceHosts: every host once per lookup, in turn, and a refusing host set aside a while.

The quarantine follows the Java client's ``PulsarServiceNameResolver.markHostAvailability``
(set aside on a failure, for longer after each failure once its time was up, cleared by a
success); unlike it, a host set aside is still asked, last.
"""

from __future__ import annotations

import pytest
from pulsar_bruce.connection.service_hosts import FIRST_ASIDE_S, MAX_ASIDE_S, ServiceHosts

from tests.support.fakes_asyncio import FakeClock

A, B, C = ("a", 6650), ("b", 6650), ("c", 6650)


def test_each_order_holds_every_host_once_starting_in_turn() -> None:
    hosts = ServiceHosts([A, B, C], FakeClock())
    assert [hosts.order() for _ in range(4)] == [[A, B, C], [B, C, A], [C, A, B], [A, B, C]]


def test_a_refusing_host_goes_last_until_its_time_is_up() -> None:
    clock = FakeClock()
    hosts = ServiceHosts([A, B, C], clock)
    hosts.refused(A)
    assert [hosts.order() for _ in range(3)] == [[B, C, A], [B, C, A], [C, B, A]]
    clock.advance(FIRST_ASIDE_S)
    assert not hosts.is_aside(A)
    assert hosts.order() == [A, B, C]


def test_set_aside_longer_after_each_refusal_once_back_and_cleared_by_an_answer() -> None:
    clock = FakeClock()
    hosts = ServiceHosts([A, B], clock)
    durations = []
    for _ in range(10):
        hosts.refused(A)
        start = clock.now
        while hosts.is_aside(A):
            clock.advance(0.5)
        durations.append(clock.now - start)
    assert durations[:3] == [FIRST_ASIDE_S, 2 * FIRST_ASIDE_S, 4 * FIRST_ASIDE_S]
    assert max(durations) == MAX_ASIDE_S
    hosts.answered(A)
    hosts.refused(A)
    clock.advance(FIRST_ASIDE_S)
    assert not hosts.is_aside(A)  # started over


def test_refusals_while_set_aside_count_once() -> None:
    """Concurrent lookups that shared one refused attempt each report it."""
    clock = FakeClock()
    hosts = ServiceHosts([A, B], clock)
    for _ in range(8):
        hosts.refused(A)
    clock.advance(FIRST_ASIDE_S)
    assert not hosts.is_aside(A)


def test_with_every_host_set_aside_the_one_back_soonest_goes_first() -> None:
    clock = FakeClock()
    hosts = ServiceHosts([A, B, C], clock)
    hosts.refused(B)
    clock.advance(0.5)
    hosts.refused(A)
    hosts.refused(C)
    assert hosts.order() == [B, A, C]


def test_a_service_url_has_a_host() -> None:
    with pytest.raises(ValueError, match="at least one host"):
        ServiceHosts([], FakeClock())
