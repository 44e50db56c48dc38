"""Exponential reconnect backoff with jitter (100 ms doubling to 60 s), sans-IO."""

from __future__ import annotations

import random


class Backoff:
    """Delays for successive reconnect attempts; :meth:`reset` after a success."""

    def __init__(
        self,
        initial_s: float = 0.1,
        maximum_s: float = 60.0,
        jitter: float = 0.2,
        rng: random.Random | None = None,
    ):
        self.initial_s = initial_s
        self.maximum_s = maximum_s
        self.jitter = jitter
        self._next = initial_s
        self._rng = rng or random.Random()

    def next_delay(self) -> float:
        """The delay before the next attempt: doubling, capped, minus up to ``jitter``."""
        delay = self._next
        self._next = min(self._next * 2, self.maximum_s)
        return delay * (1.0 - self.jitter * self._rng.random())

    def reset(self) -> None:
        self._next = self.initial_s
