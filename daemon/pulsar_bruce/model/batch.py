"""A sealed batch: the unit that is compressed, framed, sent, acked, discarded or spooled."""

from __future__ import annotations

from dataclasses import dataclass

from pulsar_bruce.model.confirmation import TagRun


@dataclass(slots=True, eq=False)
class SealedBatch:
    """A closed batch waiting for its receipt.

    Until it is first sent, ``payload`` is the uncompressed run of entries (so
    a batch too large for the broker can still be split); at first send it is
    given its sequence ids (each entry its own), compressed and framed, and the
    frame is kept for resends.
    """

    count: int
    payload: bytes
    #: Memory charged against ``--buffer-max-bytes`` until the batch is acked or discarded
    #: (the sum of its messages' charges, see :func:`pulsar_bruce.model.ledger.memory_charge`).
    buffer_bytes: int
    sequence_id: int = -1
    #: Which messages came from stream connections awaiting confirmation (None: none did).
    tags: list[TagRun] | None = None
    frame: bytes = b""
    #: Set by the I/O edge: when the batch was sealed and last written (monotonic seconds).
    created_at: float = 0.0
    sent_at: float = 0.0
    send_attempts: int = 0
    #: Times the producer was re-created because the broker failed this batch (a send error,
    #: an overdue or a mismatched receipt): what ``--max-send-attempts`` bounds.  Writes lost
    #: with a connection or a producer the broker closed (restart, unload) do not count.
    failed_sends: int = 0
    #: A batch back from the spool that keeps its sequence ids: the producer name they
    #: belong to (empty otherwise).
    producer_name: str = ""
    #: Send frames in ``frame``: more than one for a message sent as chunks, each
    #: acknowledged by its own receipt; ``receipts`` counts them on the current connection.
    frames: int = 1
    receipts: int = 0

    @property
    def highest_sequence_id(self) -> int:
        return self.sequence_id + self.count - 1
