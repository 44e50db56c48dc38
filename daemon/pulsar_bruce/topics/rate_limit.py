"""Per-topic rate limits at the edge: a timer per limited topic starts each new interval.

The intake only reads and decrements ``Topic.rate_budget`` (no clock per
message); :class:`~pulsar_bruce.route.topic_settings.TopicConfigurator` sets
and refills the budget; this class owns the timers that call the refill.
"""

from __future__ import annotations

import asyncio

from pulsar_bruce.route.topic import Topic
from pulsar_bruce.route.topic_settings import TopicConfigurator


class RateLimiter:
    """One refill timer per rate-limited topic."""

    def __init__(self, settings: TopicConfigurator):
        #: What refills a topic's budget from its settings.
        self.settings = settings
        self._timers: dict[str, asyncio.TimerHandle] = {}

    def schedule(self, topic: Topic, interval_s: float | None) -> None:
        """Refill ``topic``'s budget every ``interval_s`` from now on (None: not limited)."""
        timer = self._timers.pop(topic.name, None)
        if timer is not None:
            timer.cancel()
        if interval_s is None:
            return

        def refill() -> None:
            self.settings.refill(topic)
            self.schedule(topic, interval_s)

        self._timers[topic.name] = asyncio.get_running_loop().call_later(interval_s, refill)

    def stop(self) -> None:
        for timer in self._timers.values():
            timer.cancel()
        self._timers.clear()
