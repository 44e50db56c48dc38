"""Sequence ids at registration: renumber our batches when the broker is already past them.

Resending unconfirmed batches under their ids is what lets broker deduplication
drop the copies it stored (pulsar-broker ``MessageDeduplication.isDuplicate``:
per producer name, any id at most the highest one seen is a duplicate, answered
with a receipt for message id -1:-1 and not stored).  That holds only while the
ids above ours are ours too.  When ``ProducerSuccess.last_sequence_id`` is above
every id this daemon assigned, another process produced under our name (two
daemons with one host name and prefix): resending under the old ids would be
dropped as duplicates of someone else's messages, so every numbered batch is
given new ids after the broker's (:func:`renumber`, from ``BatchQueue.registered``).
Sans-IO.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from pulsar_bruce.batch.batch_builder import unframe
from pulsar_bruce.model.batch import SealedBatch


@dataclass(frozen=True, slots=True)
class Renumbered:
    """Batches given new ids at registration, for the edge to log and count."""

    #: The highest sequence id this daemon had assigned under the name.
    ours: int
    #: The broker's ``last_sequence_id`` for the name (above ``ours``).
    broker: int
    batches: int
    #: Those among them that may already be stored under the ids they had: written before in
    #: this run, or numbered by a run before it (a crash can come between a write and the
    #: journal's record of its receipt).  Sent again under new ids, the broker cannot drop
    #: them as duplicates: possible duplicates, with evidence.
    possibly_stored: list[SealedBatch]


def highest_assigned(numbered: Sequence[SealedBatch], next_id: int) -> int:
    """The highest id this daemon gave under its name: below ``next_id``, or a numbered
    batch's.  When the broker's ``last_sequence_id`` is above it, the pending batches are
    renumbered after the broker's (``BatchQueue.registered``), framed again at their next
    send."""
    return max([next_id - 1, *(batch.highest_sequence_id for batch in numbered)])


def renumber(numbered: Sequence[SealedBatch], ours: int, broker: int) -> tuple[int, Renumbered]:
    """The broker is past every id we gave: each numbered batch, in queue order, goes under
    new ids after ``broker``'s, framed again at its next send.  The next id after them, and
    what was renumbered."""
    next_id = broker + 1
    possibly_stored = []
    for batch in numbered:
        unframe(batch)
        if batch.may_be_stored or batch.producer_name:
            possibly_stored.append(batch)
            batch.stored_before = True
        take_ids_back(batch)  # new ids: never written under them
        batch.sequence_id = next_id
        next_id += batch.count
    return next_id, Renumbered(ours, broker, len(numbered), possibly_stored)


def take_ids_back(batch: SealedBatch) -> None:
    """``batch`` goes under new ids (the next ones, when it is framed): no write under
    them yet; what it may be stored as before is remembered (``stored_before``)."""
    batch.forget_writes()
    batch.sequence_id, batch.producer_name = -1, ""
