"""Senders' mistakes are logged at most once per reason and minute, from counts."""

from __future__ import annotations

from pulsar_bruce.metrics.reject_log import INTERVAL_S, RateLimitLog, RejectLog


def test_the_first_mistake_is_told_at_the_next_look_then_at_most_once_a_minute() -> None:
    counts = {"malformed": 0, "bad_topic": 2, "buffer_full": 0}
    log = RejectLog(100.0, counts)  # bad_topic 2: before this run's log, not told again
    assert log.lines(101.0, counts, []) == []
    counts["malformed"] = 1
    [line] = log.lines(102.0, counts, [("malformed", b"\x00\x00\x00\x20junk")])
    assert line.startswith("discarded 1 message as malformed in the last 2 s")
    assert line.endswith("newest sample, first bytes in base64: AAAAIGp1bms=")
    counts["malformed"] = 5000
    counts["buffer_full"] = 7  # not a sender's mistake: not this log's
    assert log.lines(103.0, counts, []) == []  # within the minute: counted, not logged
    assert log.lines(102.0 + INTERVAL_S - 1, counts, []) == []
    [line] = log.lines(102.0 + INTERVAL_S, counts, [])
    assert line.startswith(f"discarded 4999 messages as malformed in the last {INTERVAL_S:.0f} s")
    counts["bad_topic"] = 3
    [line] = log.lines(102.0 + INTERVAL_S + 1, counts, [])  # each reason has its own minute
    assert "1 message as bad_topic" in line


def test_rate_limited_topics_are_told_in_one_line_per_topic_and_minute() -> None:
    counts = {"persistent://public/default/old": 4}
    log = RateLimitLog(100.0, counts)  # before this run's log: not told again
    limits = {"persistent://public/default/clicks": "rate_limit_messages 10 per 1 s"}
    assert log.lines(101.0, counts, limits) == []
    counts["persistent://public/default/clicks"] = 15
    [line] = log.lines(102.0, counts, limits)
    assert line == (
        "topic persistent://public/default/clicks: discarded 15 messages as rate_limited in "
        "the last 2 s (its rate limit: rate_limit_messages 10 per 1 s); one line per topic and "
        "minute at most, all counted in pulsar_bruce_discarded_total"
    )
    counts["persistent://public/default/clicks"] = 90_000
    assert log.lines(103.0, counts, limits) == []  # within its minute: counted, not logged
    counts["persistent://public/default/other"] = 1  # another topic has its own minute
    [line] = log.lines(104.0, counts, limits)
    assert line.startswith("topic persistent://public/default/other: discarded 1 message as ")
    assert "its rate limit" not in line  # its limit is not known (any more): not guessed
    [line] = log.lines(102.0 + INTERVAL_S, counts, limits)
    assert "clicks: discarded 89985 messages as rate_limited in the last 60 s" in line
