"""Sequence ids at registration: renumber our batches when the broker is already past them.

Resending unconfirmed batches under their ids is what lets broker deduplication
drop the copies it stored (pulsar-broker ``MessageDeduplication.isDuplicate``:
per producer name, any id at most the highest one seen is a duplicate, answered
with a receipt for message id -1:-1 and not stored).  That holds only while the
ids above ours are ours too.  When ``ProducerSuccess.last_sequence_id`` is above
every id this daemon assigned, another process produced under our name (two
daemons with one host name and prefix): resending under the old ids would be
dropped as duplicates of someone else's messages, so every numbered batch is
given new ids after the broker's.  Sans-IO.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Protocol

from pulsar_bruce.batch.batch_builder import batch_entries_of
from pulsar_bruce.model.batch import SealedBatch


class Numbering(Protocol):
    """What of a :class:`~.partition_producer.PartitionProducer` the renumbering uses."""

    pending: deque[SealedBatch]
    next_sequence_id: int
    issued_from: int


@dataclass(frozen=True, slots=True)
class Renumbered:
    """Batches given new ids at registration, for the edge to log and count."""

    #: The highest sequence id this daemon had assigned under the name.
    ours: int
    #: The broker's ``last_sequence_id`` for the name (above ``ours``).
    broker: int
    batches: int
    #: Messages among them written in this run before: possible duplicates.  (Batches from
    #: the spool were counted as such when they were read back.)
    resent_messages: int


def renumber_above(producer: Numbering, last_sequence_id: int) -> Renumbered | None:
    """Set ``producer.next_sequence_id`` after registration; when the broker's
    ``last_sequence_id`` is above every id we assigned, renumber each pending batch
    that has ids from ``last_sequence_id + 1`` on, in queue order, and return what
    changed.

    A renumbered batch is framed again at its next send: a batch frame gives its
    entries back (:func:`batch_entries_of`), a chunked message kept its payload.
    """
    numbered = [batch for batch in producer.pending if batch.sequence_id >= 0]
    ours = max([producer.next_sequence_id - 1, *(b.highest_sequence_id for b in numbered)])
    producer.next_sequence_id = max(ours, last_sequence_id) + 1
    if last_sequence_id <= ours or not numbered:
        return None
    next_id = last_sequence_id + 1
    if producer.issued_from < 0:
        producer.issued_from = next_id
    resent = 0
    for batch in numbered:
        if batch.frame and not batch.payload:
            batch.payload = batch_entries_of(batch)
        batch.frame = b""
        batch.frames, batch.receipts = 1, 0
        if batch.send_attempts:
            resent += batch.count
        batch.sequence_id = next_id
        batch.producer_name, batch.send_attempts = "", 0  # new ids: never written under them
        next_id += batch.count
    producer.next_sequence_id = next_id
    return Renumbered(ours, last_sequence_id, len(numbered), resent)
