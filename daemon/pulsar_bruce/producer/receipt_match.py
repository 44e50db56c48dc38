"""What a broker's ``SendReceipt`` matches among a producer's batches, and when a batch is
answered (a message in chunks has a receipt per chunk).  Sans-IO.

:meth:`~.batch_queue.BatchQueue.receipt` does the matching; the producer's edge
(``answers.py``) acts on the verdict.
"""

from __future__ import annotations

from enum import Enum

from pulsar_bruce.model.batch import SealedBatch


class ReceiptMatch(Enum):
    ACKED = "acked"
    #: A receipt for a batch we already consider done (an old duplicate), or one that
    #: comes while the producer is being closed anyway: ignore it.
    STALE = "stale"
    #: The receipt of one chunk of a chunked message, not its last: the message waits.
    CHUNK = "chunk"
    #: A receipt that matches nothing we expect: the producer's state is unknown, re-create it.
    MISMATCH = "mismatch"


def last_receipt(batch: SealedBatch) -> bool:
    """Count a receipt for ``batch``: True once every one of its frames has its receipt."""
    batch.receipts += 1
    return batch.receipts >= batch.frames
