"""Reconnect backoff: 100 ms doubling to a 60 s cap, jitter within bounds, reset."""

from __future__ import annotations

import random

import pytest
from pulsar_bruce.producer.backoff import Backoff

# Without jitter: 0.1, 0.2, 0.4, ... 51.2, then capped at 60.
NOMINAL = [0.1 * 2**i for i in range(10)] + [60.0] * 5


class ZeroRandom(random.Random):
    """random() == 0: no jitter taken off."""

    def random(self) -> float:
        return 0.0


class AlmostOneRandom(random.Random):
    """random() just below 1: the most jitter taken off."""

    def random(self) -> float:
        return 1.0 - 2**-53


def test_defaults_are_100_ms_doubling_to_60_s() -> None:
    backoff = Backoff()
    assert (backoff.initial_s, backoff.maximum_s) == (0.1, 60.0)


def test_without_randomness_delays_double_up_to_the_cap() -> None:
    backoff = Backoff(rng=ZeroRandom())
    delays = [backoff.next_delay() for _ in NOMINAL]
    assert delays == pytest.approx(NOMINAL)


def test_cap_is_reached_after_ten_attempts_and_stays() -> None:
    backoff = Backoff(rng=ZeroRandom())
    delays = [backoff.next_delay() for _ in range(100)]
    assert delays[9] == pytest.approx(51.2)
    assert all(d == 60.0 for d in delays[10:])


def test_zero_jitter_gives_the_nominal_delays() -> None:
    backoff = Backoff(jitter=0.0, rng=random.Random(1))
    assert [backoff.next_delay() for _ in NOMINAL] == pytest.approx(NOMINAL)


@pytest.mark.parametrize("seed", [0, 1, 42, 2024])
def test_jitter_stays_within_bounds(seed: int) -> None:
    backoff = Backoff(rng=random.Random(seed))
    for nominal in NOMINAL:
        delay = backoff.next_delay()
        assert nominal * 0.8 <= delay <= nominal


def test_jitter_never_exceeds_the_cap() -> None:
    backoff = Backoff(rng=random.Random(7))
    assert max(backoff.next_delay() for _ in range(1000)) <= 60.0


def test_largest_jitter_takes_off_at_most_a_fifth() -> None:
    backoff = Backoff(rng=AlmostOneRandom())
    delays = [backoff.next_delay() for _ in NOMINAL]
    for nominal, delay in zip(NOMINAL, delays, strict=True):
        assert delay == pytest.approx(nominal * 0.8)


def test_jitter_is_reproducible_with_a_seeded_rng() -> None:
    first = Backoff(rng=random.Random(99))
    second = Backoff(rng=random.Random(99))
    assert [first.next_delay() for _ in range(20)] == [second.next_delay() for _ in range(20)]


def test_jitter_varies_the_delays() -> None:
    backoff = Backoff(rng=random.Random(3))
    # Many attempts at the cap: jitter gives different delays.
    for _ in range(10):
        backoff.next_delay()
    assert len({backoff.next_delay() for _ in range(20)}) > 1


def test_reset_starts_again_at_100_ms() -> None:
    backoff = Backoff(rng=ZeroRandom())
    for _ in range(20):
        backoff.next_delay()
    backoff.reset()
    assert backoff.next_delay() == pytest.approx(0.1)
    assert backoff.next_delay() == pytest.approx(0.2)


def test_reset_before_any_attempt_changes_nothing() -> None:
    backoff = Backoff(rng=ZeroRandom())
    backoff.reset()
    assert backoff.next_delay() == pytest.approx(0.1)


def test_custom_initial_and_maximum() -> None:
    backoff = Backoff(initial_s=1.0, maximum_s=5.0, rng=ZeroRandom())
    assert [backoff.next_delay() for _ in range(5)] == [1.0, 2.0, 4.0, 5.0, 5.0]
