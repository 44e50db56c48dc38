"""Log lines for senders' mistakes: one per reason and minute at most, never per message;
and for rate-limited topics, one per topic and minute at most.

Datagrams that are not messages (malformed, an unknown ApiKey or version, a bad topic,
too large) and messages over a topic's rate limit are counted on the hot path and nothing
more; this reads the counts from a periodic check, so the first such datagram is told
within a check's interval and a flood of them costs one line a minute per reason (per
topic, for the rate limit).
"""

from __future__ import annotations

import base64
from collections.abc import Iterable, Mapping
from typing import Final

from pulsar_bruce import reasons

#: The reasons that say a sender sent something wrong.
SENDER_REASONS: Final = (
    reasons.MALFORMED,
    reasons.UNSUPPORTED_API_KEY,
    reasons.UNSUPPORTED_VERSION,
    reasons.BAD_TOPIC,
    reasons.TOO_LARGE,
)
#: At most one line per reason in this many seconds.
INTERVAL_S: Final = 60.0


class RejectLog:
    """What to log about refused messages since the last look, sans-IO (``now``: seconds)."""

    def __init__(self, now: float, counts: Mapping[str, int]):
        self._logged = {reason: counts.get(reason, 0) for reason in SENDER_REASONS}
        self._since = dict.fromkeys(SENDER_REASONS, now)
        self._next = dict.fromkeys(SENDER_REASONS, now)

    def lines(
        self, now: float, counts: Mapping[str, int], samples: Iterable[tuple[str, bytes]]
    ) -> list[str]:
        """One line per reason whose count grew, unless its line is due later; ``samples``:
        the recent refusals (reason, first bytes), oldest first, for the newest's bytes."""
        newest = dict(samples)
        out = []
        for reason in SENDER_REASONS:
            grown = counts.get(reason, 0) - self._logged[reason]
            if grown <= 0 or now < self._next[reason]:
                continue
            line = (
                f"discarded {grown} message{'s' if grown != 1 else ''} as {reason} in the last "
                f"{now - self._since[reason]:.0f} s (a sender's mistake; one line per minute "
                f"at most, all counted in pulsar_bruce_discarded_total)"
            )
            if reason in newest:
                line += f"; newest sample, first bytes in base64: {_b64(newest[reason])}"
            out.append(line)
            self._logged[reason] += grown
            self._since[reason] = now
            self._next[reason] = now + INTERVAL_S
        return out


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


class RateLimitLog:
    """What to log about ``rate_limited`` discards since the last look, per topic, sans-IO.

    The intake only counts them (per topic, as ``pulsar_bruce_topic_discarded``); this reads
    the counts from the same periodic check as :class:`RejectLog`, so a limited topic is told
    within a check's interval and then in one line a minute at most, however many it refuses.
    """

    def __init__(self, now: float, counts: Mapping[str, int]):
        self._logged = dict(counts)
        self._start = now
        self._since: dict[str, float] = {}
        self._next: dict[str, float] = {}

    def lines(self, now: float, counts: Mapping[str, int], limits: Mapping[str, str]) -> list[str]:
        """One line per topic whose count grew, unless its line is due later. ``counts``:
        each topic's rate_limited count; ``limits``: its limit in words (``100 per 1 s``)."""
        out = []
        for topic, count in counts.items():
            grown = count - self._logged.get(topic, 0)
            if grown <= 0 or now < self._next.get(topic, 0.0):
                continue
            since = self._since.get(topic, self._start)
            limit = limits.get(topic)
            rule = f" (its rate limit: {limit})" if limit else ""
            out.append(
                f"topic {topic}: discarded {grown} message{'s' if grown != 1 else ''} as "
                f"rate_limited in the last {now - since:.0f} s{rule}; one line per topic and "
                "minute at most, all counted in pulsar_bruce_discarded_total"
            )
            self._logged[topic] = count
            self._since[topic] = now
            self._next[topic] = now + INTERVAL_S
        return out
