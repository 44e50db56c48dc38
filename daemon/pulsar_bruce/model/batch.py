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
    #: Writes under its current ids that the broker answered with a ``SendError``: each
    #: stored nothing.  ``send_attempts - refused_writes`` writes have an unknown outcome.
    refused_writes: int = 0
    #: Chunks of the current write refused: the write stored nothing once all are (a chunk
    #: of it stored may, with another write's chunks under one uuid, make up the message).
    chunks_refused: int = 0
    #: It may be stored under ids it no longer has (written, then renumbered), or by a run
    #: before this one (replayed from the journal or the spool after it was written).
    stored_before: bool = False

    @property
    def may_be_stored(self) -> bool:
        """Whether the broker may hold it: a write whose outcome is unknown, or an earlier
        copy (``reasons.given_up`` says ``unconfirmed`` then, not a loss)."""
        return self.send_attempts > self.refused_writes or self.stored_before

    def refused(self, chunks: int = 1) -> None:
        """The broker refused ``chunks`` of the current write (all: every one it has)."""
        before, self.chunks_refused = self.chunks_refused, self.chunks_refused + chunks
        if before < self.frames <= self.chunks_refused:
            self.refused_writes += 1

    def inherit(self, whole: SealedBatch) -> None:
        """A part of ``whole`` under the same ids: it shares its writes' history."""
        self.send_attempts, self.refused_writes = whole.send_attempts, whole.refused_writes
        self.failed_sends, self.stored_before = whole.failed_sends, whole.stored_before

    def forget_writes(self) -> None:
        """It goes under new ids (``BatchQueue`` gives them): no write under them yet; what it
        may be stored as before is remembered (``stored_before``)."""
        self.stored_before = self.may_be_stored
        self.send_attempts = self.refused_writes = 0

    @property
    def highest_sequence_id(self) -> int:
        return self.sequence_id + self.count - 1
