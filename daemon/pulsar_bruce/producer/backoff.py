"""Exponential reconnect backoff with jitter, sans-IO.

:class:`Retry` keeps two: a short one while the cluster answers (a topic being
loaded or moved, ``ServiceNotReady``, an owner that a lookup named but that is
gone: the cluster is about to hand its bundles over), and one that grows to
:data:`SILENT_MAX_S` only while nothing answers at all.  The Java client backs
off to 60 s in both cases (``ConnectionHandler.reconnectLater``); a forwarder
should be back within a second of the cluster, so it waits less.
"""

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


#: The longest wait between attempts while a broker answers (but not yet with a producer).
ANSWERED_MAX_S = 1.0
#: The longest wait between attempts while no broker answers at all.
SILENT_MAX_S = 10.0


class Retry:
    """The delays between attempts to reach a topic; :meth:`reset` after a success."""

    def __init__(self, rng: random.Random | None = None):
        self._answered = Backoff(maximum_s=ANSWERED_MAX_S, rng=rng)
        self._silent = Backoff(maximum_s=SILENT_MAX_S, rng=rng)

    def next_delay(self, answered: bool) -> float:
        """The delay after a failed attempt; ``answered``: the cluster answered it."""
        return (self._answered if answered else self._silent).next_delay()

    def reset(self) -> None:
        self._answered.reset()
        self._silent.reset()
