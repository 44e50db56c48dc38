"""Plain counters the hot path bumps; exported to Prometheus only at scrape time."""

from __future__ import annotations

from pulsar_bruce import reasons


class TopicStats:
    """Per-topic outcome counters."""

    __slots__ = ("acked", "discarded")

    def __init__(self) -> None:
        self.acked = 0
        self.discarded: dict[str, int] = {}

    def discard(self, reason: str, count: int) -> None:
        self.discarded[reason] = self.discarded.get(reason, 0) + count


class Stats:
    """Daemon-wide counters.

    The accounting identity holds whenever no datagram is mid-flight:
    ``received == acked + sum(discarded.values()) + buffered_messages``.
    """

    __slots__ = (
        "acked",
        "batches_sent",
        "buffered_bytes",
        "buffered_messages",
        "discarded",
        "possible_duplicates",
        "received",
        "spool_bytes",
        "spool_corrupt_records",
        "spooled_messages",
    )

    def __init__(self) -> None:
        self.received = 0
        self.acked = 0
        self.buffered_messages = 0
        self.buffered_bytes = 0
        self.possible_duplicates = 0
        self.batches_sent = 0
        #: Messages this process wrote to the disk spool and has not replayed yet.
        self.spooled_messages = 0
        self.spool_bytes = 0
        self.spool_corrupt_records = 0
        self.discarded: dict[str, int] = dict.fromkeys(reasons.ALL, 0)

    def discard(self, reason: str, count: int = 1) -> None:
        self.discarded[reason] = self.discarded.get(reason, 0) + count

    def identity_holds(self) -> bool:
        return self.received == self.acked + sum(self.discarded.values()) + self.buffered_messages
