"""A topic whose own message size limit is below the broker's: split batches to fit it.

The broker tells a client its ``maxMessageSize`` at Connect, but a topic or
namespace policy can set a lower one, checked only when a message arrives
(pulsar-broker ``PersistentTopic.publishMessage`` / ``isExceedMaximumMessageSize``:
``SendError`` ``NotAllowedError`` "Exceed maximum message size", nothing stored).
The Java client fails such a batch (``ProducerImpl.recoverNotAllowedError``).
We learn the limit from the refusal instead: the batch is cut in halves that
are sent again, each message under the id it had, and the producer's batches
are kept below the size that failed from then on
(``PartitionProducer.resend_in_halves`` says when the ids can be kept).  A
single message over the limit cannot be cut: it is discarded as ``too_large``.
Sans-IO.
"""

from __future__ import annotations

from pulsar_bruce.batch.batch_builder import batch_entries_of, split_batch
from pulsar_bruce.model.batch import SealedBatch

#: The text of the broker's refusal (``PersistentTopic.publishMessage``).
TOPIC_SIZE_TEXT = "Exceed maximum message size"
#: Batches are never limited below this many bytes by a refusal (a message is sent alone).
MIN_BATCH_BYTES = 1024


def over_topic_limit(message: str) -> bool:
    return TOPIC_SIZE_TEXT.lower() in message.lower()


def halves_for_topic_limit(batch: SealedBatch) -> tuple[int, list[SealedBatch]]:
    """The batch size limit learnt from ``batch``'s refusal, and the batches to send in its
    place: two halves (each message keeps its id: ``BatchQueue.refuse`` hands them),
    replacing ``batch`` in the journal (none for a single message, which is discarded)."""
    entries = batch.payload if batch.payload or not batch.frame else batch_entries_of(batch)
    limit = max(MIN_BATCH_BYTES, len(entries) // 2)
    if batch.count < 2:
        return limit, []
    whole = SealedBatch(
        count=batch.count,
        payload=entries,
        buffer_bytes=batch.buffer_bytes,
        tags=batch.tags,
        created_at=batch.created_at,
    )
    whole.inherit(batch)  # an earlier write may be stored: its halves' -1:-1 is our copy
    first, rest = split_batch(whole)
    return limit, [first, rest]
