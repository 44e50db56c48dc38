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


def renumber_above(
    pending: Sequence[SealedBatch], next_id: int, issued_from: int, last_sequence_id: int
) -> tuple[int, int, Renumbered | None]:
    """The next id and ``issued_from`` after registration, and what was renumbered: when the
    broker's ``last_sequence_id`` is above every id we assigned, each pending batch that has
    ids is given new ones from ``last_sequence_id + 1`` on, in queue order.

    A renumbered batch is framed again at its next send (:func:`unframe`).
    """
    numbered = [batch for batch in pending if batch.sequence_id >= 0]
    ours = max([next_id - 1, *(b.highest_sequence_id for b in numbered)])
    if last_sequence_id <= ours or not numbered:
        return max(ours, last_sequence_id) + 1, issued_from, None
    next_id = last_sequence_id + 1
    if issued_from < 0:
        issued_from = next_id
    possibly_stored = []
    for batch in numbered:
        unframe(batch)
        if batch.may_be_stored or batch.producer_name:
            possibly_stored.append(batch)
            batch.stored_before = True
        batch.renumbered()  # new ids: never written under them
        batch.sequence_id = next_id
        next_id += batch.count
    return next_id, issued_from, Renumbered(ours, last_sequence_id, len(numbered), possibly_stored)
