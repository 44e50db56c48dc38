"""Repeated warnings are rate-limited; the rest of the log is untouched."""

from __future__ import annotations

import logging

from pulsar_bruce.service.logs import RepeatFilter


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def record(message: str, level: int = logging.WARNING, name: str = "x") -> logging.LogRecord:
    return logging.LogRecord(name, level, __file__, 1, message, None, None)


def test_burst_then_suppressed_then_summarised() -> None:
    clock = Clock()
    repeat = RepeatFilter(burst=3, interval_s=60, clock=clock)
    passed = [repeat.filter(record("broker %s down")) for _ in range(10)]
    assert passed == [True] * 3 + [False] * 7
    clock.now = 61
    again = record("broker %s down")
    assert repeat.filter(again)
    assert again.msg == "broker %s down (7 similar messages suppressed)"


def test_different_messages_and_info_lines_are_independent() -> None:
    repeat = RepeatFilter(burst=1, interval_s=60, clock=Clock())
    assert repeat.filter(record("a"))
    assert not repeat.filter(record("a"))
    assert repeat.filter(record("b"))
    assert repeat.filter(record("a", name="other"))
    assert all(repeat.filter(record("a", level=logging.INFO)) for _ in range(5))
