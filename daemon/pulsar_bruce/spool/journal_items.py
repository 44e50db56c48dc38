"""What the write-ahead journal (``journal.py``) keeps of each thing it journals.

A batch (open or sealed) has a :class:`JournalEntry`, which the journal keeps
keyed by the batch: no other object carries journal state.  The messages of a
topic that wait for its partition count are one :class:`WaitGroup`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from pulsar_bruce.model.batch import SealedBatch
from pulsar_bruce.producer.partition_producer import PartitionProducer


@dataclass(slots=True, eq=False)
class JournalEntry:
    """What the journal holds of one batch (open or sealed) or one wait group."""

    #: The batch's number in the journal's records (unique across restarts).
    item: int
    #: Where its messages go: the topic senders named and the partition.
    topic: bytes
    partition: int
    #: Bytes and messages of the entries journalled so far.
    journalled_bytes: int = 0
    journalled_count: int = 0
    #: The sequence id last journalled for it (-1: none; it was not sent), and the producer
    #: name it belongs to.
    numbered: int = -1
    sent_as: str = ""
    #: Journalled without ids, as possibly stored already (``refused``, a replay).
    stored_before: bool = False
    #: Journal segments holding its records (it pins them until it is settled).
    segments: list[int] = field(default_factory=list)


class WaitingTopic(Protocol):
    """What of a route-layer ``Topic`` the journal reads (that layer sits above this one)."""

    name: str

    @property
    def unrouted(self) -> list[Any]: ...  # WaitingMessage: ``.data`` is the datagram

    @property
    def unrouted_batches(self) -> list[tuple[int, SealedBatch]]: ...

    @property
    def producers(self) -> Sequence[PartitionProducer]: ...


class WaitGroup:
    """The journalled messages of one topic that wait for its partition count."""

    __slots__ = ("count", "journal", "last")

    def __init__(self) -> None:
        self.journal: JournalEntry | None = None
        #: Messages of ``unrouted`` journalled, and the last of them (to tell that the
        #: list was emptied, by routing or discarding, and filled again since).
        self.count = 0
        self.last: object = None

    def reset(self) -> None:
        """Its messages were routed, discarded or journalled afresh: a new group next time."""
        self.journal, self.count, self.last = None, 0, None
