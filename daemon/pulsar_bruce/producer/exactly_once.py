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

- ids are given when a batch is sealed (``BatchQueue.seal``), in message
  order, never at send time: a batch given up or split cannot shift the ids
  of the messages after it;
- before a batch is first written, a batch that straddles the broker's last
  id (``ProducerSuccess.last_sequence_id``, the highest id pushed under the name)
  is cut there (:func:`stored_part`): the earlier attempt may have cut its
  batches elsewhere, and the broker would drop a batch that straddles its last
  id whole, the new messages in it too.  What the broker may have is sent
  anyway and the broker answers for it (a receipt for message id -1:-1 when it
  stored it), as pulsar-client-java's ``ProducerImpl.resendMessages`` does: the
  pushed id is not a stored one until the write completes, and a failed write
  takes it back (``resetHighestSequenceIdPushed``).
"""

from __future__ import annotations

from pulsar_bruce.model.batch import SealedBatch


def stored_part(batch: SealedBatch, stored_up_to: int) -> int:
    """How many first messages of ``batch`` to cut off as a part of their own: those up to
    the broker's last id, when the batch straddles it (else 0)."""
    if batch.sequence_id < 0 or batch.sequence_id > stored_up_to:
        return 0
    if batch.highest_sequence_id <= stored_up_to:
        return 0
    return stored_up_to - batch.sequence_id + 1
