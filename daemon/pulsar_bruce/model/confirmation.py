"""Delivery confirmations for the stream socket, sans-IO.

A stream connection's records between two flush requests form one
:class:`Confirmation`.  Each message carries a reference to it through
routing, batching and sending (batches keep run-length ``tags``); when the
broker acks a batch or the daemon discards it, the confirmation is settled for
those messages.  A flush is answered when its confirmation, and every earlier
one of the same connection, has nothing outstanding.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from pulsar_bruce.native import pick


class Confirmation:
    """Outcome counters of the messages a stream connection sent before one flush."""

    __slots__ = ("acked", "discarded", "on_settled", "outstanding", "request_id")

    def __init__(self, on_settled: Callable[[], None]):
        self.outstanding = 0
        self.acked = 0
        self.discarded: dict[str, int] = {}
        #: Set when the flush request closing this confirmation arrives.
        self.request_id: int | None = None
        self.on_settled = on_settled

    def settle(self, count: int, reason: str | None = None) -> None:
        """``count`` messages reached their outcome: acked (``reason`` None) or discarded."""
        self.outstanding -= count
        if reason is None:
            self.acked += count
        else:
            self.discarded[reason] = self.discarded.get(reason, 0) + count
        if self.outstanding == 0 and self.request_id is not None:
            self.on_settled()

    def discard(self, reason: str) -> None:
        """A record refused at the door (never outstanding)."""
        self.discarded[reason] = self.discarded.get(reason, 0) + 1


class _PyTagRun:
    """``count`` consecutive messages of a batch that belong to ``tag`` (None: a datagram):
    the pure-Python twin of ``native._intake.TagRun``, whose runs the compiled admitter
    extends itself."""

    __slots__ = ("count", "tag")

    def __init__(self, tag: Confirmation | None, count: int = 1):
        self.tag = tag
        self.count = count


if TYPE_CHECKING:
    from pulsar_bruce.native import TagRun as TagRun
else:
    TagRun = pick("TagRun", _PyTagRun)


def add_tag(tags: list[TagRun], tag: Confirmation | None) -> None:
    """Record one more message (the last appended) under ``tag``."""
    if tags and tags[-1].tag is tag:
        tags[-1].count += 1
    else:
        tags.append(TagRun(tag))


def settle_tags(tags: list[TagRun], reason: str | None) -> None:
    for run in tags:
        if run.tag is not None:
            run.tag.settle(run.count, reason)


def split_tags(tags: list[TagRun], first_count: int) -> tuple[list[TagRun], list[TagRun]]:
    """Tags of the first ``first_count`` messages, and of the rest."""
    first: list[TagRun] = []
    rest: list[TagRun] = []
    remaining = first_count
    for run in tags:
        take = min(remaining, run.count)
        if take:
            first.append(TagRun(run.tag, take))
            remaining -= take
        if run.count - take:
            rest.append(TagRun(run.tag, run.count - take))
    return first, rest
