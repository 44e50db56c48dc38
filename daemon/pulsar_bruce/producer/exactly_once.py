"""Sequence ids a sender chose: a producer that publishes under the sender's name and ids.

A stream connection that begins with a Producer record (``input/stream_session``)
publishes its messages under that record's producer name, with ids the sender
can compute again: on each partition, the n-th message gets ``first id + n``.
A retried Spark task sends the same rows in the same order, so each row gets
the same id again, and broker deduplication (pulsar-broker
``MessageDeduplication.isDuplicate``: per producer name, a batch whose lowest
id is at most the highest id seen is a duplicate) drops what the earlier
attempt stored.

Two rules make that hold whatever the batch boundaries were, sans-IO:

- ids are given when a batch is sealed (:func:`number_sealed`), in message
  order, never at send time: a batch given up or split cannot shift the ids
  of the messages after it;
- before a batch is first written, the part of it the broker already has
  (ids up to ``ProducerSuccess.last_sequence_id``, the highest id it stored
  under the name) is taken out (:func:`take_stored`): the earlier attempt may
  have cut its batches elsewhere, and the broker would drop a batch that
  straddles its last id whole, the new messages in it too.
"""

from __future__ import annotations

from collections import deque
from typing import Protocol

from pulsar_bruce.batch.batch_builder import split_batch
from pulsar_bruce.model.batch import SealedBatch


class SenderNumbered(Protocol):
    """What of a :class:`~.partition_producer.PartitionProducer` these rules use."""

    pending: deque[SealedBatch]
    next_sequence_id: int
    name: str | None
    #: The broker's last stored id under the name, learnt at registration (-1: none).
    stored_up_to: int


def number_sealed(producer: SenderNumbered, first_new: int) -> None:
    """Give the batches sealed into ``pending[first_new:]`` their ids, in order."""
    pending = producer.pending
    next_id = producer.next_sequence_id
    for index in range(first_new, len(pending)):
        batch = pending[index]
        batch.sequence_id = next_id
        batch.producer_name = producer.name or ""
        next_id += batch.count
    producer.next_sequence_id = next_id


def take_stored(producer: SenderNumbered, index: int) -> SealedBatch | None:
    """The part of the unsent batch ``pending[index]`` the broker already has, taken out of
    the queue (the rest, if any, stays in its place); None when it has none of it."""
    pending = producer.pending
    batch = pending[index]
    stored_up_to = producer.stored_up_to
    if batch.sequence_id < 0 or batch.sequence_id > stored_up_to:
        return None
    if batch.highest_sequence_id <= stored_up_to:
        del pending[index]
        return batch
    stored, rest = split_batch(batch, stored_up_to - batch.sequence_id + 1)
    pending[index] = rest
    return stored
