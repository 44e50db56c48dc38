"""Logging for a system service: one line per event on stderr, repeated warnings rate-limited.

journald adds its own timestamps; in a terminal the time is in the line.  A
broker that is down makes the same warning repeat for every producer and
every retry; :class:`RepeatFilter` lets the first few through per interval and
then says how many were suppressed.
"""

from __future__ import annotations

import logging
import os
import sys
import time
from collections.abc import Callable


class RepeatFilter(logging.Filter):
    """At most ``burst`` records per (logger, message template) per ``interval_s``."""

    def __init__(
        self,
        burst: int = 5,
        interval_s: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
    ):
        super().__init__()
        self.burst = burst
        self.interval_s = interval_s
        self._clock = clock
        #: key -> [window start, records let through in it, records suppressed]
        self._windows: dict[tuple[str, str], list[float]] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno < logging.WARNING:
            return True
        key = (record.name, str(record.msg))
        now = self._clock()
        window = self._windows.get(key)
        if window is None or now - window[0] >= self.interval_s:
            suppressed = int(window[2]) if window else 0
            self._windows[key] = [now, 1, 0]
            if len(self._windows) > 10_000:
                self._windows = {key: self._windows[key]}
            if suppressed:
                record.msg = f"{record.msg} ({suppressed} similar messages suppressed)"
            return True
        if window[1] < self.burst:
            window[1] += 1
            return True
        window[2] += 1
        return False


def setup_logging(level: int) -> None:
    """stderr, one line per event; no timestamp of our own under journald."""
    under_journald = "JOURNAL_STREAM" in os.environ
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(
        logging.Formatter(
            "%(levelname)s %(name)s: %(message)s"
            if under_journald
            else "%(asctime)s %(levelname)s %(name)s: %(message)s"
        )
    )
    handler.addFilter(RepeatFilter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
